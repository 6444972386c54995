package chart_test

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/config"
	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
)

// agentPodName stands for the pod name the downward API gives the agent.
const agentPodName = "outpost-agent-7d9f-abcde"

// agentConfig starts the agent's configuration parser the way the rendered pod starts the
// agent: the ConfigMap's file where the Deployment mounts it, the container's environment (the
// downward API's fields filled in as the kubelet would), no flags.
func (r *rendered) agentConfig(t *testing.T) *config.Config {
	t.Helper()
	d, c := r.deployment(t)
	volume := volume(t, d, "config")
	if volume.ConfigMap == nil {
		t.Fatalf("volume config is %+v, want the ConfigMap", volume.VolumeSource)
	}
	cm := get[corev1.ConfigMap](t, r, "ConfigMap", releaseNamespace, volume.ConfigMap.Name)
	file, ok := cm.Data["agent.yaml"]
	if !ok {
		t.Fatalf("ConfigMap %s holds no agent.yaml: %v", cm.Name, cm.Data)
	}
	m := mount(t, c, volume.Name)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			vars[e.Name] = releaseNamespace
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			vars[e.Name] = agentPodName
		}
	}
	path, ok := vars["OUTPOST_CONFIG"]
	if !ok || !strings.HasPrefix(path, m.MountPath+"/") {
		t.Fatalf("OUTPOST_CONFIG = %q, want the file in the mount %s", path, m.MountPath)
	}
	vars["OUTPOST_CONFIG"] = filepath.Join(dir, strings.TrimPrefix(path, m.MountPath+"/"))
	cfg, err := config.Parse(nil, func(k string) string { return vars[k] }, io.Discard)
	if err != nil {
		t.Fatalf("the agent refuses the rendered configuration: %v\n%s", err, file)
	}
	return cfg
}

// TestConfigFile renders the chart from the required values, feeds the ConfigMap's file and the
// Deployment's environment to the agent's parser, and checks the typed result and that it
// validates.
func TestConfigFile(t *testing.T) {
	c := render(t, "").agentConfig(t)
	if err := c.Validate(); err != nil {
		t.Errorf("the agent refuses the default configuration: %v", err)
	}
	want := config.Defaults()
	want.File = c.File
	want.APIURL, want.OrgID, want.RunnerID = "https://outpost.example.com", "acme", "prod-eu"
	want.PrivateKey.ExistingSecret = "prod-eu-key"
	want.Namespace, want.PodName = releaseNamespace, agentPodName
	want.LeaderElection.LeaseName = "outpost-agent"
	want.State.URL = "https://outpost-agent.outpost-system.svc:8443"
	want.State.Namespace = releaseNamespace + "-state"
	want.State.TLS = config.StateTLS{Secret: "outpost-agent-state-tls", Listen: ":8443", Hosts: []string{"outpost-agent.outpost-system.svc",
		"outpost-agent.outpost-system.svc.cluster.local", "outpost-agent.outpost-system", "outpost-agent"}}
	j := &want.Jobs
	j.Namespace, j.ServiceAccount, j.Image, j.AgentImage = releaseNamespace+"-jobs", "outpost-job", jobImage, agentImage
	// The job pod policy refuses everything beyond Pod Security "restricted" by default, and job
	// pods with the labels of the agent Service's selector.
	j.Policy = kubeexec.Policy{AgentSelector: map[string]string{"app.kubernetes.io/component": "agent", "app.kubernetes.io/instance": "outpost-agent",
		"app.kubernetes.io/name": "outpost-agent"}, AllowedCapabilities: []string{}, AllowedVolumeTypes: []string{}, AllowedSecrets: []string{},
		AllowedConfigMaps: []string{}, AllowedSysctls: []string{}, AllowedClaims: []string{}, AllowedPriorityClasses: []string{}, AllowedRuntimeClasses: []string{}}
	j.SecurityDefaults = kubeexec.RestrictedDefaults()
	// The chart's securityContext leaves these two to the pod.
	sd := &j.SecurityDefaults
	sd.Container.RunAsNonRoot, sd.Container.SeccompProfile = nil, nil
	j.PodLabels = map[string]string{}
	j.Options.ForwardEnv, j.ProxyEnv = map[string]string{}, map[string]string{}
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"top level", stripSections(*c), stripSections(*want)},
		{"state", c.State, want.State},
		{"jobs.policy", c.Jobs.Policy, want.Jobs.Policy},
		{"jobs.securityDefaults", c.Jobs.SecurityDefaults, want.Jobs.SecurityDefaults},
		{"jobs", stripPolicy(c.Jobs), stripPolicy(want.Jobs)},
		{"process", c.Process, want.Process},
	} {
		if !reflect.DeepEqual(f.got, f.want) {
			g, _ := json.Marshal(f.got)
			w, _ := json.Marshal(f.want)
			t.Errorf("%s:\n got %s\nwant %s", f.name, g, w)
		}
	}
}

func stripSections(c config.Config) config.Config {
	c.State, c.Jobs = config.State{}, config.Jobs{}
	return c
}

func stripPolicy(j config.Jobs) config.Jobs {
	j.Policy, j.SecurityDefaults = kubeexec.Policy{}, kubeexec.SecurityDefaults{}
	return j
}

// TestConfigFileValues sets the values whose settings are structured (before the file they
// reached the agent as JSON in environment variables) and reads them back typed.
func TestConfigFileValues(t *testing.T) {
	r := render(t, `
jobs:
  namespace: outpost-jobs
  resources: {requests: {cpu: "1", memory: 1Gi}, limits: {memory: 3Gi}}
  pluginCache: {persistentVolumeClaim: {claimName: tf-plugins}}
  podTemplate: {spec: {containers: [{name: main, image: acme/tf}]}}
  podLabels: {azure.workload.identity/use: "true"}
  forwardEnv: [AWS_REGION]
  policy: {allowedSecrets: [db], podSecurityLevel: baseline}
  podSecurityContext: {runAsUser: 1000}
  serviceAccount: {automountToken: true}
  history: {succeeded: 3, failed: 0}
state: {limits: {maxBodyBytes: 134217728}, tls: {enabled: false}, versions: {keep: 25, maxAge: 720h}}
kubeClient: {qps: 20.5, burst: 40}
extraEnv: [{name: AWS_REGION, value: eu-west-1}]
tracing: {endpoint: "http://otel-collector.observability:4318"}
`)
	c := r.agentConfig(t)
	if err := c.Validate(); err != nil {
		t.Errorf("the agent refuses the configuration: %v", err)
	}
	if c.Tracing.Endpoint != "http://otel-collector.observability:4318" {
		t.Errorf("tracing.endpoint = %q", c.Tracing.Endpoint)
	}
	j := c.Jobs
	if got := j.Resources.Limits[corev1.ResourceMemory]; !got.Equal(resource.MustParse("3Gi")) || !j.Resources.Requests.Cpu().Equal(resource.MustParse("1")) {
		t.Errorf("jobs.resources = %+v", j.Resources)
	}
	if j.PluginCache == nil || j.PluginCache.PersistentVolumeClaim == nil || j.PluginCache.PersistentVolumeClaim.ClaimName != "tf-plugins" {
		t.Errorf("jobs.pluginCache = %+v", j.PluginCache)
	}
	if j.PinnedTemplate != `{"spec":{"containers":[{"image":"acme/tf","name":"main"}]}}` {
		t.Errorf("jobs.podTemplate = %s", j.PinnedTemplate)
	}
	if j.PodLabels["azure.workload.identity/use"] != "true" || j.Options.ForwardEnv["AWS_REGION"] != "eu-west-1" {
		t.Errorf("jobs.podLabels %v, forwarded env %v", j.PodLabels, j.Options.ForwardEnv)
	}
	if !slices.Equal(j.Policy.AllowedSecrets, []string{"db"}) || j.Policy.PodSecurityLevel != "baseline" || !j.Policy.AllowServiceAccountToken {
		t.Errorf("jobs.policy = %+v", j.Policy)
	}
	if sd := &j.SecurityDefaults; sd.Pod.RunAsUser == nil || *sd.Pod.RunAsUser != 1000 {
		t.Errorf("jobs.podSecurityContext.runAsUser = %v", sd.Pod.RunAsUser)
	}
	if j.History != (kubeexec.History{Succeeded: 3, Failed: 0}) || j.Namespace != "outpost-jobs" {
		t.Errorf("jobs.history %+v, namespace %q", j.History, j.Namespace)
	}
	if c.State.Limits.MaxBodyBytes != 128<<20 || c.State.TLS.Secret != "" || c.State.URL != "http://outpost-agent.outpost-system.svc:8080" {
		t.Errorf("state = %+v", c.State)
	}
	if v := c.State.Versions; v.Keep != 25 || v.MaxAge.Duration != 720*time.Hour {
		t.Errorf("state.versions = %+v, want 25 kept for 720h", v)
	}
	if c.KubeClient != (config.KubeClient{QPS: 20.5, Burst: 40}) {
		t.Errorf("kubeClient = %+v", c.KubeClient)
	}

	// None of it reaches the agent's environment as JSON, or at all.
	_, container := r.deployment(t)
	for _, e := range container.Env {
		var v any
		if json.Unmarshal([]byte(e.Value), &v) == nil {
			switch v.(type) {
			case map[string]any, []any:
				t.Errorf("env %s holds JSON: %s", e.Name, e.Value)
			}
		}
	}
	var names []string
	for _, e := range container.Env {
		names = append(names, e.Name)
	}
	if want := []string{"OUTPOST_CONFIG", "OUTPOST_NAMESPACE", "OUTPOST_POD_NAME", "GOMEMLIMIT", "AWS_REGION"}; !slices.Equal(names, want) {
		t.Errorf("agent env %v, want %v (the settings are in the file)", names, want)
	}
}

// TestConfigFileKeepsSecretsOut: the key material stays in Secrets; the file only names where
// the agent reads it.
func TestConfigFileKeepsSecretsOut(t *testing.T) {
	const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	r := render(t, "caBundle: {pem: \""+strings.ReplaceAll(pem, "\n", `\n`)+"\"}\nstate: {encryption: {existingSecret: outpost-state-key}}")
	cm := get[corev1.ConfigMap](t, r, "ConfigMap", releaseNamespace, releaseName+"-config")
	if strings.Contains(cm.Data["agent.yaml"], "BEGIN CERTIFICATE") {
		t.Errorf("the configuration file holds the CA bundle:\n%s", cm.Data["agent.yaml"])
	}
	c := r.agentConfig(t)
	if c.CABundleFile != "/etc/outpost/ca/ca.crt" || c.State.EncryptionKeyFile != "/etc/outpost/state-key/key" || c.PrivateKey.ExistingSecret != "prod-eu-key" {
		t.Errorf("files and Secrets: ca %q, state key %q, private key Secret %q", c.CABundleFile, c.State.EncryptionKeyFile, c.PrivateKey.ExistingSecret)
	}
}

// TestConfigChangeRollsThePods: the agent reads its file at start, so the pod template carries
// the file's checksum and a changed value rolls the pods.
func TestConfigChangeRollsThePods(t *testing.T) {
	sum := func(values string) string {
		d, _ := render(t, values).deployment(t)
		return d.Spec.Template.Annotations["checksum/config"]
	}
	a, b := sum(""), sum("logLevel: debug")
	if a == "" || a == b {
		t.Errorf("checksum/config %q and %q, want two different checksums", a, b)
	}
}
