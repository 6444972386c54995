package config

import (
	"bytes"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// A file sets what neither the environment nor a flag sets; the environment wins over the
// file, a flag over both, and the defaults fill the rest.
func TestParsePrecedenceFlagEnvFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(file, []byte(`apiUrl: https://file.example
orgId: fileorg
runnerId: filerunner
kubeClient: {qps: 7}
leaderElection: {enabled: false}
jobs:
  imagePullSecrets: [a, b]
  podLabels: {team: infra}
  startupTimeout: 1m
  history: {failed: 3}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]string{"--config", file, "--runner-id", "flagrunner"}, env(map[string]string{
		"OUTPOST_ORG_ID": "envorg", "OUTPOST_RUNNER_ID": "envrunner", "OUTPOST_CANCEL_GRACE": "45s",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.APIURL != "https://file.example" || c.OrgID != "envorg" || c.RunnerID != "flagrunner" {
		t.Errorf("precedence wrong: api %q org %q runner %q", c.APIURL, c.OrgID, c.RunnerID)
	}
	if c.KubeClient.QPS != 7 || c.LeaderElection.Enabled || c.CancelGrace.Duration != 45*time.Second || c.KubeClient.Burst != 100 ||
		c.Jobs.StartupTimeout.Duration != time.Minute || c.Jobs.History != (kubeexec.History{Succeeded: 10, Failed: 3}) {
		t.Errorf("values: qps %v leader %v grace %v burst %d startup %v history %+v", c.KubeClient.QPS, c.LeaderElection.Enabled, c.CancelGrace, c.KubeClient.Burst,
			c.Jobs.StartupTimeout, c.Jobs.History)
	}
	if strings.Join(c.Jobs.ImagePullSecrets, ",") != "a,b" || c.Jobs.PodLabels["team"] != "infra" {
		t.Errorf("pull secrets %v labels %v", c.Jobs.ImagePullSecrets, c.Jobs.PodLabels)
	}
	// OUTPOST_CONFIG names the file when --config does not.
	c, err = Parse(nil, env(map[string]string{"OUTPOST_CONFIG": file}), io.Discard)
	if err != nil || c.RunnerID != "filerunner" || c.File != file {
		t.Errorf("OUTPOST_CONFIG: runner %q file %q, %v", c.RunnerID, c.File, err)
	}
}

// A bad setting in the file is refused naming its key and the chart value it comes from.
func TestDecodeErrorsNameTheChartValue(t *testing.T) {
	for doc, want := range map[string][]string{
		"jobs: {resources: {limits: {cpu: lots}}}":    {"jobs.resources.limits.cpu (chart value jobs.resources)", "quantities must match"},
		"jobs: {history: {failed: many}}":             {"jobs.history.failed (chart value jobs.history; --job-history-failed, OUTPOST_JOB_HISTORY_FAILED)"},
		"jobs: {pluginCache: {persistentVolume: {}}}": {"jobs.pluginCache.persistentVolume (chart value jobs.pluginCache)", "unknown field"},
		"jobs: {policy: {allowEverything: true}}":     {"jobs.policy.allowEverything (chart value jobs.policy)", "unknown field"},
		"kubeClient: {qps: fast}":                     {"kubeClient.qps (chart value kubeClient.qps; --kube-qps, OUTPOST_KUBE_QPS)"},
		"apiURL: https://o.example":                   {"apiURL", "unknown field"},
		"- a list":                                    {"not a YAML map"},
	} {
		err := Defaults().Decode([]byte(doc))
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v does not say %q", doc, err, w)
			}
		}
	}
}

func TestParseJobResourcesAndForwardEnv(t *testing.T) {
	c, err := Parse(nil, env(map[string]string{"OUTPOST_JOB_FORWARD_ENV": "AWS_REGION, TF_LOG,", "AWS_REGION": "eu-west-1"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Jobs.Resources.Limits[corev1.ResourceMemory]; got.String() != "2Gi" {
		t.Errorf("default memory limit %s, want 2Gi (DefaultJobResources)", got.String())
	}
	if fw := c.Jobs.Options.ForwardEnv; len(fw) != 2 || fw["AWS_REGION"] != "eu-west-1" || fw["TF_LOG"] != "" {
		t.Errorf("forwarded env %v", fw)
	}
	c = Defaults()
	if err := c.Decode([]byte("jobs: {pluginCache: {persistentVolumeClaim: {claimName: tf-plugins}}, resources: {}}")); err != nil {
		t.Fatal(err)
	}
	c.complete(env(nil))
	if c.Jobs.PluginCache == nil || c.Jobs.PluginCache.PersistentVolumeClaim.ClaimName != "tf-plugins" {
		t.Errorf("jobs.pluginCache: %+v", c.Jobs.PluginCache)
	}
	if len(c.Jobs.Resources.Requests)+len(c.Jobs.Resources.Limits) != 0 {
		t.Errorf("jobs.resources {} must mean none: %+v", c.Jobs.Resources)
	}
	c = Defaults()
	if err := c.Decode([]byte("jobs: {pluginCache: {}, podTemplate: {}, resources: {limits: {memory: 4Gi}}}")); err != nil {
		t.Fatal(err)
	}
	c.complete(env(nil))
	if c.Jobs.PluginCache != nil || c.Jobs.PinnedTemplate != "" || len(c.Jobs.Resources.Requests) != 0 {
		t.Errorf("{} must mean none, and resources replace the defaults: cache %+v template %q resources %+v", c.Jobs.PluginCache, c.Jobs.PinnedTemplate, c.Jobs.Resources)
	}
}

func TestParseEnvLists(t *testing.T) {
	c, err := Parse(nil, env(map[string]string{"OUTPOST_JOB_IMAGE_PULL_SECRETS": " one, two ,", "OUTPOST_JOB_POD_LABELS": "a=b"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Jobs.ImagePullSecrets, ",") != "one,two" || c.Jobs.PodLabels["a"] != "b" {
		t.Errorf("pull secrets %v labels %v", c.Jobs.ImagePullSecrets, c.Jobs.PodLabels)
	}
	if _, err := Parse(nil, env(map[string]string{"OUTPOST_JOB_POD_LABELS": `{"team":"infra"}`}), io.Discard); err == nil || !strings.Contains(err.Error(), "OUTPOST_JOB_POD_LABELS") {
		t.Errorf("labels as JSON (the format before the configuration file): err = %v", err)
	}
	if _, err := Parse(nil, env(map[string]string{"OUTPOST_JOB_RESOURCES": "{}"}), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "OUTPOST_JOB_RESOURCES is no longer read: set jobs.resources in the configuration file") {
		t.Errorf("a variable of an earlier agent must be refused, naming its key: %v", err)
	}
	if _, err := Parse(nil, env(map[string]string{"OUTPOST_KUBE_QPS": "fast"}), io.Discard); err == nil || !strings.Contains(err.Error(), "OUTPOST_KUBE_QPS") {
		t.Errorf("bad qps: err = %v", err)
	}
}

// The proxy variables of the agent's environment are kept for the job pods, upper case first.
func TestParseProxyEnv(t *testing.T) {
	c, err := Parse(nil, env(map[string]string{"HTTPS_PROXY": "http://proxy:3128", "https_proxy": "http://other:1",
		"http_proxy": "http://lower:8080", "NO_PROXY": ".svc,10.0.0.0/8"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"HTTPS_PROXY": "http://proxy:3128", "HTTP_PROXY": "http://lower:8080", "NO_PROXY": ".svc,10.0.0.0/8"}
	if len(c.Jobs.ProxyEnv) != len(want) {
		t.Errorf("proxy env %v, want %v", c.Jobs.ProxyEnv, want)
	}
	for k, v := range want {
		if c.Jobs.ProxyEnv[k] != v {
			t.Errorf("%s = %q, want %q", k, c.Jobs.ProxyEnv[k], v)
		}
	}
	if c.CLI != "" {
		t.Errorf("default cli %q, want empty (the job runner finds tofu or terraform)", c.CLI)
	}
}

func valid() *Config {
	c, _ := Parse([]string{"--api-url", "https://o.example", "--org-id", "acme", "--runner-id", "r1", "--job-image", "img",
		"--agent-image", "agent-img", "--namespace", "outpost-system", "--pod-name", "agent-0"}, env(nil), io.Discard)
	return c
}

func TestValidate(t *testing.T) {
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	cases := map[string]struct {
		mutate func(*Config)
		want   []string
	}{
		"api url":               {func(c *Config) { c.APIURL = "orchestrator:8080" }, []string{"apiUrl (chart value apiUrl; --api-url, OUTPOST_API_URL)", `"orchestrator:8080"`}},
		"plain http":            {func(c *Config) { c.APIURL = "http://orchestrator.example.com" }, []string{"apiUrl (chart value apiUrl", "tokens and signed requests unencrypted", "use https://", "insecureAllowHttp: true"}},
		"org":                   {func(c *Config) { c.OrgID = "Acme Inc" }, []string{"orgId (chart value orgId; --org-id", "Acme Inc"}},
		"executor":              {func(c *Config) { c.Executor = "docker" }, []string{"executor (--executor", `"docker"`}},
		"job image":             {func(c *Config) { c.Jobs.Image = "" }, []string{"jobs.image (chart value jobs.image.*; --job-image", "required"}},
		"agent image":           {func(c *Config) { c.Jobs.AgentImage = "" }, []string{"jobs.agentImage (chart value image.*; --agent-image, OUTPOST_AGENT_IMAGE)", "required"}},
		"leader ns":             {func(c *Config) { c.Namespace = "" }, []string{"namespace (--namespace", "--leader-elect=false"}},
		"process dir":           {func(c *Config) { c.Executor = ExecutorProcess; c.Process.WorkDir = "rel/dir" }, []string{"process.workDir (--work-dir", "absolute"}},
		"poll wait":             {func(c *Config) { c.PollWait.Duration = time.Minute }, []string{"pollWait (--poll-wait", "30s"}},
		"cli":                   {func(c *Config) { c.CLI = "terragrunt" }, []string{"cli (chart value cli; --cli", "terragrunt"}},
		"labels":                {func(c *Config) { c.Jobs.PodLabels = map[string]string{"outpost.dev/deployment-id": "x"} }, []string{"jobs.podLabels (chart value jobs.podLabels; --job-pod-labels", "set by the agent"}},
		"pull secret":           {func(c *Config) { c.Jobs.ImagePullSecrets = []string{"Bad_Name"} }, []string{"jobs.imagePullSecrets (chart value imagePullSecrets; --job-image-pull-secrets", "Bad_Name"}},
		"qps":                   {func(c *Config) { c.KubeClient.QPS = 0 }, []string{"kubeClient.qps (chart value kubeClient.qps; --kube-qps"}},
		"log level":             {func(c *Config) { c.LogLevel = "verbose" }, []string{"logLevel (chart value logLevel; --log-level", "verbose"}},
		"ca bundle":             {func(c *Config) { c.CABundleFile = "/does/not/exist.pem" }, []string{"caBundleFile (chart value caBundle.existingSecret or caBundle.pem; --ca-bundle-file", "/does/not/exist.pem"}},
		"startup":               {func(c *Config) { c.Jobs.StartupTimeout.Duration = 0 }, []string{"jobs.startupTimeout (chart value jobs.startupTimeout; --startup-timeout", "at least"}},
		"max concurrent":        {func(c *Config) { c.MaxConcurrency = -1 }, []string{"maxConcurrency (--max-concurrency"}},
		"log format":            {func(c *Config) { c.LogFormat = "logfmt" }, []string{"logFormat (chart value logFormat; --log-format", "logfmt"}},
		"provider installation": {func(c *Config) { c.Jobs.ProviderInstallation = "direct {}" }, []string{"jobs.providerInstallation (chart value jobs.providerInstallation", "provider_installation"}},
		"history":               {func(c *Config) { c.Jobs.History.Failed = -1 }, []string{"jobs.history.failed (chart value jobs.history; --job-history-failed", "out of range"}},
		"forward owned":         {func(c *Config) { c.Jobs.Options.ForwardEnv = map[string]string{"OUTPOST_API_URL": "x"} }, []string{"jobs.forwardEnv (chart value jobs.forwardEnv; --job-forward-env", "OUTPOST_API_URL"}},
		"forward proxy":         {func(c *Config) { c.Jobs.Options.ForwardEnv = map[string]string{"https_proxy": ""} }, []string{"jobs.forwardEnv", "proxy.*"}},
		"forward name":          {func(c *Config) { c.Jobs.Options.ForwardEnv = map[string]string{"A=B": ""} }, []string{"jobs.forwardEnv", "A=B"}},
		"pod template":          {func(c *Config) { c.Jobs.PinnedTemplate = `{"spec": 5}` }, []string{"jobs.podTemplate (chart value jobs.podTemplate)"}},
		"policy":                {func(c *Config) { c.Jobs.Policy.PodSecurityLevel = "lax" }, []string{"jobs.policy (chart value jobs.policy)", "lax"}},
		"resources": {func(c *Config) {
			c.Jobs.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}
		}, []string{"jobs.resources (chart value jobs.resources)", "above limits.memory"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := valid()
			tc.mutate(c)
			err := c.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestPlainHTTPOnlyToLoopbackOrByName: http:// is fine to this machine, and elsewhere only with
// --insecure-allow-http, which the environment can set too.
func TestPlainHTTPOnlyToLoopbackOrByName(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:8700", "http://localhost:8700", "http://[::1]:8700", "https://o.example"} {
		c := valid()
		c.APIURL = u
		if err := c.Validate(); err != nil {
			t.Errorf("%s refused: %v", u, err)
		}
	}
	c, err := Parse([]string{"--api-url", "http://orchestrator.example.com", "--org-id", "acme", "--runner-id", "r1", "--job-image", "img", "--agent-image", "agent-img",
		"--namespace", "outpost-system", "--pod-name", "agent-0"}, env(map[string]string{"OUTPOST_INSECURE_ALLOW_HTTP": "true"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.InsecureAllowHTTP || c.Validate() != nil {
		t.Fatalf("OUTPOST_INSECURE_ALLOW_HTTP=true: opt-in %v, validation %v", c.InsecureAllowHTTP, c.Validate())
	}
}

func TestStateEncryptionKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	raw := bytes.Repeat([]byte{7}, 32)
	for name, file := range map[string]string{
		"raw":    write("raw", raw),
		"base64": write("b64", []byte(base64.StdEncoding.EncodeToString(raw)+"\n")),
	} {
		c := &Config{State: State{EncryptionKeyFile: file}}
		key, err := c.LoadStateEncryptionKey()
		if err != nil || !bytes.Equal(key, raw) {
			t.Errorf("%s: key %x, %v", name, key, err)
		}
	}
	c := &Config{State: State{EncryptionKeyFile: write("short", []byte("too short"))}}
	if _, err := c.LoadStateEncryptionKey(); err == nil || !strings.Contains(err.Error(), "openssl rand -base64 32") {
		t.Errorf("short key: %v", err)
	}
	if key, err := (&Config{}).LoadStateEncryptionKey(); key != nil || err != nil {
		t.Errorf("no key file must mean no encryption: %x, %v", key, err)
	}
}
