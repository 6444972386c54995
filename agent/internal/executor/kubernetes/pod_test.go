package kubernetes

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

const userTemplate = `{
  "metadata": {"labels": {"team": "infra"}, "annotations": {"testbed.outpost.dev/exit-code": "2"}},
  "spec": {
    "nodeSelector": {"pool": "iac"},
    "terminationGracePeriodSeconds": 30,
    "imagePullSecrets": [{"name": "user-pull"}],
    "initContainers": [{"name": "outpost-inject", "image": "evil/copier:1"}, {"name": "warm-cache", "image": "user/warm:1"}],
    "containers": [
      {"name": "main", "image": "user/image:1", "env": [{"name": "TF_LOG", "value": "INFO"}, {"name": "OUTPOST_API_URL", "value": "http://evil"}],
       "volumeMounts": [{"name": "cache", "mountPath": "/cache"}, {"name": "sneaky", "mountPath": "/var/run/outpost/job"}],
       "resources": {"limits": {"memory": "1Gi"}}},
      {"name": "proxy", "image": "envoy:1", "args": ["--config", "/etc/envoy.yaml"]}
    ],
    "volumes": [{"name": "cache", "emptyDir": {}}, {"name": "outpost-job-token", "emptyDir": {}}, {"name": "outpost-runner", "hostPath": {"path": "/usr/bin"}}]
  }
}`

func claim(tpl string) *api.Claim {
	return &api.Claim{
		DeploymentID: "dep-123", Attempt: 2, JobToken: "opj_secret", Lease: api.Lease{Fencing: 7},
		Placement: api.Placement{Operation: api.OperationApply, StateKey: "prod/net", TimeoutSeconds: 600,
			StateStorage: api.StateStorage{StateStorageInput: api.StateStorageInput{Type: api.StateStorageKubernetes}},
			Job:          api.RunnerJob{Namespace: "jobs", ServiceAccount: "deployer", PodTemplate: tpl}},
	}
}

var opts = PodOptions{RunnerID: "r1", Image: "outpost/job:1", AgentImage: "outpost/agent:1", APIURL: "https://orch", StateURL: "http://agent:8080", CLI: "tofu",
	PodLabels: map[string]string{"np": "allow-agent"}, ImagePullSecrets: []string{"agent-pull"}, CASecret: "corp-ca", CancelGrace: 150 * time.Second,
	ProxyEnv: map[string]string{"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": ".svc,10.0.0.0/8"}}

func TestBuildJobMergesTemplateAndReassertsOwnedFields(t *testing.T) {
	job, secret, err := BuildJob(claim(userTemplate), "opst_test", opts, time.Unix(1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if job.Name != "outpost-dep-123-2" || job.Namespace != "jobs" {
		t.Errorf("job name/namespace = %s/%s", job.Namespace, job.Name)
	}
	js := job.Spec
	if *js.BackoffLimit != 0 || *js.TTLSecondsAfterFinished != 86400 || *js.ActiveDeadlineSeconds != 600+150 {
		t.Errorf("backoffLimit %d ttl %d deadline %d", *js.BackoffLimit, *js.TTLSecondsAfterFinished, *js.ActiveDeadlineSeconds)
	}
	// Disruptions first: an evicted pod's main exits 143, which the exit-code rule would match.
	if js.PodFailurePolicy == nil || len(js.PodFailurePolicy.Rules) != 2 || js.PodFailurePolicy.Rules[1].OnExitCodes == nil ||
		*js.PodFailurePolicy.Rules[1].OnExitCodes.ContainerName != "main" || js.PodFailurePolicy.Rules[0].OnPodConditions[0].Type != corev1.DisruptionTarget ||
		js.PodFailurePolicy.Rules[0].Action != batchv1.PodFailurePolicyActionFailJob {
		t.Errorf("pod failure policy = %+v", js.PodFailurePolicy)
	}
	if job.Annotations[AnnFencing] != "7" || job.Annotations[AnnStateKey] != "prod/net" || job.Annotations[AnnDeploymentID] != "dep-123" {
		t.Errorf("annotations = %v", job.Annotations)
	}
	pod := js.Template
	// The chart's PodDisruptionBudget of applies and destroys selects by the operation label.
	wantLabels := map[string]string{"team": "infra", "np": "allow-agent", LabelManagedBy: ManagedByValue, LabelRunnerID: "r1", LabelDeploymentID: "dep-123", LabelAttempt: "2",
		LabelOperation: "apply"}
	for k, v := range wantLabels {
		if pod.Labels[k] != v {
			t.Errorf("pod label %s = %q, want %q", k, pod.Labels[k], v)
		}
	}
	if pod.Annotations["testbed.outpost.dev/exit-code"] != "2" {
		t.Errorf("user's pod annotation lost: %v", pod.Annotations)
	}
	ps := pod.Spec
	if ps.RestartPolicy != corev1.RestartPolicyNever || ps.ServiceAccountName != "deployer" {
		t.Errorf("restartPolicy %q serviceAccountName %q", ps.RestartPolicy, ps.ServiceAccountName)
	}
	if *ps.TerminationGracePeriodSeconds != 150 {
		t.Errorf("terminationGracePeriodSeconds = %d, want 150 (cancel grace, ≥120)", *ps.TerminationGracePeriodSeconds)
	}
	if ps.NodeSelector["pool"] != "iac" {
		t.Errorf("user's nodeSelector lost: %v", ps.NodeSelector)
	}
	if got := names(ps.ImagePullSecrets, func(r corev1.LocalObjectReference) string { return r.Name }); !slices.Equal(got, []string{"agent-pull", "user-pull"}) && !slices.Equal(got, []string{"user-pull", "agent-pull"}) {
		t.Errorf("imagePullSecrets = %v", got)
	}
	if len(ps.Containers) != 2 {
		t.Fatalf("containers = %d, want main + proxy", len(ps.Containers))
	}
	var main, proxy corev1.Container
	for _, c := range ps.Containers {
		switch c.Name {
		case "main":
			main = c
		case "proxy":
			proxy = c
		}
	}
	if proxy.Image != "envoy:1" || !slices.Equal(proxy.Args, []string{"--config", "/etc/envoy.yaml"}) {
		t.Errorf("sidecar changed: %+v", proxy)
	}
	// The template's image wins; the job runner comes from the injected copy.
	if main.Image != "user/image:1" || !slices.Equal(main.Command, []string{"/outpost/bin/outpost-agent", "job"}) || main.Args != nil {
		t.Errorf("main image %q command %v args %v", main.Image, main.Command, main.Args)
	}
	if main.TerminationMessagePath != "/dev/termination-log" || main.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("main termination message %q %q", main.TerminationMessagePath, main.TerminationMessagePolicy)
	}
	checkInjection(t, ps, "outpost/agent:1")
	if len(ps.InitContainers) != 2 || ps.InitContainers[1].Name != "warm-cache" || ps.InitContainers[1].Image != "user/warm:1" {
		t.Errorf("the template's own init container must run after the injection: %+v", ps.InitContainers)
	}
	if main.Resources.Limits.Memory().String() != "1Gi" {
		t.Errorf("user's resources lost: %v", main.Resources)
	}
	env := map[string]string{}
	for _, e := range main.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s twice", e.Name)
		}
		env[e.Name] = e.Value
	}
	wantEnv := map[string]string{"TF_LOG": "INFO", "OUTPOST_API_URL": "https://orch", "OUTPOST_STATE_URL": "http://agent:8080", "OUTPOST_CLI": "tofu",
		"OUTPOST_JOB_TOKEN_FILE": "/var/run/outpost/job/token", "OUTPOST_STATE_TOKEN_FILE": "/var/run/outpost/job/state-token", "OUTPOST_CA_BUNDLE_FILE": "/etc/outpost/ca/ca.crt", "OUTPOST_IMAGE": "user/image:1",
		"HTTPS_PROXY": "http://proxy:3128", "https_proxy": "http://proxy:3128", "NO_PROXY": ".svc,10.0.0.0/8", "no_proxy": ".svc,10.0.0.0/8"}
	for k, v := range wantEnv {
		if env[k] != v {
			t.Errorf("main env %s = %q, want %q", k, env[k], v)
		}
	}
	for k, v := range env {
		if v == "opj_secret" || v == "opst_test" {
			t.Errorf("a credential is in env %s", k)
		}
	}
	mounts := map[string]string{}
	for _, m := range main.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	if mounts["/cache"] != "cache" || mounts["/var/run/outpost/job"] != tokenVolume || mounts["/etc/outpost/ca"] != caVolume ||
		mounts["/outpost/bin"] != runnerVolume || len(mounts) != 4 {
		t.Errorf("main mounts = %v", mounts)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		vols[v.Name] = v
	}
	if vols["cache"].EmptyDir == nil || len(vols) != 4 {
		t.Errorf("volumes = %v", vols)
	}
	if tv := vols[tokenVolume]; tv.Secret == nil || tv.Secret.SecretName != "outpost-dep-123-2-token-"+tokenDigest("opj_secret")[:16] || tv.EmptyDir != nil {
		t.Errorf("token volume = %+v", tv)
	}
	if secret.Name != vols[tokenVolume].Secret.SecretName || string(secret.Data["token"]) != "opj_secret" || string(secret.Data["state-token"]) != "opst_test" ||
		len(secret.Data) != 2 || secret.Namespace != "jobs" {
		t.Errorf("secret = %s/%s %v", secret.Namespace, secret.Name, secret.Data)
	}
}

func TestBuildJobEmptyTemplate(t *testing.T) {
	c := claim("")
	c.Placement.StateStorage.Type = api.StateStorageS3
	c.Placement.Operation = api.OperationPlan
	job, _, err := BuildJob(c, "opst_test", PodOptions{RunnerID: "r1", Image: "img", AgentImage: "agent-img", APIURL: "https://o", CLI: "terraform", CancelGrace: 10 * time.Second}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if a := job.Spec.PodFailurePolicy.Rules[0].Action; a != batchv1.PodFailurePolicyActionIgnore {
		t.Errorf("a plan evicted before it ran should be replaced (Ignore), got %s", a)
	}
	ps := job.Spec.Template.Spec
	if len(ps.Containers) != 1 || ps.Containers[0].Image != "img" || *ps.TerminationGracePeriodSeconds != 120 {
		t.Errorf("pod = %+v", ps)
	}
	checkInjection(t, ps, "agent-img")
	for _, e := range ps.Containers[0].Env {
		switch e.Name {
		case "OUTPOST_STATE_URL":
			t.Error("OUTPOST_STATE_URL set for s3 state storage")
		case "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy":
			t.Errorf("%s set although the agent has no proxy", e.Name)
		case "OUTPOST_IMAGE":
			if e.Value != "img" {
				t.Errorf("OUTPOST_IMAGE = %q, want the default image", e.Value)
			}
		}
	}
}

// checkInjection checks the init container that copies the job runner: first, from the agent
// image, writing only to the runner volume, and restricted (it passes the Pod Security Standard
// "restricted" whatever the template says).
func checkInjection(t *testing.T, ps corev1.PodSpec, agentImage string) {
	t.Helper()
	if len(ps.InitContainers) == 0 || ps.InitContainers[0].Name != InjectContainer {
		t.Fatalf("init containers = %+v, want %s first", ps.InitContainers, InjectContainer)
	}
	ic := ps.InitContainers[0]
	if ic.Image != agentImage || ic.Command != nil || !slices.Equal(ic.Args, []string{"inject", "/outpost/bin"}) {
		t.Errorf("inject: image %q command %v args %v", ic.Image, ic.Command, ic.Args)
	}
	if len(ic.VolumeMounts) != 1 || ic.VolumeMounts[0].Name != runnerVolume || ic.VolumeMounts[0].MountPath != "/outpost/bin" || ic.VolumeMounts[0].ReadOnly {
		t.Errorf("inject mounts = %+v", ic.VolumeMounts)
	}
	sc := ic.SecurityContext
	if sc == nil || !*sc.RunAsNonRoot || *sc.RunAsUser == 0 || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("inject securityContext = %+v", sc)
	}
	if ic.Resources.Requests.Cpu().IsZero() || ic.Resources.Requests.Memory().IsZero() || ic.Resources.Limits.Memory().IsZero() {
		t.Errorf("inject resources = %+v", ic.Resources)
	}
	for _, v := range ps.Volumes {
		if v.Name == runnerVolume && (v.EmptyDir == nil || v.HostPath != nil || v.EmptyDir.SizeLimit == nil) {
			t.Errorf("runner volume = %+v, want a bounded emptyDir", v)
		}
	}
}

// A template whose main sets a proxy itself keeps it, and gets none of the agent's: a mix of the
// two would be neither.
func TestBuildJobKeepsTheTemplatesProxy(t *testing.T) {
	tpl := `{"spec": {"containers": [{"name": "main", "env": [{"name": "https_proxy", "value": "http://team-proxy:8080"}]}]}}`
	job, _, err := BuildJob(claim(tpl), "opst_test", opts, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if strings.Contains(strings.ToLower(e.Name), "proxy") {
			got = append(got, e.Name+"="+e.Value)
		}
	}
	if !slices.Equal(got, []string{"https_proxy=http://team-proxy:8080"}) {
		t.Errorf("proxy env = %v", got)
	}
	if img := job.Spec.Template.Spec.Containers[0].Image; img != "outpost/job:1" {
		t.Errorf("main image %q, want the default when the template names none", img)
	}
}

func TestBuildJobRefusesBrokenTemplates(t *testing.T) {
	for name, tpl := range map[string]string{
		"not json":        `{"spec": `,
		"main command":    `{"spec": {"containers": [{"name": "main", "command": ["sh"]}]}}`,
		"restart policy":  `{"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "main"}]}}`,
		"service account": `{"spec": {"serviceAccountName": "root", "containers": [{"name": "main"}]}}`,
		"owned label":     `{"metadata": {"labels": {"outpost.dev/deployment-id": "x"}}, "spec": {"containers": [{"name": "main"}]}}`,
		"unknown field":   `{"spec": {"containerz": []}}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := BuildJob(claim(tpl), "opst_test", opts, time.Now())
			if !errors.Is(err, podtemplate.ErrInvalid) {
				t.Fatalf("err = %v, want a podtemplate error", err)
			}
		})
	}
}

func TestJobNameDeterministicAndValid(t *testing.T) {
	long := "Deployment_" + string(make([]byte, 0)) + "ABCDEFGHIJKLMNOPQRSTUVWXYZ-abcdefghijklmnopqrstuvwxyz-0123456789-tail"
	ids := []string{"dep-1", "DEP-1", "dep_1", "dep.1", long, long + "x", "---", "01HZX3K9Q4"}
	seen := map[string]string{}
	dns := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	for _, id := range ids {
		for attempt := 1; attempt <= 12; attempt += 11 {
			n := JobName(id, attempt)
			if n != JobName(id, attempt) {
				t.Errorf("JobName(%q) not deterministic", id)
			}
			if len(n) > 63 || !dns.MatchString(n) || len(validation.IsDNS1123Label(n)) > 0 {
				t.Errorf("JobName(%q, %d) = %q is not a DNS-1123 label ≤ 63", id, attempt, n)
			}
			if len(validation.IsDNS1123Subdomain(TokenSecretName(n, tokenDigest("opj_x")))) > 0 {
				t.Errorf("secret name %q invalid", TokenSecretName(n, tokenDigest("opj_x")))
			}
			key := id + "/" + string(rune('0'+attempt))
			if prev, ok := seen[n]; ok && prev != key {
				t.Errorf("JobName collision: %q for %s and %s", n, prev, key)
			}
			seen[n] = key
		}
	}
	if JobName("dep-1", 1) != "outpost-dep-1-1" {
		t.Errorf("simple ids keep a readable name, got %q", JobName("dep-1", 1))
	}
	if v := labelValue(long + long); len(v) > 63 || len(validation.IsValidLabelValue(v)) > 0 {
		t.Errorf("labelValue = %q invalid", v)
	}
}

func names[T any](in []T, f func(T) string) []string {
	out := make([]string, 0, len(in))
	for _, v := range in {
		out = append(out, f(v))
	}
	return out
}
