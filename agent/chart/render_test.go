package chart_test

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
)

const (
	releaseName      = "outpost-agent"
	releaseNamespace = "outpost-system"
	// agentImage is the default image: repository from values.yaml, tag = appVersion.
	agentImage = "ghcr.io/outpost-dev/outpost-agent:" + agentchart.AppVersion
	// jobImage is the default image of the Jobs' main container: OpenTofu, same tag.
	jobImage = "ghcr.io/outpost-dev/outpost-job:" + agentchart.AppVersion
)

// requiredValues are the values without defaults; every render starts from them.
const requiredValues = `
apiUrl: https://outpost.example.com
orgId: acme
runnerId: prod-eu
privateKey:
  existingSecret: prod-eu-key
`

// kubeVersion is the cluster version renders assume (the test bed's). Helm's client-only default
// (v1.20) is older than the chart's kubeVersion constraint.
var kubeVersion = &chartutil.KubeVersion{Version: "v1.34.0", Major: "1", Minor: "34"}

// rendered is one client-only install of the chart, decoded into typed Kubernetes objects.
type rendered struct {
	objects map[string]any // key: "Kind namespace/name"
	notes   string
	// tests are the objects of the `helm test` hooks, apart from what an install creates.
	tests *rendered
}

// renderOptions tweak the install action.
type renderOptions struct {
	skipSchemaValidation bool
	releaseName          string // releaseName when empty
}

// renderChart installs the embedded chart client-only (what `helm template` does), with overrides
// (YAML) on top of requiredValues; `key: null` removes a value.
func renderChart(t *testing.T, overrides string, opts renderOptions) (*rendered, error) {
	t.Helper()
	c, err := agentchart.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	vals := mergeValues(t, overrides)

	inst := action.NewInstall(&action.Configuration{Log: t.Logf})
	inst.DryRun = true
	inst.ClientOnly = true
	inst.ReleaseName = releaseName
	if opts.releaseName != "" {
		inst.ReleaseName = opts.releaseName
	}
	inst.Namespace = releaseNamespace
	inst.KubeVersion = kubeVersion
	inst.SkipSchemaValidation = opts.skipSchemaValidation
	rel, err := inst.RunWithContext(t.Context(), c, vals)
	if err != nil {
		return nil, err
	}
	r := &rendered{objects: map[string]any{}, notes: rel.Info.Notes, tests: &rendered{objects: map[string]any{}}}
	for _, h := range rel.Hooks {
		// The provider's install flow runs no hook; `helm test` runs the test hooks.
		if len(h.Events) != 1 || h.Events[0] != release.HookTest {
			t.Errorf("hook %s runs on %v; the chart may only have test hooks", h.Path, h.Events)
		}
		key, obj, err := decode(h.Manifest)
		if err != nil {
			t.Fatalf("decoding hook %s: %v\n%s", h.Path, err, h.Manifest)
		}
		r.tests.objects[key] = obj
	}
	for _, doc := range releaseutil.SplitManifests(rel.Manifest) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		key, obj, err := decode(doc)
		if err != nil {
			t.Fatalf("decoding rendered manifest: %v\n%s", err, doc)
		}
		if _, dup := r.objects[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		r.objects[key] = obj
	}
	return r, nil
}

// render is renderChart for values that must render.
func render(t *testing.T, overrides string) *rendered {
	t.Helper()
	r, err := renderChart(t, overrides, renderOptions{})
	if err != nil {
		t.Fatalf("rendering the chart: %v", err)
	}
	return r
}

// mergeValues returns requiredValues with the overrides (YAML) on top.
func mergeValues(t *testing.T, overrides string) map[string]any {
	t.Helper()
	b, err := chartutil.ReadValues([]byte(requiredValues))
	if err != nil {
		t.Fatalf("base values: %v", err)
	}
	o, err := chartutil.ReadValues([]byte(overrides))
	if err != nil {
		t.Fatalf("override values: %v", err)
	}
	return chartutil.CoalesceTables(o.AsMap(), b.AsMap())
}

// decode parses one manifest strictly (unknown fields and duplicate keys are errors, which catches
// misspelled fields in templates) into the typed object of its kind. Kinds the chart must not
// create, such as ClusterRole, are errors too.
func decode(doc string) (string, any, error) {
	var head struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ObjectMeta `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
		return "", nil, err
	}
	var obj any
	switch head.APIVersion + " " + head.Kind {
	case "apps/v1 Deployment":
		obj = &appsv1.Deployment{}
	case "v1 Pod":
		obj = &corev1.Pod{}
	case "v1 ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "v1 ConfigMap": // the agent's configuration file
		obj = &corev1.ConfigMap{}
	case "v1 Secret": // only the CA bundle of caBundle.pem
		obj = &corev1.Secret{}
	case "rbac.authorization.k8s.io/v1 Role":
		obj = &rbacv1.Role{}
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		obj = &rbacv1.RoleBinding{}
	case "policy/v1 PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "networking.k8s.io/v1 NetworkPolicy":
		obj = &networkingv1.NetworkPolicy{}
	default:
		return "", nil, fmt.Errorf("unexpected kind %s %s", head.APIVersion, head.Kind)
	}
	// Case-sensitive, unlike encoding/json: "readOnlY" must not pass for "readOnly".
	js, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return "", nil, err
	}
	strictErrs, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		return "", nil, err
	}
	if len(strictErrs) > 0 {
		return "", nil, errors.Join(strictErrs...)
	}
	if head.Metadata.Namespace == "" {
		return "", nil, fmt.Errorf("%s %s has no namespace: every object must name its namespace", head.Kind, head.Metadata.Name)
	}
	return fmt.Sprintf("%s %s/%s", head.Kind, head.Metadata.Namespace, head.Metadata.Name), obj, nil
}

// keys lists the rendered objects, sorted, for assertions and failure messages.
func (r *rendered) keys() []string {
	keys := make([]string, 0, len(r.objects))
	for k := range r.objects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// all returns the rendered objects of type T.
func all[T any](r *rendered) []*T {
	var out []*T
	for _, k := range r.keys() {
		if o, ok := r.objects[k].(*T); ok {
			out = append(out, o)
		}
	}
	return out
}

// get returns the rendered object of the kind, namespace and name.
func get[T any](t *testing.T, r *rendered, kind, namespace, name string) *T {
	t.Helper()
	key := fmt.Sprintf("%s %s/%s", kind, namespace, name)
	obj, ok := r.objects[key]
	if !ok {
		t.Fatalf("no %s; rendered: %v", key, r.keys())
	}
	typed, ok := obj.(*T)
	if !ok {
		t.Fatalf("%s decoded as %T", key, obj)
	}
	return typed
}

func (r *rendered) has(kind, namespace, name string) bool {
	_, ok := r.objects[fmt.Sprintf("%s %s/%s", kind, namespace, name)]
	return ok
}

// deployment returns the agent Deployment and its only container.
func (r *rendered) deployment(t *testing.T) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	ds := all[appsv1.Deployment](r)
	if len(ds) != 1 {
		t.Fatalf("%d Deployments rendered, want 1", len(ds))
	}
	d := ds[0]
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("the agent pod has %d containers, want 1", n)
	}
	return d, &d.Spec.Template.Spec.Containers[0]
}

// env returns the agent container's environment by name. Later entries win, as in the kubelet.
func env(c *corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

func wantEnv(t *testing.T, c *corev1.Container, want map[string]string) {
	t.Helper()
	got := env(c)
	for name, value := range want {
		e, ok := got[name]
		switch {
		case !ok:
			t.Errorf("env %s is not set, want %q", name, value)
		case e.ValueFrom != nil:
			t.Errorf("env %s comes from %+v, want the value %q", name, e.ValueFrom, value)
		case e.Value != value:
			t.Errorf("env %s = %q, want %q", name, e.Value, value)
		}
	}
}

func wantNoEnv(t *testing.T, c *corev1.Container, names ...string) {
	t.Helper()
	got := env(c)
	for _, name := range names {
		if e, ok := got[name]; ok {
			t.Errorf("env %s is set (%+v), want it absent", name, e)
		}
	}
}

func volume(t *testing.T, d *appsv1.Deployment, name string) *corev1.Volume {
	t.Helper()
	for i := range d.Spec.Template.Spec.Volumes {
		if v := &d.Spec.Template.Spec.Volumes[i]; v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %q in the agent pod", name)
	return nil
}

func mount(t *testing.T, c *corev1.Container, name string) *corev1.VolumeMount {
	t.Helper()
	for i := range c.VolumeMounts {
		if m := &c.VolumeMounts[i]; m.Name == name {
			return m
		}
	}
	t.Fatalf("no volume mount %q in the agent container", name)
	return nil
}

// TestDefaults checks the release rendered from the required values only: the object set and the
// agent configuration contract (agent/chart/README.md, "Agent configuration").
func TestDefaults(t *testing.T) {
	r := render(t, "")

	// Three namespaces: the agent and its key, the jobs, the states.
	wantKeys := []string{
		"ConfigMap outpost-system/outpost-agent-config",
		"Deployment outpost-system/outpost-agent",
		"NetworkPolicy outpost-system-jobs/outpost-system-outpost-agent-jobs",
		"NetworkPolicy outpost-system/outpost-agent",
		"PodDisruptionBudget outpost-system-jobs/outpost-system-outpost-agent-applies",
		"PodDisruptionBudget outpost-system/outpost-agent",
		"Role outpost-system-jobs/outpost-system-outpost-agent-jobs",
		"Role outpost-system-state/outpost-system-outpost-agent-state",
		"Role outpost-system/outpost-agent",
		"RoleBinding outpost-system-jobs/outpost-system-outpost-agent-jobs",
		"RoleBinding outpost-system-state/outpost-system-outpost-agent-state",
		"RoleBinding outpost-system/outpost-agent",
		"Service outpost-system/outpost-agent",
		"ServiceAccount outpost-system-jobs/outpost-job",
		"ServiceAccount outpost-system/outpost-agent",
	}
	if got := r.keys(); !slices.Equal(got, wantKeys) {
		t.Errorf("rendered objects:\n got %v\nwant %v", got, wantKeys)
	}

	d, c := r.deployment(t)
	if got := *d.Spec.Replicas; got != 2 {
		t.Errorf("replicas = %d, want 2 (leader election with a standby)", got)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != "outpost-agent" {
		t.Errorf("serviceAccountName = %q, want outpost-agent", pod.ServiceAccountName)
	}
	if got := *pod.TerminationGracePeriodSeconds; got != 60 {
		t.Errorf("terminationGracePeriodSeconds = %d, want 60", got)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("enableServiceLinks = %v, want false", pod.EnableServiceLinks)
	}
	if c.Image != agentImage {
		t.Errorf("image = %q, want %q", c.Image, agentImage)
	}
	if c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("imagePullPolicy = %q, want IfNotPresent", c.ImagePullPolicy)
	}
	if len(pod.ImagePullSecrets) != 0 {
		t.Errorf("imagePullSecrets = %v, want none", pod.ImagePullSecrets)
	}
	for k, v := range map[string]string{
		"app.kubernetes.io/name":      "outpost-agent",
		"app.kubernetes.io/instance":  releaseName,
		"app.kubernetes.io/component": "agent",
		"outpost.dev/runner-id":       "prod-eu",
	} {
		if got := d.Spec.Template.Labels[k]; got != v {
			t.Errorf("pod label %s = %q, want %q", k, got, v)
		}
	}
	if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil {
		t.Errorf("selector: %v", err)
	} else if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("the Deployment's selector %v does not match its pod labels %v", sel, d.Spec.Template.Labels)
	}
	if d.Spec.Strategy.RollingUpdate == nil || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("rolling update %+v, want maxUnavailable 0 so a standby is always up", d.Spec.Strategy.RollingUpdate)
	}

	// The settings are in the configuration file (TestConfigFile); the environment names it.
	wantEnv(t, c, map[string]string{"OUTPOST_CONFIG": "/etc/outpost/config/agent.yaml"})
	e := env(c)
	if v := e["GOMEMLIMIT"].ValueFrom; v == nil || v.ResourceFieldRef == nil || v.ResourceFieldRef.Resource != "limits.memory" {
		t.Errorf("env GOMEMLIMIT = %+v, want the container's memory limit", e["GOMEMLIMIT"])
	}
	for name, field := range map[string]string{"OUTPOST_NAMESPACE": "metadata.namespace", "OUTPOST_POD_NAME": "metadata.name"} {
		if v := e[name].ValueFrom; v == nil || v.FieldRef == nil || v.FieldRef.FieldPath != field {
			t.Errorf("env %s = %+v, want the downward API field %s", name, e[name], field)
		}
	}
	wantNoEnv(t, c, "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY")
	if len(e) != len(c.Env) {
		t.Errorf("the agent container sets an env var twice: %v", c.Env)
	}

	// The private key is not mounted: the agent reads and watches the Secret through the API.
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "prod-eu-key" {
			t.Errorf("volume %q mounts the key Secret; the agent reads it through the API", v.Name)
		}
	}
	tmp := volume(t, d, "tmp")
	if tmp.EmptyDir == nil || tmp.EmptyDir.SizeLimit == nil || tmp.EmptyDir.SizeLimit.String() != "256Mi" {
		t.Errorf("tmp volume = %+v, want an emptyDir of at most 256Mi", tmp.VolumeSource)
	}
	if m := mount(t, c, "tmp"); m.MountPath != "/tmp" || m.ReadOnly {
		t.Errorf("tmp mount = %+v, want writable /tmp", m)
	}

	res := c.Resources
	if res.Requests.Cpu().String() != "50m" || res.Requests.Memory().String() != "128Mi" || res.Limits.Memory().String() != "256Mi" {
		t.Errorf("resources = %+v, want requests 50m/128Mi and a 256Mi memory limit", res)
	}
	if _, ok := res.Limits[corev1.ResourceCPU]; ok {
		t.Errorf("resources set a CPU limit (%v); throttling a poller gains nothing", res.Limits.Cpu())
	}

	// The topology spread default gets the chart's selector filled in.
	tsc := pod.TopologySpreadConstraints
	if len(tsc) != 1 || tsc[0].TopologyKey != "kubernetes.io/hostname" || tsc[0].WhenUnsatisfiable != corev1.ScheduleAnyway {
		t.Fatalf("topologySpreadConstraints = %+v, want a soft spread across nodes", tsc)
	}
	if sel, err := metav1.LabelSelectorAsSelector(tsc[0].LabelSelector); err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("the topology spread selector %+v does not select the agent pods (%v)", tsc[0].LabelSelector, err)
	}

	if !strings.Contains(r.notes, "kubectl -n outpost-system rollout status deployment/outpost-agent") {
		t.Errorf("NOTES.txt lacks the rollout command:\n%s", r.notes)
	}
}

// TestProbesAndService checks the health endpoints and the Service job pods use for state.
func TestProbesAndService(t *testing.T) {
	r := render(t, "")
	_, c := r.deployment(t)

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["state"] != 8080 || ports["state-tls"] != 8443 || ports["metrics"] != 9090 || len(ports) != 3 {
		t.Errorf("container ports = %v, want state 8080, state-tls 8443 and metrics 9090", ports)
	}
	for name, tc := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{
		"liveness":  {c.LivenessProbe, "/healthz"},
		"readiness": {c.ReadinessProbe, "/readyz"},
		"startup":   {c.StartupProbe, "/healthz"},
	} {
		if tc.probe == nil || tc.probe.HTTPGet == nil {
			t.Errorf("%s probe = %+v, want an HTTP GET", name, tc.probe)
			continue
		}
		if g := tc.probe.HTTPGet; g.Path != tc.path || g.Port != intstr.FromString("metrics") {
			t.Errorf("%s probe GET %s on port %s, want %s on the metrics port (9090)", name, g.Path, g.Port.String(), tc.path)
		}
	}

	svc := get[corev1.Service](t, r, "Service", releaseNamespace, releaseName)
	if svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service type %q, want ClusterIP", svc.Spec.Type)
	}
	svcPorts := map[string]corev1.ServicePort{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = p
	}
	for name, port := range map[string]int32{"state": 8080, "state-tls": 8443, "metrics": 9090} {
		p, ok := svcPorts[name]
		if !ok || p.Port != port || p.TargetPort != intstr.FromString(name) {
			t.Errorf("Service port %s = %+v, want %d targeting the container port named %s", name, p, port, name)
		}
	}
	d, _ := r.deployment(t)
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not match the agent pods", k, v)
		}
	}
}

// TestSecurityContext checks the hardened pod and container security contexts.
func TestSecurityContext(t *testing.T) {
	d, c := render(t, "").deployment(t)
	psc := d.Spec.Template.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext = %+v, want non-root 65532 with the RuntimeDefault seccomp profile", psc)
	}
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("the agent container has no securityContext")
	}
	checks := map[string]bool{
		"runAsNonRoot":                   sc.RunAsNonRoot != nil && *sc.RunAsNonRoot,
		"runAsUser 65532":                sc.RunAsUser != nil && *sc.RunAsUser == 65532,
		"readOnlyRootFilesystem":         sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem,
		"allowPrivilegeEscalation false": sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
		"privileged false":               sc.Privileged != nil && !*sc.Privileged,
		"capabilities drop ALL":          sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) && len(sc.Capabilities.Add) == 0,
		"seccompProfile RuntimeDefault":  sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault,
	}
	for what, ok := range checks {
		if !ok {
			t.Errorf("container securityContext lacks %s: %+v", what, sc)
		}
	}
}

// TestIdentities checks that the agent and the jobs get separate ServiceAccounts, each with its own
// cloud-identity annotations, and that job pod labels reach the agent.
func TestIdentities(t *testing.T) {
	r := render(t, `
serviceAccount:
  annotations:
    eks.amazonaws.com/role-arn: arn:aws:iam::111122223333:role/outpost-agent
jobs:
  namespace: outpost-jobs
  serviceAccount:
    name: terraform
    annotations:
      iam.gke.io/gcp-service-account: terraform@acme.iam.gserviceaccount.com
      azure.workload.identity/client-id: 00000000-0000-0000-0000-000000000001
    labels:
      team: platform
  podLabels:
    azure.workload.identity/use: "true"
podLabels:
  team: platform
podAnnotations:
  prometheus.io/scrape: "true"
`)
	agentSA := get[corev1.ServiceAccount](t, r, "ServiceAccount", releaseNamespace, "outpost-agent")
	jobSA := get[corev1.ServiceAccount](t, r, "ServiceAccount", "outpost-jobs", "terraform")

	if want := map[string]string{"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/outpost-agent"}; !mapsEqual(agentSA.Annotations, want) {
		t.Errorf("agent ServiceAccount annotations = %v, want %v", agentSA.Annotations, want)
	}
	wantJob := map[string]string{
		"iam.gke.io/gcp-service-account":    "terraform@acme.iam.gserviceaccount.com",
		"azure.workload.identity/client-id": "00000000-0000-0000-0000-000000000001",
	}
	if !mapsEqual(jobSA.Annotations, wantJob) {
		t.Errorf("job ServiceAccount annotations = %v, want %v", jobSA.Annotations, wantJob)
	}
	if jobSA.AutomountServiceAccountToken == nil || *jobSA.AutomountServiceAccountToken {
		t.Errorf("job ServiceAccount automountServiceAccountToken = %v, want false", jobSA.AutomountServiceAccountToken)
	}
	if jobSA.Labels["team"] != "platform" || jobSA.Labels["app.kubernetes.io/component"] != "job" {
		t.Errorf("job ServiceAccount labels = %v, want team=platform and component=job", jobSA.Labels)
	}
	if agentSA.AutomountServiceAccountToken == nil || !*agentSA.AutomountServiceAccountToken {
		t.Errorf("agent ServiceAccount automountServiceAccountToken = %v, want true (it talks to the API)", agentSA.AutomountServiceAccountToken)
	}

	d, _ := r.deployment(t)
	if d.Spec.Template.Spec.ServiceAccountName != agentSA.Name {
		t.Errorf("agent pods run as %q, want %q", d.Spec.Template.Spec.ServiceAccountName, agentSA.Name)
	}
	if d.Spec.Template.Labels["team"] != "platform" || d.Spec.Template.Annotations["prometheus.io/scrape"] != "true" {
		t.Errorf("agent pod labels %v / annotations %v lack podLabels / podAnnotations", d.Spec.Template.Labels, d.Spec.Template.Annotations)
	}
	if _, ok := d.Spec.Template.Labels["azure.workload.identity/use"]; ok {
		t.Error("jobs.podLabels leaked onto the agent pods")
	}
	if cfg := r.agentConfig(t); cfg.Jobs.Namespace != "outpost-jobs" || cfg.Jobs.ServiceAccount != "terraform" {
		t.Errorf("jobs.namespace %q, jobs.serviceAccount %q, want outpost-jobs, terraform", cfg.Jobs.Namespace, cfg.Jobs.ServiceAccount)
	} else if want := map[string]string{"azure.workload.identity/use": "true"}; !mapsEqual(cfg.Jobs.PodLabels, want) {
		t.Errorf("jobs.podLabels = %v, want %v", cfg.Jobs.PodLabels, want)
	}

	// The chart's labels win over podLabels, or the Deployment would lose its pods.
	d, _ = render(t, "podLabels: {app.kubernetes.io/name: other}").deployment(t)
	if got := d.Spec.Template.Labels["app.kubernetes.io/name"]; got != "outpost-agent" {
		t.Errorf("podLabels overrode the selector label app.kubernetes.io/name: %q", got)
	}

	// An existing agent ServiceAccount.
	r = render(t, "serviceAccount: {create: false, name: platform-agent}")
	if r.has("ServiceAccount", releaseNamespace, "outpost-agent") {
		t.Error("serviceAccount.create=false still created the agent ServiceAccount")
	}
	if d, _ := r.deployment(t); d.Spec.Template.Spec.ServiceAccountName != "platform-agent" {
		t.Errorf("agent pods run as %q, want platform-agent", d.Spec.Template.Spec.ServiceAccountName)
	}
	rb := get[rbacv1.RoleBinding](t, r, "RoleBinding", releaseNamespace+"-jobs", "outpost-system-outpost-agent-jobs")
	if rb.Subjects[0].Name != "platform-agent" {
		t.Errorf("RBAC is bound to %q, want the existing ServiceAccount platform-agent", rb.Subjects[0].Name)
	}

	// An existing jobs ServiceAccount.
	r = render(t, "jobs: {serviceAccount: {create: false, name: terraform}}")
	if r.has("ServiceAccount", releaseNamespace, "terraform") {
		t.Error("jobs.serviceAccount.create=false still created the jobs ServiceAccount")
	}
}

// TestPodDisruptionBudget checks the default budget and its alternatives.
func TestJobResourcesAndForwardEnv(t *testing.T) {
	r := render(t, "jobs: {resources: null, forwardEnv: [AWS_REGION, TF_REGISTRY_CLIENT_TIMEOUT]}\nextraEnv: [{name: AWS_REGION, value: eu-west-1}]")
	_, c := r.deployment(t)
	wantEnv(t, c, map[string]string{"AWS_REGION": "eu-west-1"})
	cfg := r.agentConfig(t)
	if len(cfg.Jobs.Resources.Requests)+len(cfg.Jobs.Resources.Limits) != 0 {
		t.Errorf("jobs.resources: null gave %+v, want none", cfg.Jobs.Resources)
	}
	if want := map[string]string{"AWS_REGION": "eu-west-1", "TF_REGISTRY_CLIENT_TIMEOUT": ""}; !mapsEqual(cfg.Jobs.Options.ForwardEnv, want) {
		t.Errorf("forwarded env %v, want %v", cfg.Jobs.Options.ForwardEnv, want)
	}
}

func TestPluginCacheAndProviderInstallation(t *testing.T) {
	r := render(t, `jobs:
  pluginCache: {persistentVolumeClaim: {claimName: tf-plugins}}
  providerInstallation: 'provider_installation { network_mirror { url = "https://mirror.corp/" } }'`)
	cfg := r.agentConfig(t)
	if cfg.Jobs.PluginCache == nil || cfg.Jobs.PluginCache.PersistentVolumeClaim == nil || cfg.Jobs.PluginCache.PersistentVolumeClaim.ClaimName != "tf-plugins" {
		t.Errorf("jobs.pluginCache = %+v", cfg.Jobs.PluginCache)
	}
	if want := `provider_installation { network_mirror { url = "https://mirror.corp/" } }`; cfg.Jobs.ProviderInstallation != want {
		t.Errorf("jobs.providerInstallation = %q, want %q", cfg.Jobs.ProviderInstallation, want)
	}
}

func TestLogFormatAndExtraVolumes(t *testing.T) {
	r := render(t, `logFormat: text
extraVolumes: [{name: corp-files, configMap: {name: corp}}]
extraVolumeMounts: [{name: corp-files, mountPath: /etc/corp, readOnly: true}]`)
	d, c := r.deployment(t)
	if f := r.agentConfig(t).LogFormat; f != "text" {
		t.Errorf("logFormat %q, want text", f)
	}
	if v := volume(t, d, "corp-files"); v.ConfigMap == nil || v.ConfigMap.Name != "corp" {
		t.Errorf("extra volume %+v", v)
	}
	if m := mount(t, c, "corp-files"); m.MountPath != "/etc/corp" || !m.ReadOnly {
		t.Errorf("extra mount %+v", m)
	}
	// The chart's own volumes stay.
	volume(t, d, "tmp")
	mount(t, c, "tmp")
}

func TestPodDisruptionBudget(t *testing.T) {
	tests := []struct {
		name, values       string
		want               *intstr.IntOrString
		wantMinAvailable   bool
		wantNoBudgetObject bool
	}{
		{name: "default", want: ptr(intstr.FromInt32(1))},
		{name: "maxUnavailable percent", values: `podDisruptionBudget: {maxUnavailable: "50%"}`, want: ptr(intstr.FromString("50%"))},
		{name: "minAvailable wins", values: `podDisruptionBudget: {minAvailable: 1}`, want: ptr(intstr.FromInt32(1)), wantMinAvailable: true},
		{name: "disabled", values: `podDisruptionBudget: {enabled: false}`, wantNoBudgetObject: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.values)
			if tc.wantNoBudgetObject {
				if r.has("PodDisruptionBudget", releaseNamespace, releaseName) {
					t.Fatal("the agent's PodDisruptionBudget was rendered, want none")
				}
				return
			}
			pdb := get[policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", releaseNamespace, releaseName)
			got, other := pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable
			if tc.wantMinAvailable {
				got, other = other, got
			}
			if got == nil || *got != *tc.want || other != nil {
				t.Errorf("PDB spec = %+v, want only %s %s", pdb.Spec, map[bool]string{true: "minAvailable", false: "maxUnavailable"}[tc.wantMinAvailable], tc.want.String())
			}
			d, _ := r.deployment(t)
			if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("the PDB selector %+v does not select the agent pods (%v)", pdb.Spec.Selector, err)
			}
		})
	}
}

// TestJobsPodDisruptionBudget: the budget in the jobs namespace selects this runner's apply and
// destroy pods by the labels the agent puts on them, never a plan's or another runner's, and
// allows no eviction however many there are.
func TestJobsPodDisruptionBudget(t *testing.T) {
	r := render(t, "")
	pdb := get[policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", releaseNamespace+"-jobs", releaseNamespace+"-outpost-agent-applies")
	if pdb.Spec.MaxUnavailable != nil || pdb.Spec.MinAvailable == nil || *pdb.Spec.MinAvailable != intstr.FromInt32(math.MaxInt32) {
		t.Errorf("PDB spec = %+v, want only minAvailable %d (an integer: Jobs have no scale for maxUnavailable)", pdb.Spec, math.MaxInt32)
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	pod := func(runner, op string) labels.Set {
		return labels.Set{"app.kubernetes.io/managed-by": "outpost-agent", "outpost.dev/runner-id": runner, "outpost.dev/operation": op,
			"outpost.dev/deployment-id": "dep-1", "outpost.dev/attempt": "1"}
	}
	for _, tc := range []struct {
		pod  labels.Set
		want bool
	}{
		{pod("prod-eu", "apply"), true},
		{pod("prod-eu", "destroy"), true},
		{pod("prod-eu", "plan"), false},
		{pod("staging", "apply"), false},
	} {
		if got := sel.Matches(tc.pod); got != tc.want {
			t.Errorf("the budget selects a pod labelled %v: %t, want %t", tc.pod, got, tc.want)
		}
	}
	if r := render(t, "jobs: {podDisruptionBudget: {enabled: false}}"); r.has("PodDisruptionBudget", releaseNamespace+"-jobs", releaseNamespace+"-outpost-agent-applies") {
		t.Error("jobs.podDisruptionBudget.enabled=false still rendered the budget")
	}
}

// TestProxy checks the proxy variables and the NO_PROXY entries that keep in-cluster traffic
// (state backend, API server) away from the proxy.
func TestProxy(t *testing.T) {
	defaults := ".svc,.cluster.local,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,localhost,127.0.0.1,$(KUBERNETES_SERVICE_HOST)"
	tests := []struct {
		name, values string
		want         map[string]string
		absent       []string
	}{
		{
			name:   "https proxy, no extra hosts",
			values: `proxy: {httpsProxy: "http://proxy.corp:3128"}`,
			want:   map[string]string{"HTTPS_PROXY": "http://proxy.corp:3128", "NO_PROXY": defaults},
			absent: []string{"HTTP_PROXY"},
		},
		{
			name:   "both proxies, extra hosts as a string",
			values: `proxy: {httpsProxy: "http://proxy.corp:3128", httpProxy: "http://proxy.corp:3128", noProxy: "git.corp, .corp.internal ,.svc"}`,
			want: map[string]string{
				"HTTPS_PROXY": "http://proxy.corp:3128",
				"HTTP_PROXY":  "http://proxy.corp:3128",
				"NO_PROXY":    "git.corp,.corp.internal,.svc,.cluster.local,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,localhost,127.0.0.1,$(KUBERNETES_SERVICE_HOST)",
			},
		},
		{
			name:   "extra hosts as a list",
			values: "proxy:\n  httpProxy: http://proxy.corp:3128\n  noProxy: [vault.corp, 100.64.0.0/10]",
			want:   map[string]string{"HTTP_PROXY": "http://proxy.corp:3128", "NO_PROXY": "vault.corp,100.64.0.0/10," + defaults},
			absent: []string{"HTTPS_PROXY"},
		},
		{
			name:   "no proxy",
			values: `proxy: {noProxy: [vault.corp]}`,
			absent: []string{"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, c := render(t, tc.values).deployment(t)
			wantEnv(t, c, tc.want)
			wantNoEnv(t, c, tc.absent...)
			// $(KUBERNETES_SERVICE_HOST) only expands when it is not defined later in the list.
			if no, ok := env(c)["NO_PROXY"]; ok && strings.Contains(no.Value, "$(") {
				for _, e := range c.Env {
					if e.Name == "KUBERNETES_SERVICE_HOST" {
						t.Error("the chart defines KUBERNETES_SERVICE_HOST itself")
					}
				}
			}
		})
	}
}

// TestCABundle checks the extra CA certificates: mounted for the agent and named for job pods.
func TestCABundle(t *testing.T) {
	r := render(t, `
jobs: {namespace: outpost-jobs}
caBundle: {existingSecret: corp-ca, secretKey: bundle.pem}
`)
	d, c := r.deployment(t)
	v := volume(t, d, "ca-bundle")
	if v.Secret == nil || v.Secret.SecretName != "corp-ca" || !slices.Equal(v.Secret.Items, []corev1.KeyToPath{{Key: "bundle.pem", Path: "ca.crt"}}) {
		t.Errorf("ca-bundle volume = %+v, want key bundle.pem of Secret corp-ca as ca.crt", v.VolumeSource)
	}
	if m := mount(t, c, "ca-bundle"); m.MountPath != "/etc/outpost/ca" || !m.ReadOnly {
		t.Errorf("ca-bundle mount = %+v, want read-only /etc/outpost/ca", m)
	}
	if cfg := r.agentConfig(t); cfg.CABundleFile != "/etc/outpost/ca/ca.crt" || cfg.Jobs.CASecret != "corp-ca" || cfg.Jobs.CASecretKey != "bundle.pem" {
		t.Errorf("caBundleFile %q, jobs.caSecret %q, jobs.caSecretKey %q", cfg.CABundleFile, cfg.Jobs.CASecret, cfg.Jobs.CASecretKey)
	}
	if !strings.Contains(r.notes, "Secret corp-ca in namespace outpost-jobs") {
		t.Errorf("NOTES.txt does not ask for the CA Secret in the jobs namespace:\n%s", r.notes)
	}
}

// TestCABundlePEM checks caBundle.pem: the chart writes the certificates into a Secret of its
// own in the release namespace and in jobs.namespace, mounts it for the agent and names it for
// job pods; with existingSecret as well it refuses to render.
func TestCABundlePEM(t *testing.T) {
	const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	r := render(t, "jobs: {namespace: outpost-jobs}\ncaBundle: {pem: "+strconv.Quote(pem)+"}\n")
	name := releaseName + "-ca-bundle" // the full name is the release name, which holds the chart's
	for _, ns := range []string{releaseNamespace, "outpost-jobs"} {
		s := get[corev1.Secret](t, r, "Secret", ns, name)
		if s.StringData["ca.crt"] != pem {
			t.Errorf("Secret %s/%s holds %q, want the PEM", ns, name, s.StringData)
		}
	}
	d, _ := r.deployment(t)
	if v := volume(t, d, "ca-bundle"); v.Secret == nil || v.Secret.SecretName != name || v.Secret.Items[0].Key != "ca.crt" {
		t.Errorf("ca-bundle volume = %+v", v.VolumeSource)
	}
	if cfg := r.agentConfig(t); cfg.CABundleFile != "/etc/outpost/ca/ca.crt" || cfg.Jobs.CASecret != name || cfg.Jobs.CASecretKey != "ca.crt" {
		t.Errorf("caBundleFile %q, jobs.caSecret %q, jobs.caSecretKey %q", cfg.CABundleFile, cfg.Jobs.CASecret, cfg.Jobs.CASecretKey)
	}
	if strings.Contains(r.notes, "CA bundle") {
		t.Errorf("NOTES.txt asks for a CA Secret the chart made itself:\n%s", r.notes)
	}
	if _, err := renderChart(t, "caBundle: {existingSecret: corp-ca, pem: "+strconv.Quote(pem)+"}\n", renderOptions{}); err == nil ||
		!strings.Contains(err.Error(), "not both") {
		t.Errorf("existingSecret and pem together: %v, want a refusal", err)
	}
	if _, err := renderChart(t, "caBundle: {pem: not a certificate}\n", renderOptions{}); err == nil || !strings.Contains(err.Error(), "pem") {
		t.Errorf("pem that is no certificate: %v, want the schema's refusal", err)
	}
}

// TestStateEncryption checks that the state encryption key is mounted from its Secret and named
// to the agent by file, never put in an environment variable.
func TestStateEncryption(t *testing.T) {
	if f := render(t, "").agentConfig(t).State.EncryptionKeyFile; f != "" {
		t.Fatalf("encryption must be off by default; key file %q", f)
	}
	r := render(t, "state: {encryption: {existingSecret: outpost-state-key, secretKey: aes.key}}")
	d, c := r.deployment(t)
	v := volume(t, d, "state-key")
	if v.Secret == nil || v.Secret.SecretName != "outpost-state-key" || !slices.Equal(v.Secret.Items, []corev1.KeyToPath{{Key: "aes.key", Path: "key"}}) {
		t.Errorf("state-key volume = %+v", v.VolumeSource)
	}
	if m := mount(t, c, "state-key"); m.MountPath != "/etc/outpost/state-key" || !m.ReadOnly {
		t.Errorf("state-key mount = %+v", m)
	}
	if f := r.agentConfig(t).State.EncryptionKeyFile; f != "/etc/outpost/state-key/key" {
		t.Errorf("state.encryptionKeyFile %q", f)
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "outpost-state-key" {
			t.Errorf("the key must not reach the environment: %+v", e)
		}
	}
}

// TestNetworkPolicy checks the optional egress policy of job pods: the metadata service is
// blocked, DNS and the state backend stay reachable.
func TestNetworkPolicy(t *testing.T) {
	if n := len(all[networkingv1.NetworkPolicy](render(t, ""))); n != 2 {
		t.Fatalf("%d NetworkPolicies rendered by default, want two (job egress, agent ingress)", n)
	}
	if n := len(all[networkingv1.NetworkPolicy](render(t, "networkPolicy: {enabled: false}"))); n != 0 {
		t.Fatalf("%d NetworkPolicies rendered with networkPolicy.enabled=false, want none", n)
	}

	r := render(t, `
jobs: {namespace: outpost-jobs}
networkPolicy:
  extraEgress:
    - to: [{ipBlock: {cidr: 169.254.169.252/32}}]
      ports: [{port: 988, protocol: TCP}]
`)
	np := get[networkingv1.NetworkPolicy](t, r, "NetworkPolicy", "outpost-jobs", "outpost-system-outpost-agent-jobs")
	wantSelector := map[string]string{"app.kubernetes.io/managed-by": "outpost-agent", "outpost.dev/runner-id": "prod-eu"}
	if !mapsEqual(np.Spec.PodSelector.MatchLabels, wantSelector) || len(np.Spec.PodSelector.MatchExpressions) != 0 {
		t.Errorf("podSelector = %+v, want %v", np.Spec.PodSelector, wantSelector)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) || len(np.Spec.Ingress) != 0 {
		t.Errorf("policyTypes = %v, ingress %v; want [Ingress Egress] with no ingress rule (job pods take no connections)", np.Spec.PolicyTypes, np.Spec.Ingress)
	}

	var blocks []networkingv1.IPBlock
	var dns, state, extra bool
	for _, rule := range np.Spec.Egress {
		for _, peer := range rule.To {
			if peer.IPBlock != nil {
				blocks = append(blocks, *peer.IPBlock)
			}
			if peer.NamespaceSelector != nil && peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == releaseNamespace &&
				peer.PodSelector != nil && peer.PodSelector.MatchLabels["app.kubernetes.io/component"] == "agent" &&
				len(rule.Ports) == 2 && rule.Ports[0].Port.IntValue() == 8080 && rule.Ports[1].Port.IntValue() == 8443 {
				state = true
			}
		}
		if len(rule.To) == 0 && len(rule.Ports) == 2 && rule.Ports[0].Port.IntValue() == 53 && rule.Ports[1].Port.IntValue() == 53 {
			dns = true
		}
		if len(rule.Ports) == 1 && rule.Ports[0].Port.IntValue() == 988 {
			extra = true
		}
	}
	wantBlocks := map[string][]string{"0.0.0.0/0": {"169.254.169.254/32"}, "::/0": {"fd00:ec2::254/128"}}
	for _, b := range blocks {
		if want, ok := wantBlocks[b.CIDR]; ok {
			if !slices.Equal(b.Except, want) {
				t.Errorf("ipBlock %s except %v, want %v", b.CIDR, b.Except, want)
			}
			delete(wantBlocks, b.CIDR)
		}
	}
	if len(wantBlocks) != 0 {
		t.Errorf("egress lacks the ipBlocks %v; got %+v", wantBlocks, blocks)
	}
	if !dns || !state || !extra {
		t.Errorf("egress rules: DNS allowed %v, state backend allowed %v, extraEgress present %v; want all\n%+v", dns, state, extra, np.Spec.Egress)
	}
	for ip, want := range map[string]bool{
		"169.254.169.254": false, // IMDS (AWS, GCP, Azure)
		"fd00:ec2::254":   false, // IMDS over IPv6 (AWS)
		"203.0.113.10":    true,  // the internet
		"10.1.2.3":        true,  // the VPC
		"2001:db8::1":     true,
	} {
		if got := allowsEgress(np, ip); got != want {
			t.Errorf("egress to %s allowed = %v, want %v", ip, got, want)
		}
	}
}

// allowsEgress reports whether an ipBlock rule of the policy lets pods reach ip (on some port).
func allowsEgress(np *networkingv1.NetworkPolicy, ip string) bool {
	addr := netip.MustParseAddr(ip)
	for _, rule := range np.Spec.Egress {
	peers:
		for _, peer := range rule.To {
			if peer.IPBlock == nil || !netip.MustParsePrefix(peer.IPBlock.CIDR).Contains(addr) {
				continue
			}
			for _, except := range peer.IPBlock.Except {
				if netip.MustParsePrefix(except).Contains(addr) {
					continue peers
				}
			}
			return true
		}
	}
	return false
}

// TestImages checks image references: tag, digest, registries, and the job image.
func TestImages(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		name, values    string
		agent, jobImage string
	}{
		{name: "default", agent: agentImage, jobImage: jobImage},
		{name: "tag", values: `image: {tag: "1.2.3"}`,
			agent: "ghcr.io/outpost-dev/outpost-agent:1.2.3", jobImage: jobImage},
		{name: "digest", values: `image: {digest: ` + digest + `}`,
			agent: agentImage + "@" + digest, jobImage: jobImage},
		{name: "registry replaces the repository's host", values: `image: {registry: "registry.corp:5000"}`,
			agent: "registry.corp:5000/outpost-dev/outpost-agent:0.1.0", jobImage: jobImage},
		{name: "registry with a path prefixes a repository without host", values: `image: {registry: harbor.corp/ghcr-proxy, repository: outpost-dev/outpost-agent}`,
			agent: "harbor.corp/ghcr-proxy/outpost-dev/outpost-agent:0.1.0", jobImage: jobImage},
		{name: "localhost registry is a host", values: `image: {registry: mirror.corp, repository: "localhost:5000/outpost-agent"}`,
			agent: "mirror.corp/outpost-agent:0.1.0", jobImage: jobImage},
		{name: "global registry wins for both", values: "global: {imageRegistry: mirror.corp}\nimage: {registry: registry.corp}",
			agent: "mirror.corp/outpost-dev/outpost-agent:0.1.0", jobImage: "mirror.corp/outpost-dev/outpost-job:0.1.0"},
		{name: "job image", values: `jobs: {image: {repository: ghcr.io/acme/terraform-runner, tag: "2.0"}}`,
			agent: agentImage, jobImage: "ghcr.io/acme/terraform-runner:2.0"},
		{name: "job image tag and digest alone", values: `jobs: {image: {tag: "0.2.0", digest: ` + digest + `}}`,
			agent: agentImage, jobImage: "ghcr.io/outpost-dev/outpost-job:0.2.0@" + digest},
		{name: "job image keeps its own tag and digest", values: `{image: {tag: "9.9.9"}, jobs: {image: {repository: acme/runner, digest: ` + digest + `}}}`,
			agent: "ghcr.io/outpost-dev/outpost-agent:9.9.9", jobImage: "acme/runner:0.1.0@" + digest},
		{name: "job image with global and own registry", values: "global: {imageRegistry: mirror.corp}\njobs: {image: {registry: other.corp, repository: quay.io/acme/runner}}",
			agent: "mirror.corp/outpost-dev/outpost-agent:0.1.0", jobImage: "mirror.corp/acme/runner:0.1.0"},
		{name: "job image with its own registry", values: "jobs: {image: {registry: other.corp, repository: acme/runner}}",
			agent: agentImage, jobImage: "other.corp/acme/runner:0.1.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.values)
			_, c := r.deployment(t)
			if c.Image != tc.agent {
				t.Errorf("agent image = %q, want %q", c.Image, tc.agent)
			}
			// Job pods copy the job runner from the agent's image, whatever the job image.
			if cfg := r.agentConfig(t); cfg.Jobs.Image != tc.jobImage || cfg.Jobs.AgentImage != tc.agent {
				t.Errorf("jobs.image %q, jobs.agentImage %q, want %q, %q", cfg.Jobs.Image, cfg.Jobs.AgentImage, tc.jobImage, tc.agent)
			}
		})
	}

	_, c := render(t, `image: {pullPolicy: Always}`).deployment(t)
	if c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("imagePullPolicy = %q, want Always", c.ImagePullPolicy)
	}
}

// TestImagePullSecrets checks pull secrets given as names or objects, for the agent and the jobs.
func TestImagePullSecrets(t *testing.T) {
	r := render(t, `
jobs: {namespace: outpost-jobs}
imagePullSecrets: [ghcr-pull, {name: mirror-pull}]
`)
	d, _ := r.deployment(t)
	want := []corev1.LocalObjectReference{{Name: "ghcr-pull"}, {Name: "mirror-pull"}}
	if !slices.Equal(d.Spec.Template.Spec.ImagePullSecrets, want) {
		t.Errorf("imagePullSecrets = %v, want %v", d.Spec.Template.Spec.ImagePullSecrets, want)
	}
	if got := r.agentConfig(t).Jobs.ImagePullSecrets; !slices.Equal(got, []string{"ghcr-pull", "mirror-pull"}) {
		t.Errorf("jobs.imagePullSecrets = %v", got)
	}
	if !strings.Contains(r.notes, "ghcr-pull,mirror-pull from namespace\noutpost-jobs") {
		t.Errorf("NOTES.txt does not ask for the pull Secrets in the jobs namespace:\n%s", r.notes)
	}
}

// TestExtraEnvAndSettings checks extraEnv (last, so it wins) and the plain settings.
// TestCLIPath: cli may name the CLI by its absolute path in the job image.
func TestCLIPath(t *testing.T) {
	if cli := render(t, `cli: /opt/tofu/bin/tofu`).agentConfig(t).CLI; cli != "/opt/tofu/bin/tofu" {
		t.Errorf("cli = %q", cli)
	}
}

// TestInsecureAllowHTTP: the plain-http opt-in reaches the agent only when the value says so.
func TestInsecureAllowHTTP(t *testing.T) {
	if render(t, ``).agentConfig(t).InsecureAllowHTTP {
		t.Error("insecureAllowHttp set by default")
	}
	if !render(t, `insecureAllowHttp: true`).agentConfig(t).InsecureAllowHTTP {
		t.Error("insecureAllowHttp: true does not reach the agent")
	}
}

func TestExtraEnvAndSettings(t *testing.T) {
	r := render(t, `
cli: tofu
logLevel: debug
replicaCount: 3
kubeClient: {qps: 20.5, burst: 40}
jobs: {startupTimeout: 5m}
extraEnv:
  - name: OUTPOST_LOG_LEVEL
    value: warn
  - name: GOMEMLIMIT
    valueFrom:
      resourceFieldRef: {resource: limits.memory}
priorityClassName: system-cluster-critical
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: outpost, effect: NoSchedule}]
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [system]}]}]
topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {custom: "yes"}}}
terminationGracePeriodSeconds: 120
tmpSizeLimit: ""
`)
	d, c := r.deployment(t)
	cfg := r.agentConfig(t)
	if cfg.CLI != "tofu" || cfg.KubeClient.QPS != 20.5 || cfg.KubeClient.Burst != 40 || cfg.Jobs.StartupTimeout.Duration != 5*time.Minute {
		t.Errorf("cli %q, kubeClient %+v, jobs.startupTimeout %v", cfg.CLI, cfg.KubeClient, cfg.Jobs.StartupTimeout)
	}
	if cfg.LogLevel != "warn" {
		t.Errorf("logLevel %q, want warn: extraEnv comes last and wins over the file", cfg.LogLevel)
	}
	last := c.Env[len(c.Env)-1]
	if last.Name != "GOMEMLIMIT" || last.ValueFrom == nil || last.ValueFrom.ResourceFieldRef == nil || last.ValueFrom.ResourceFieldRef.Resource != "limits.memory" {
		t.Errorf("last env = %+v, want GOMEMLIMIT from limits.memory", last)
	}
	pod := d.Spec.Template.Spec
	if *d.Spec.Replicas != 3 || pod.PriorityClassName != "system-cluster-critical" || pod.NodeSelector["kubernetes.io/os"] != "linux" ||
		len(pod.Tolerations) != 1 || pod.Tolerations[0].Value != "outpost" || pod.Affinity == nil || pod.Affinity.NodeAffinity == nil ||
		*pod.TerminationGracePeriodSeconds != 120 {
		t.Errorf("pod scheduling settings not applied: replicas %d, %+v", *d.Spec.Replicas, pod)
	}
	if tsc := pod.TopologySpreadConstraints; len(tsc) != 1 || !mapsEqual(tsc[0].LabelSelector.MatchLabels, map[string]string{"custom": "yes"}) {
		t.Errorf("topologySpreadConstraints = %+v, want the user's, with its own labelSelector", tsc)
	}
	if tmp := volume(t, d, "tmp"); tmp.EmptyDir == nil || tmp.EmptyDir.SizeLimit != nil {
		t.Errorf("tmp volume = %+v, want an unbounded emptyDir", tmp.VolumeSource)
	}
}

// TestLeaderElectionOff checks the single-replica mode without a leader Lease.
func TestLeaderElectionOff(t *testing.T) {
	r := render(t, "replicaCount: 1\nleaderElection: {enabled: false}")
	if r.agentConfig(t).LeaderElection.Enabled {
		t.Error("leaderElection.enabled: false does not reach the agent")
	}
	// The single replica keeps the record of its connection on its Lease (for `helm test`), so it
	// keeps its Lease, but needs no pods: there is no leader to forward to.
	for _, tc := range []struct {
		access
		want bool
	}{
		{access{"create", "coordination.k8s.io", "leases", releaseNamespace, ""}, true},
		{access{"update", "coordination.k8s.io", "leases", releaseNamespace, releaseName}, true},
		{access{"update", "coordination.k8s.io", "leases", releaseNamespace, "another-lease"}, false},
		{access{"get", "", "pods", releaseNamespace, "outpost-agent-7d9f-abcde"}, false},
	} {
		if got := r.allowed(releaseNamespace, releaseName, tc.access); got != tc.want {
			t.Errorf("without leader election: %s allowed = %v, want %v", tc.access, got, tc.want)
		}
	}
}

// TestNames checks name overrides and the names of objects in namespaces shared between releases.
func TestNames(t *testing.T) {
	r := render(t, "fullnameOverride: agent-eu\njobs: {namespace: outpost-jobs}\nstate: {namespace: outpost-state}")
	for _, key := range []string{
		"Deployment outpost-system/agent-eu",
		"Service outpost-system/agent-eu",
		"Role outpost-system/agent-eu",
		// Objects outside the release namespace carry it, so two releases named alike in
		// different namespaces can share the jobs or state namespace.
		"Role outpost-jobs/outpost-system-agent-eu-jobs",
		"RoleBinding outpost-jobs/outpost-system-agent-eu-jobs",
		"Role outpost-state/outpost-system-agent-eu-state",
		"RoleBinding outpost-state/outpost-system-agent-eu-state",
	} {
		if _, ok := r.objects[key]; !ok {
			t.Errorf("no %s; rendered %v", key, r.keys())
		}
	}
	if cfg := r.agentConfig(t); cfg.State.URL != "https://agent-eu.outpost-system.svc:8443" || cfg.LeaderElection.LeaseName != "agent-eu" {
		t.Errorf("state.url %q, leaderElection.leaseName %q", cfg.State.URL, cfg.LeaderElection.LeaseName)
	}
	if role := get[rbacv1.Role](t, r, "Role", releaseNamespace, "agent-eu"); !slices.ContainsFunc(role.Rules, func(p rbacv1.PolicyRule) bool {
		return slices.Equal(p.ResourceNames, []string{"agent-eu"})
	}) {
		t.Errorf("the leader Lease rule does not name the Lease agent-eu: %+v", role.Rules)
	}

	r = render(t, "nameOverride: runner")
	if !r.has("Deployment", releaseNamespace, "outpost-agent-runner") {
		t.Errorf("nameOverride: rendered %v, want Deployment outpost-agent-runner", r.keys())
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func ptr[T any](v T) *T { return &v }

// TestStateTLS: by default the state backend serves TLS on 8443 (job pods get https://) and plain
// HTTP on 8080 for job pods of the previous release; state.tls.plainHTTP=false drops 8080 from
// the pod, the Service and both NetworkPolicies, and state.tls.enabled=false serves plain HTTP
// alone, without the CA Secret's rules.
func TestStateTLS(t *testing.T) {
	for _, tc := range []struct {
		values    string
		url       string
		listen    string
		ports     []int32
		caSecrets bool
	}{
		{"", "https://outpost-agent.outpost-system.svc:8443", ":8080", []int32{8080, 8443}, true},
		{"state: {tls: {plainHTTP: false}}", "https://outpost-agent.outpost-system.svc:8443", "", []int32{8443}, true},
		{"state: {tls: {enabled: false}}", "http://outpost-agent.outpost-system.svc:8080", ":8080", []int32{8080}, false},
	} {
		t.Run(tc.values, func(t *testing.T) {
			r := render(t, "jobs: {namespace: outpost-jobs}\n"+tc.values)
			_, c := r.deployment(t)
			if cfg := r.agentConfig(t); cfg.State.URL != tc.url || cfg.State.Listen != tc.listen {
				t.Errorf("state.url %q, state.listen %q, want %q, %q", cfg.State.URL, cfg.State.Listen, tc.url, tc.listen)
			}
			var pod, svc []int32
			for _, p := range c.Ports {
				if p.Name != "metrics" {
					pod = append(pod, p.ContainerPort)
				}
			}
			for _, p := range get[corev1.Service](t, r, "Service", releaseNamespace, releaseName).Spec.Ports {
				if p.Name != "metrics" {
					svc = append(svc, p.Port)
				}
			}
			if !slices.Equal(pod, tc.ports) || !slices.Equal(svc, tc.ports) {
				t.Errorf("state ports: pod %v, Service %v, want %v", pod, svc, tc.ports)
			}
			for _, np := range all[networkingv1.NetworkPolicy](r) {
				var got []int32
				for _, rule := range append(np.Spec.Egress, egressOf(np.Spec.Ingress)...) {
					for _, p := range rule.Ports {
						if v := p.Port.IntValue(); v == 8080 || v == 8443 {
							got = append(got, int32(v))
						}
					}
				}
				if !slices.Equal(got, tc.ports) {
					t.Errorf("NetworkPolicy %s allows state ports %v, want %v", np.Name, got, tc.ports)
				}
			}
			role := get[rbacv1.Role](t, r, "Role", releaseNamespace, releaseName)
			has := slices.ContainsFunc(role.Rules, func(p rbacv1.PolicyRule) bool {
				return slices.Equal(p.ResourceNames, []string{"outpost-agent-state-tls"})
			})
			if has != tc.caSecrets {
				t.Errorf("Role grants the CA Secret: %v, want %v", has, tc.caSecrets)
			}
		})
	}
}

// egressOf turns ingress rules into egress rules with the same ports, so one loop reads both.
func egressOf(in []networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyEgressRule {
	out := make([]networkingv1.NetworkPolicyEgressRule, len(in))
	for i, r := range in {
		out[i] = networkingv1.NetworkPolicyEgressRule{Ports: r.Ports}
	}
	return out
}
