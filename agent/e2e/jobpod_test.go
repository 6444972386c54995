package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// TestJobPodSettingsReachTheJob: a runner's job pod settings, its pod template, the agent's
// defaults and forwarded variables all land on the Job the real API server stores, in the
// documented precedence, and the Job runs.
func TestJobPodSettingsReachTheJob(t *testing.T) {
	t.Parallel()
	secs := int64(300)
	pod := &api.JobPod{
		Resources:    &api.JobResources{Requests: map[string]string{"memory": "1Gi"}, Limits: map[string]string{"memory": "3Gi"}},
		NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
		Tolerations:  []api.JobToleration{{Key: "dedicated", Operator: "Equal", Value: "iac", Effect: "NoSchedule"}, {Key: "spot", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: &secs}},
		Affinity:     `{"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":10,"podAffinityTerm":{"topologyKey":"kubernetes.io/hostname","labelSelector":{"matchLabels":{"team":"payments"}}}}]}}`,
		Env: []api.JobEnvVar{{Name: "TF_LOG", Value: "DEBUG"}, {Name: "DB_PASSWORD", SecretKeyRef: &api.JobKeyRef{Name: "db", Key: "password", Optional: true}},
			{Name: "REGION", ConfigMapKeyRef: &api.JobKeyRef{Name: "settings", Key: "region", Optional: true}}},
		Labels:            map[string]string{"team": "payments"},
		Annotations:       map[string]string{"example.com/owner": "payments"},
		Volumes:           `[{"name":"plugin-cache","emptyDir":{"sizeLimit":"1Gi"}},{"name":"settings","configMap":{"name":"settings","optional":true}}]`,
		VolumeMounts:      []api.JobVolumeMount{{Name: "plugin-cache", MountPath: "/cache"}, {Name: "settings", MountPath: "/etc/settings", ReadOnly: true}},
		PriorityClassName: "outpost-e2e-iac",
	}
	// The template sets TF_LOG and a team label the settings replace, and a label they keep.
	tpl := `{"metadata":{"labels":{"team":"infra","tier":"batch"}},"spec":{"containers":[{"name":"main","env":[{"name":"TF_LOG","value":"INFO"},{"name":"KEEP","value":"1"}]}]}}`
	e := newEnvWithPod(t, tpl, pod, 5)
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: pod.PriorityClassName}, Value: 1000}
	if _, err := e.cluster.Client().SchedulingV1().PriorityClasses().Create(t.Context(), pc, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	e.agentEnv = append(e.agentEnv, "AWS_REGION=eu-west-1", "TF_LOG=TRACE")
	// The structured settings come from the agent's configuration file, as the chart gives them.
	configFile := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(configFile, []byte(`jobs:
  policy: {allowedSecrets: [db], allowedConfigMaps: [settings], allowedPriorityClasses: [outpost-e2e-iac]}
  pluginCache: {emptyDir: {sizeLimit: 2Gi}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	e.startAgent("agent-0", "--leader-elect=false", "--job-forward-env", "AWS_REGION,TF_LOG", "--config", configFile,
		"--job-provider-installation", `provider_installation { network_mirror { url = "https://mirror.corp/providers/" } }`)
	// An apply: a plan gets no plugin cache (it could plant a provider a later apply runs).
	d, err := e.admin.CreateDeployment(t.Context(), api.DeploymentInput{RunnerID: e.runnerID, Operation: api.OperationApply,
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive(t)}}, StateKey: "state-0"})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{d.ID}

	testbed.WaitFor(t, 60*time.Second, "the agent to create the Job", func() (bool, string) { return len(e.jobs()) == 1, "" })
	job := e.jobs()[0]
	spec := job.Spec.Template.Spec
	if l := job.Spec.Template.Labels; l["team"] != "payments" || l["tier"] != "batch" {
		t.Errorf("pod labels %v: the setting replaces the template's team, tier stays", l)
	}
	if job.Spec.Template.Annotations["example.com/owner"] != "payments" {
		t.Errorf("pod annotations %v", job.Spec.Template.Annotations)
	}
	if spec.NodeSelector["kubernetes.io/os"] != "linux" || len(spec.Tolerations) != 2 || *spec.Tolerations[1].TolerationSeconds != 300 {
		t.Errorf("node selector %v tolerations %+v", spec.NodeSelector, spec.Tolerations)
	}
	if spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil || spec.PriorityClassName != "outpost-e2e-iac" {
		t.Errorf("affinity %+v priority class %q", spec.Affinity, spec.PriorityClassName)
	}
	var main corev1.Container
	for _, c := range spec.Containers {
		if c.Name == "main" {
			main = c
		}
	}
	if got := main.Resources.Limits[corev1.ResourceMemory]; got.Cmp(resource.MustParse("3Gi")) != 0 {
		t.Errorf("main's memory limit %s, want the setting's 3Gi over the agent's default", got.String())
	}
	if _, ok := main.Resources.Requests[corev1.ResourceCPU]; ok {
		t.Errorf("main's requests %v: settings replace the agent's default resources as a whole", main.Resources.Requests)
	}
	env := map[string]corev1.EnvVar{}
	for _, v := range main.Env {
		env[v.Name] = v
	}
	if env["TF_LOG"].Value != "DEBUG" || env["KEEP"].Value != "1" || env["AWS_REGION"].Value != "eu-west-1" {
		t.Errorf("env TF_LOG=%q KEEP=%q AWS_REGION=%q: settings over template over forwarded", env["TF_LOG"].Value, env["KEEP"].Value, env["AWS_REGION"].Value)
	}
	if env["OUTPOST_PLUGIN_CACHE_DIR"].Value != "/var/cache/outpost/plugins" || !strings.Contains(env["OUTPOST_PROVIDER_INSTALLATION"].Value, "network_mirror") {
		t.Errorf("plugin cache %q, provider installation %q", env["OUTPOST_PLUGIN_CACHE_DIR"].Value, env["OUTPOST_PROVIDER_INSTALLATION"].Value)
	}
	if ref := env["DB_PASSWORD"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "db" {
		t.Errorf("DB_PASSWORD %+v", env["DB_PASSWORD"])
	}
	if ref := env["REGION"].ValueFrom; ref == nil || ref.ConfigMapKeyRef == nil || ref.ConfigMapKeyRef.Key != "region" {
		t.Errorf("REGION %+v", env["REGION"])
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range main.VolumeMounts {
		mounts[m.Name] = m
	}
	if mounts["plugin-cache"].MountPath != "/cache" || !mounts["settings"].ReadOnly || mounts["outpost-job-token"].MountPath == "" {
		t.Errorf("mounts %+v", main.VolumeMounts)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	if vols["outpost-plugin-cache"].EmptyDir == nil || mounts["outpost-plugin-cache"].MountPath != "/var/cache/outpost/plugins" {
		t.Errorf("plugin cache volume %+v mount %+v", vols["outpost-plugin-cache"], mounts["outpost-plugin-cache"])
	}
	if vols["plugin-cache"].EmptyDir == nil || vols["settings"].ConfigMap == nil || vols["outpost-runner"].EmptyDir == nil {
		t.Errorf("volumes %+v", spec.Volumes)
	}
	// The pod is admitted (Pod Security restricted, the PriorityClass) and the Job runs.
	d = e.waitTerminal(ids, 120*time.Second)[ids[0]]
	if d.Status != api.StatusSucceeded {
		t.Fatalf("deployment %s (%s): %s", d.Status, d.Reason, d.Message)
	}
}

// TestJobPodSettingsMeetThePolicy: a hostPath volume that arrives through the settings, not the
// template, is refused by the job pod policy like any other; nothing is created.
func TestJobPodSettingsMeetThePolicy(t *testing.T) {
	t.Parallel()
	e := newEnvWithPod(t, "", &api.JobPod{Volumes: `[{"name":"root","hostPath":{"path":"/"}}]`,
		VolumeMounts: []api.JobVolumeMount{{Name: "root", MountPath: "/host"}}}, 5)
	e.startAgent("agent-0", "--leader-elect=false")
	ids := e.deploy(1)
	d := e.waitTerminal(ids, 60*time.Second)[ids[0]]
	if d.Status != api.StatusFailed || d.Reason != "pod_policy" || !strings.Contains(d.Message, "spec.volumes[root].hostPath") ||
		!strings.Contains(d.Message, "jobs.policy.allowedVolumeTypes") {
		t.Fatalf("deployment %s (%s): %s", d.Status, d.Reason, d.Message)
	}
	if js := e.jobs(); len(js) != 0 {
		t.Errorf("%d Jobs created for a refused volume", len(js))
	}
}
