package kubernetes

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/inject"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// The job runner reaches main the way Tekton and Argo inject their entrypoints: the init
// container InjectContainer runs `outpost-agent inject` from the agent image, which copies the
// binary into the emptyDir runnerVolume, and main runs it from there (JobCommand). So main can use
// any image with terraform or tofu, and needs no Outpost binary of its own.
const (
	// InjectContainer is the name of the init container that copies the job runner.
	InjectContainer = "outpost-inject"
	runnerVolume    = "outpost-runner"
	runnerMountPath = "/outpost/bin"
)

// JobCommand is what main runs: the job runner, as copied into the pod by InjectContainer.
var JobCommand = []string{path.Join(runnerMountPath, inject.BinaryName), "job"}

// injectArgs are the init container's arguments; its command is the agent image's entrypoint,
// outpost-agent, wherever an image built from another recipe puts it.
var injectArgs = []string{"inject", runnerMountPath}

// Defaults of the Job spec.
const (
	minTerminationGrace = 120 * time.Second
	ttlAfterFinished    = 24 * 3600
	// runnerVolumeLimit bounds the emptyDir holding the job runner (about 31 MiB).
	runnerVolumeLimit = "128Mi"
)

// PodOptions are the agent-wide inputs of the Job a claimed attempt becomes. The cluster owner's
// settings carry the names of the agent's configuration file (section jobs); the fields tagged
// "-" are shared with the rest of the agent, which fills them in.
type PodOptions struct {
	RunnerID string `json:"-"`
	// Image is the image of main when the runner's pod template names none (the chart's
	// jobs.image). An image set on main in the template wins.
	Image string `json:"image"`
	// AgentImage is the image the job runner is copied from (the agent's own).
	AgentImage string `json:"agentImage"`
	APIURL     string `json:"-"`
	// InsecureAllowHTTP hands the agent's --insecure-allow-http on to the job runner.
	InsecureAllowHTTP bool `json:"-"`
	// StateURL is where job runners reach the agent's state backend; set only for kubernetes state.
	StateURL string `json:"-"`
	// StateCA is the PEM of the state backend's CA, handed to the job runner (jobenv.StateCA)
	// with StateURL; empty when the state backend serves no TLS.
	StateCA string `json:"-"`
	// CLI is the job runners' CLI; empty lets each take whichever of tofu and terraform its image has.
	CLI string `json:"-"`
	// PodLabels are extra labels of job pods, e.g. for NetworkPolicies.
	PodLabels map[string]string `json:"podLabels"`
	// ImagePullSecrets are added to job pods.
	ImagePullSecrets []string `json:"imagePullSecrets"`
	// CASecret names a Secret (in the jobs namespace) with a CA bundle mounted into job pods.
	CASecret string `json:"caSecret"`
	// CASecretKey is the data key of the CA bundle in CASecret (default ca.crt).
	CASecretKey string `json:"caSecretKey"`
	// ProxyEnv are the proxy variables (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) for main; each is set
	// in upper and lower case. A template whose main sets any proxy variable keeps its own.
	ProxyEnv map[string]string `json:"-"`
	// Resources are main's resources when neither the runner's pod template nor its job pod
	// settings set any (the chart's jobs.resources).
	Resources corev1.ResourceRequirements `json:"resources"`
	// ForwardEnv are variables of the agent's environment handed on to main (the chart's
	// jobs.forwardEnv); a variable of the same name set by the runner wins, an empty one is left out.
	ForwardEnv map[string]string `json:"-"`
	// PluginCache, when set, is the cluster owner's volume for the CLI's provider plugin cache
	// (chart value jobs.pluginCache), mounted into main at pluginCacheMountPath for applies and
	// destroys, never for plans (see sharesPluginCache).
	PluginCache *corev1.VolumeSource `json:"pluginCache,omitempty"`
	// ProviderInstallation is a provider_installation block for the CLI (chart value
	// jobs.providerInstallation): network or filesystem mirrors for clusters without registry access.
	ProviderInstallation string `json:"providerInstallation"`
	// TTLAfterFinished is how long the Job controller keeps a finished Job the agent has not
	// deleted; zero is a day. New sets a week when the executor keeps a history.
	TTLAfterFinished int32 `json:"-"`
	// CancelGrace is the time the CLI gets to stop on cancel; it sets the pod's termination
	// grace (at least 120 s) and is added to the job timeout for activeDeadlineSeconds.
	CancelGrace time.Duration `json:"-"`
}

// BuildJob turns a claim into the Job and the token Secret that run its attempt. The user's pod
// template with the runner's job pod settings applied (podtemplate.Apply) is the base, the agent's overlay is merged over it with a strategic merge patch
// (containers, env, mounts and volumes merge by name, so the user's sidecars, volumes and env
// stay), and the fields the agent owns are re-asserted after the merge so no template can take them
// over. A template that breaks the contract returns a *podtemplate.Error.
func BuildJob(c *api.Claim, stateToken string, o PodOptions, now time.Time) (*batchv1.Job, *corev1.Secret, error) {
	p := &c.Placement
	base, err := podtemplate.Parse(p.Job.PodTemplate)
	if err != nil {
		return nil, nil, err
	}
	if err := podtemplate.Apply(base, p.Job.Pod); err != nil {
		return nil, nil, err
	}
	name := JobName(c.DeploymentID, c.Attempt)
	labels := map[string]string{
		LabelManagedBy:    ManagedByValue,
		LabelRunnerID:     o.RunnerID,
		LabelDeploymentID: labelValue(c.DeploymentID),
		LabelAttempt:      strconv.Itoa(c.Attempt),
		LabelOperation:    string(p.Operation),
	}
	env := ownedEnv(c, o)
	mounts := []corev1.VolumeMount{
		{Name: tokenVolume, MountPath: tokenMountPath, ReadOnly: true},
		{Name: runnerVolume, MountPath: runnerMountPath, ReadOnly: true},
	}
	volumes := []corev1.Volume{
		{Name: tokenVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: TokenSecretName(name, tokenDigest(c.JobToken)), DefaultMode: ptr.To[int32](0o444),
		}}},
		{Name: runnerVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			SizeLimit: ptr.To(resource.MustParse(runnerVolumeLimit)),
		}}},
	}
	if sharesPluginCache(c, o) {
		mounts = append(mounts, corev1.VolumeMount{Name: pluginCacheVolume, MountPath: pluginCacheMountPath})
		volumes = append(volumes, corev1.Volume{Name: pluginCacheVolume, VolumeSource: *o.PluginCache.DeepCopy()})
	}
	if o.CASecret != "" {
		mounts = append(mounts, corev1.VolumeMount{Name: caVolume, MountPath: caMountPath, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: caVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: o.CASecret}}})
	}
	overlay := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: mergeLabels(o.PodLabels, labels)},
		Spec: corev1.PodSpec{
			RestartPolicy:      corev1.RestartPolicyNever,
			ServiceAccountName: p.Job.ServiceAccount,
			InitContainers:     []corev1.Container{injectContainer(o.AgentImage)},
			// main's image is not in the overlay: the template's wins, and reassert fills in
			// the default when it names none.
			Containers: []corev1.Container{{
				Name: podtemplate.MainContainer, Command: JobCommand,
				Env: env, VolumeMounts: mounts,
				TerminationMessagePath: corev1.TerminationMessagePathDefault, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			Volumes: volumes,
		},
	}
	for _, s := range o.ImagePullSecrets {
		overlay.Spec.ImagePullSecrets = append(overlay.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	tpl, err := merge(base, &overlay)
	if err != nil {
		return nil, nil, err
	}
	reassert(tpl, &overlay, o)
	grace := max(o.CancelGrace, minTerminationGrace)
	if tpl.Spec.TerminationGracePeriodSeconds == nil || *tpl.Spec.TerminationGracePeriodSeconds < int64(grace.Seconds()) {
		tpl.Spec.TerminationGracePeriodSeconds = ptr.To(int64(grace.Seconds()))
	}
	timeout := p.TimeoutSeconds
	if timeout <= 0 {
		timeout = api.DefaultJobTimeoutSeconds
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: p.Job.Namespace, Labels: labels,
			Annotations: map[string]string{
				AnnDeploymentID: c.DeploymentID,
				AnnFencing:      strconv.FormatInt(c.Lease.Fencing, 10),
				AnnStateKey:     p.StateKey,
				AnnClaimedAt:    now.UTC().Format(time.RFC3339Nano),
			},
		},
		Spec: batchv1.JobSpec{
			// The orchestrator decides retries: an apply whose pod started must never re-run by itself.
			BackoffLimit:            ptr.To[int32](0),
			PodReplacementPolicy:    ptr.To(batchv1.Failed),
			ActiveDeadlineSeconds:   ptr.To(int64(timeout) + int64(o.CancelGrace.Seconds())),
			TTLSecondsAfterFinished: ptr.To(cmp.Or(o.TTLAfterFinished, ttlAfterFinished)),
			// The first rule that matches a failed pod decides, so the disruption rule comes
			// first: an evicted pod's main ends with 143 (SIGTERM), which the exit-code rule
			// would take for a failure of the run, and a plan evicted mid-run would fail.
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{Action: disruptionAction(p.Operation), OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
					{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue},
				}},
				{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					ContainerName: ptr.To(podtemplate.MainContainer), Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0},
				}},
			}},
			Template: *tpl,
		},
	}
	if ns := p.KubernetesStateNamespace(); ns != "" {
		job.Annotations[AnnStateNS] = ns
	}
	if p.ApplyPlan != nil {
		job.Annotations[AnnPlanOf] = p.ApplyPlan.DeploymentID
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: TokenSecretName(name, tokenDigest(c.JobToken)), Namespace: p.Job.Namespace, Labels: labels,
			Annotations: map[string]string{AnnDeploymentID: c.DeploymentID}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{tokenKey: []byte(c.JobToken), stateTokenKey: []byte(stateToken)},
	}
	return job, secret, nil
}

// disruptionAction says what a pod evicted or preempted does to its Job. A plan is read-only, so
// a replacement pod may simply run it again (Ignore). An apply or destroy may have changed
// infrastructure before the eviction, and the pod failure policy cannot tell whether main had
// started, so the Job fails and the orchestrator (or a person) decides; an apply is never re-run
// behind anyone's back.
func disruptionAction(operation api.Operation) batchv1.PodFailurePolicyAction {
	if operation == api.OperationPlan {
		return batchv1.PodFailurePolicyActionIgnore
	}
	return batchv1.PodFailurePolicyActionFailJob
}

// ownedEnv is the job runner's environment (package jobenv); the token itself never goes into env.
// sharesPluginCache reports whether the attempt gets the shared provider plugin cache: applies
// and destroys do, plans do not. The cache is written by whoever uses it and its providers are
// run by every later attempt, so a plan (often of code nobody reviewed yet, such as a pull
// request's) could otherwise plant a provider binary that a later apply runs with the
// permissions of an apply. Plans download their providers (or take them from
// jobs.providerInstallation's mirrors).
func sharesPluginCache(c *api.Claim, o PodOptions) bool {
	return o.PluginCache != nil && c.Placement.Operation != api.OperationPlan
}

func ownedEnv(c *api.Claim, o PodOptions) []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: jobenv.APIURL, Value: o.APIURL},
		{Name: jobenv.TokenFile, Value: tokenMountPath + "/" + tokenKey},
		{Name: jobenv.StateTokenFile, Value: tokenMountPath + "/" + stateTokenKey},
		{Name: jobenv.CLI, Value: o.CLI},
	}
	if c.Placement.StateStorage.Type == api.StateStorageKubernetes && o.StateURL != "" {
		// The CA even when empty, so the agent's value replaces any the pod template sets.
		env = append(env, corev1.EnvVar{Name: jobenv.StateURL, Value: o.StateURL}, corev1.EnvVar{Name: jobenv.StateCA, Value: o.StateCA})
	}
	// Always set, so the agent's value replaces any the pod template sets.
	env = append(env, corev1.EnvVar{Name: jobenv.InsecureAllowHTTP, Value: strconv.FormatBool(o.InsecureAllowHTTP)})
	if sharesPluginCache(c, o) {
		env = append(env, corev1.EnvVar{Name: jobenv.PluginCacheDir, Value: pluginCacheMountPath})
	}
	if o.ProviderInstallation != "" {
		env = append(env, corev1.EnvVar{Name: jobenv.ProviderInstallation, Value: o.ProviderInstallation})
	}
	if o.CASecret != "" {
		key := o.CASecretKey
		if key == "" {
			key = caFileKey
		}
		env = append(env, corev1.EnvVar{Name: jobenv.CABundleFile, Value: caMountPath + "/" + key})
	}
	return env
}

func merge(base, overlay *corev1.PodTemplateSpec) (*corev1.PodTemplateSpec, error) {
	baseJSON, err := json.Marshal(base)
	if err != nil {
		return nil, fmt.Errorf("encode pod template: %w", err)
	}
	overlayJSON, err := json.Marshal(overlay)
	if err != nil {
		return nil, fmt.Errorf("encode agent overlay: %w", err)
	}
	merged, err := strategicpatch.StrategicMergePatch(baseJSON, overlayJSON, corev1.PodTemplateSpec{})
	if err != nil {
		return nil, &podtemplate.Error{Message: "cannot merge the agent's settings into the pod template: " + err.Error()}
	}
	var out corev1.PodTemplateSpec
	if err := json.Unmarshal(merged, &out); err != nil {
		return nil, fmt.Errorf("decode merged pod template: %w", err)
	}
	return &out, nil
}

// reassert puts back every field the agent owns, whatever the merge made of it: a template must
// not be able to change the restart policy, the identity the job runner runs as, how the agent
// finds its pods, what main runs, how the job runner gets into the pod, or where the token comes
// from. main's image is the template's, or the default when it names none.
func reassert(tpl *corev1.PodTemplateSpec, overlay *corev1.PodTemplateSpec, o PodOptions) {
	tpl.Labels = mergeLabels(tpl.Labels, overlay.Labels)
	tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	tpl.Spec.ServiceAccountName = overlay.Spec.ServiceAccountName
	tpl.Spec.DeprecatedServiceAccount = "" //nolint:staticcheck // cleared so it cannot disagree
	// The injecting init container runs first, exactly as built, before any of the template's.
	inits := []corev1.Container{overlay.Spec.InitContainers[0]}
	for _, c := range tpl.Spec.InitContainers {
		if c.Name != InjectContainer {
			inits = append(inits, c)
		}
	}
	tpl.Spec.InitContainers = inits
	want := overlay.Spec.Containers[0]
	for i := range tpl.Spec.Containers {
		c := &tpl.Spec.Containers[i]
		if c.Name != podtemplate.MainContainer {
			continue
		}
		if c.Image == "" {
			c.Image = o.Image
		}
		if len(c.Resources.Requests) == 0 && len(c.Resources.Limits) == 0 {
			c.Resources = *o.Resources.DeepCopy()
		}
		c.Env = addAbsent(c.Env, forwardEnv(o.ForwardEnv))
		c.Command = append([]string(nil), want.Command...)
		c.Args = nil
		c.TerminationMessagePath, c.TerminationMessagePolicy = want.TerminationMessagePath, want.TerminationMessagePolicy
		env := append(slices.Clone(want.Env), corev1.EnvVar{Name: jobenv.Image, Value: c.Image})
		if !setsProxy(c.Env) {
			env = append(env, proxyEnv(o.ProxyEnv)...)
		}
		c.Env = podtemplate.ReplaceByKey(c.Env, env, func(e corev1.EnvVar) []string { return []string{e.Name} })
		c.VolumeMounts = podtemplate.ReplaceByKey(c.VolumeMounts, want.VolumeMounts, func(m corev1.VolumeMount) []string { return []string{m.Name, m.MountPath} })
	}
	tpl.Spec.Volumes = podtemplate.ReplaceByKey(tpl.Spec.Volumes, overlay.Spec.Volumes, func(v corev1.Volume) []string { return []string{v.Name} })
}

// injectContainer is the init container that copies the job runner into the pod. It passes the
// Pod Security Standard "restricted" on its own (non-root, no privilege escalation, no
// capabilities, RuntimeDefault seccomp) and writes nothing but the emptyDir.
func injectContainer(image string) corev1.Container {
	return corev1.Container{
		Name: InjectContainer, Image: image, Args: slices.Clone(injectArgs),
		VolumeMounts: []corev1.VolumeMount{{Name: runnerVolume, MountPath: runnerMountPath}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
			AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), Privileged: ptr.To(false),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// ValidateResources checks the default resources of main (the chart's jobs.resources).
func ValidateResources(r corev1.ResourceRequirements) error {
	for name, req := range r.Requests {
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			return fmt.Errorf("requests.%s %s is above limits.%s %s", name, req.String(), name, lim.String())
		}
	}
	return nil
}

func mergeLabels(base, over map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// owned is what the options put into every job pod, for the job pod policy: the attempt's token
// Secret, the CA bundle, the image pull Secrets and the plugin cache's claim.
func (o PodOptions) owned(tokenSecret string) Owned {
	own := Owned{Secrets: append([]string{tokenSecret, o.CASecret}, o.ImagePullSecrets...)}
	if o.PluginCache != nil && o.PluginCache.PersistentVolumeClaim != nil {
		own.Claims = append(own.Claims, o.PluginCache.PersistentVolumeClaim.ClaimName)
	}
	return own
}
