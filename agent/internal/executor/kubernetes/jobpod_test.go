package kubernetes

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

func claimWithPod(tpl string, pod *api.JobPod) *api.Claim {
	c := claim(tpl)
	c.Placement.Job.Pod = pod
	return c
}

func mainOf(t *testing.T, spec *corev1.PodSpec) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == podtemplate.MainContainer {
			return &spec.Containers[i]
		}
	}
	t.Fatal("no main container")
	return nil
}

func envValue(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

var chartResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
}

// TestJobPodPrecedence: chart defaults < pod template < job pod settings < the agent's own fields.
func TestJobPodPrecedence(t *testing.T) {
	o := opts
	o.Resources = chartResources
	o.ForwardEnv = map[string]string{"AWS_REGION": "eu-west-1", "TF_LOG": "DEBUG", "UNSET": ""}
	tpl := `{"spec":{"containers":[{"name":"main","env":[{"name":"TF_LOG","value":"INFO"}]}]}}`

	// Nothing sets resources: the chart's default; TF_LOG is the template's, AWS_REGION forwarded.
	job, _, err := BuildJob(claimWithPod(tpl, nil), "opst_test", o, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	main := mainOf(t, &job.Spec.Template.Spec)
	if got := main.Resources.Limits[corev1.ResourceMemory]; got.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("default memory limit %s, want the chart's 2Gi", got.String())
	}
	if v, _ := envValue(main, "TF_LOG"); v != "INFO" {
		t.Errorf("TF_LOG = %q: a variable the runner sets wins over a forwarded one", v)
	}
	if v, _ := envValue(main, "AWS_REGION"); v != "eu-west-1" {
		t.Errorf("AWS_REGION = %q, want the forwarded value", v)
	}
	if _, ok := envValue(main, "UNSET"); ok {
		t.Error("a forwarded variable without a value must be left out")
	}

	// Settings win over the template; their resources replace the chart's default entirely.
	pod := &api.JobPod{
		Resources: &api.JobResources{Requests: map[string]string{"cpu": "2"}},
		Env:       []api.JobEnvVar{{Name: "TF_LOG", Value: "TRACE"}, {Name: "AWS_REGION", Value: "us-east-1"}},
		Labels:    map[string]string{"team": "payments"},
	}
	job, _, err = BuildJob(claimWithPod(tpl, pod), "opst_test", o, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	main = mainOf(t, &job.Spec.Template.Spec)
	if got := main.Resources.Requests[corev1.ResourceCPU]; got.Cmp(resource.MustParse("2")) != 0 || len(main.Resources.Limits) != 0 {
		t.Errorf("resources %+v, want only the setting's cpu request", main.Resources)
	}
	if v, _ := envValue(main, "TF_LOG"); v != "TRACE" {
		t.Errorf("TF_LOG = %q, want the setting's", v)
	}
	if v, _ := envValue(main, "AWS_REGION"); v != "us-east-1" {
		t.Errorf("AWS_REGION = %q, want the setting's over the forwarded one", v)
	}
	if job.Spec.Template.Labels["team"] != "payments" || job.Spec.Template.Labels[LabelRunnerID] != "r1" {
		t.Errorf("labels %v", job.Spec.Template.Labels)
	}
	if v, _ := envValue(main, jobenv.APIURL); v != "https://orch" {
		t.Errorf("%s = %q: the agent's own variables are re-asserted last", jobenv.APIURL, v)
	}
}

// TestJobPodSettingsMeetThePolicy: what arrives through the settings is checked like the template.
func TestJobPodSettingsMeetThePolicy(t *testing.T) {
	cases := []struct {
		name, field, value string
		pod                *api.JobPod
	}{
		{"hostPath volume", "spec.volumes[root].hostPath", valueVolumeTypes, &api.JobPod{Volumes: `[{"name":"root","hostPath":{"path":"/"}}]`,
			VolumeMounts: []api.JobVolumeMount{{Name: "root", MountPath: "/host"}}}},
		{"secret env", "spec.containers[main].env[PW].valueFrom.secretKeyRef.name", valueSecrets, &api.JobPod{Env: []api.JobEnvVar{{Name: "PW", SecretKeyRef: &api.JobKeyRef{Name: "db", Key: "pw"}}}}},
		{"configMap volume", "spec.volumes[c].configMap.name", valueConfigMaps, &api.JobPod{Volumes: `[{"name":"c","configMap":{"name":"settings"}}]`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Options{PodOptions: opts})
			_, _, err := e.build(claimWithPod("", tc.pod), "opst_test")
			var pe *PolicyError
			if !errors.As(err, &pe) || !errors.Is(err, executor.ErrPolicy) {
				t.Fatalf("build = %v, want a policy refusal", err)
			}
			if len(pe.Violations) != 1 || pe.Violations[0].Field != tc.field || pe.Violations[0].Value != tc.value {
				t.Fatalf("violations %+v, want one at %s naming %s", pe.Violations, tc.field, tc.value)
			}
		})
	}
	e := New(Options{PodOptions: opts, Policy: Policy{AllowedSecrets: []string{"db"}}})
	if _, _, err := e.build(claimWithPod("", cases[1].pod), "opst_test"); err != nil {
		t.Fatalf("with jobs.policy.allowedSecrets naming db the env must pass: %v", err)
	}
}

func TestPinnedTemplateIgnoresJobPodSettings(t *testing.T) {
	e := New(Options{PodOptions: opts, PinnedTemplate: `{"spec":{"containers":[{"name":"main"}]}}`})
	job, _, err := e.build(claimWithPod("", &api.JobPod{Labels: map[string]string{"team": "x"}}), "opst_test")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := job.Spec.Template.Labels["team"]; ok {
		t.Error("a pinned template must ignore the runner's job pod settings too")
	}
}

func TestInvalidJobPodSettingsFailTheClaim(t *testing.T) {
	e := New(Options{PodOptions: opts})
	_, _, err := e.build(claimWithPod("", &api.JobPod{Env: []api.JobEnvVar{{Name: "OUTPOST_API_URL", Value: "http://evil"}}}), "opst_test")
	if !errors.Is(err, executor.ErrInvalidJob) {
		t.Fatalf("build = %v, want ErrInvalidJob", err)
	}
}

// TestPluginCacheAndProviderInstallation: the cluster owner's plugin cache volume is mounted
// into main and named to the job runner, with the provider_installation block; both are the
// agent's own, so a template cannot replace them.
func TestPluginCacheAndProviderInstallation(t *testing.T) {
	o := opts
	o.PluginCache = &corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "tf-plugins"}}
	o.ProviderInstallation = `provider_installation { network_mirror { url = "https://mirror.corp/providers/" } }`
	tpl := `{"spec":{"containers":[{"name":"main","env":[{"name":"OUTPOST_PLUGIN_CACHE_DIR","value":"/tmp/x"}]}],"volumes":[{"name":"outpost-plugin-cache","emptyDir":{}}]}}`
	job, _, err := BuildJob(claim(tpl), "opst_test", o, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	main := mainOf(t, &job.Spec.Template.Spec)
	if v, _ := envValue(main, jobenv.PluginCacheDir); v != pluginCacheMountPath {
		t.Errorf("%s = %q, want %s", jobenv.PluginCacheDir, v, pluginCacheMountPath)
	}
	if v, _ := envValue(main, jobenv.ProviderInstallation); v != o.ProviderInstallation {
		t.Errorf("%s = %q", jobenv.ProviderInstallation, v)
	}
	var vol *corev1.Volume
	for i, v := range job.Spec.Template.Spec.Volumes {
		if v.Name == pluginCacheVolume {
			if vol != nil {
				t.Fatal("two plugin cache volumes")
			}
			vol = &job.Spec.Template.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.PersistentVolumeClaim == nil || vol.PersistentVolumeClaim.ClaimName != "tf-plugins" {
		t.Errorf("plugin cache volume %+v", vol)
	}
	// Its claim is the cluster owner's, so the job pod policy needs no allowedClaims for it.
	if _, _, err := New(Options{PodOptions: o}).build(claim(tpl), "opst_test"); err != nil {
		t.Errorf("the policy refuses the plugin cache's claim: %v", err)
	}
	// N11: a plan never gets the shared cache, so it cannot plant a provider a later apply runs.
	plan := claim("")
	plan.Placement.Operation = api.OperationPlan
	job, _, err = BuildJob(plan, "opst_test", o, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := envValue(mainOf(t, &job.Spec.Template.Spec), jobenv.PluginCacheDir); ok {
		t.Error("a plan got the plugin cache directory")
	}
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.Name == pluginCacheVolume {
			t.Error("a plan's pod mounts the shared plugin cache")
		}
	}
	// Without the options, neither appears.
	job, _, err = BuildJob(claim(""), "opst_test", opts, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	main = mainOf(t, &job.Spec.Template.Spec)
	if _, ok := envValue(main, jobenv.PluginCacheDir); ok {
		t.Error("a plugin cache directory without a plugin cache volume")
	}
}
