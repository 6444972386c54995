package config

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParsePrecedenceFlagEnvFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(file, []byte("api-url: https://file.example\norg-id: fileorg\nrunner-id: filerunner\nkube-qps: 7\nleader-elect: false\njob-image-pull-secrets: [a, b]\njob-pod-labels: {team: infra}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]string{"--config", file, "--runner-id", "flagrunner"}, env(map[string]string{
		"OUTPOST_ORG_ID": "envorg", "OUTPOST_RUNNER_ID": "envrunner", "OUTPOST_STARTUP_TIMEOUT": "45s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.APIURL != "https://file.example" || c.OrgID != "envorg" || c.RunnerID != "flagrunner" {
		t.Errorf("precedence wrong: api %q org %q runner %q", c.APIURL, c.OrgID, c.RunnerID)
	}
	if c.KubeQPS != 7 || c.LeaderElect || c.StartupTimeout != 45*time.Second || c.KubeBurst != 100 || c.CancelGrace != 120*time.Second {
		t.Errorf("values: qps %v leader %v startup %v burst %d grace %v", c.KubeQPS, c.LeaderElect, c.StartupTimeout, c.KubeBurst, c.CancelGrace)
	}
	if strings.Join(c.JobImagePullSecrets, ",") != "a,b" || c.JobPodLabels["team"] != "infra" {
		t.Errorf("pull secrets %v labels %v", c.JobImagePullSecrets, c.JobPodLabels)
	}
}

func TestParseJobResourcesAndForwardEnv(t *testing.T) {
	c, err := Parse(nil, env(map[string]string{"OUTPOST_JOB_FORWARD_ENV": "AWS_REGION, TF_LOG,", "AWS_REGION": "eu-west-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.JobResources.Limits[corev1.ResourceMemory]; got.String() != "2Gi" {
		t.Errorf("default memory limit %s, want 2Gi (DefaultJobResources)", got.String())
	}
	if len(c.JobForwardEnv) != 2 || c.JobForwardEnv["AWS_REGION"] != "eu-west-1" || c.JobForwardEnv["TF_LOG"] != "" {
		t.Errorf("forwarded env %v", c.JobForwardEnv)
	}
	c, err = Parse([]string{"--job-plugin-cache", `{"persistentVolumeClaim":{"claimName":"tf-plugins"}}`}, env(nil))
	if err != nil || c.JobPluginCache == nil || c.JobPluginCache.PersistentVolumeClaim.ClaimName != "tf-plugins" {
		t.Errorf("--job-plugin-cache: %+v, %v", c.JobPluginCache, err)
	}
	if _, err := Parse([]string{"--job-plugin-cache", `{"persistentVolume":{}}`}, env(nil)); err == nil || !strings.Contains(err.Error(), "VolumeSource") {
		t.Errorf("an unknown volume type must be refused naming the flag: %v", err)
	}
	c, err = Parse([]string{"--job-resources", "{}"}, env(nil))
	if err != nil || len(c.JobResources.Requests)+len(c.JobResources.Limits) != 0 {
		t.Errorf("--job-resources {} must mean none: %+v, %v", c.JobResources, err)
	}
	if _, err := Parse([]string{"--job-resources", `{"requests":{"memory":"lots"}}`}, env(nil)); err == nil || !strings.Contains(err.Error(), "--job-resources") {
		t.Errorf("a bad quantity must be refused naming the flag: %v", err)
	}
}

func TestParseEnvLists(t *testing.T) {
	c, err := Parse(nil, env(map[string]string{"OUTPOST_JOB_IMAGE_PULL_SECRETS": " one, two ,", "OUTPOST_JOB_POD_LABELS": `{"a":"b"}`}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.JobImagePullSecrets, ",") != "one,two" || c.JobPodLabels["a"] != "b" {
		t.Errorf("pull secrets %v labels %v", c.JobImagePullSecrets, c.JobPodLabels)
	}
	if _, err := Parse(nil, env(map[string]string{"OUTPOST_JOB_POD_LABELS": `team=infra`})); err == nil || !strings.Contains(err.Error(), "OUTPOST_JOB_POD_LABELS") {
		t.Errorf("bad labels: err = %v", err)
	}
	if _, err := Parse(nil, env(map[string]string{"OUTPOST_KUBE_QPS": "fast"})); err == nil || !strings.Contains(err.Error(), "OUTPOST_KUBE_QPS") {
		t.Errorf("bad qps: err = %v", err)
	}
}

// The proxy variables of the agent's environment are kept for the job pods, upper case first.
func TestParseProxyEnv(t *testing.T) {
	c, err := Parse(nil, env(map[string]string{"HTTPS_PROXY": "http://proxy:3128", "https_proxy": "http://other:1",
		"http_proxy": "http://lower:8080", "NO_PROXY": ".svc,10.0.0.0/8"}))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"HTTPS_PROXY": "http://proxy:3128", "HTTP_PROXY": "http://lower:8080", "NO_PROXY": ".svc,10.0.0.0/8"}
	if len(c.JobProxyEnv) != len(want) {
		t.Errorf("proxy env %v, want %v", c.JobProxyEnv, want)
	}
	for k, v := range want {
		if c.JobProxyEnv[k] != v {
			t.Errorf("%s = %q, want %q", k, c.JobProxyEnv[k], v)
		}
	}
	if c.CLI != "" {
		t.Errorf("default cli %q, want empty (the job runner finds tofu or terraform)", c.CLI)
	}
}

func valid() *Config {
	c, _ := Parse([]string{"--api-url", "https://o.example", "--org-id", "acme", "--runner-id", "r1", "--job-image", "img",
		"--agent-image", "agent-img", "--namespace", "outpost-system", "--pod-name", "agent-0"}, env(nil))
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
		"api url":               {func(c *Config) { c.APIURL = "orchestrator:8080" }, []string{"--api-url (OUTPOST_API_URL)", `"orchestrator:8080"`}},
		"plain http":            {func(c *Config) { c.APIURL = "http://orchestrator.example.com" }, []string{"--api-url (OUTPOST_API_URL)", "tokens and signed requests unencrypted", "use https://", "--insecure-allow-http"}},
		"org":                   {func(c *Config) { c.OrgID = "Acme Inc" }, []string{"--org-id", "Acme Inc"}},
		"executor":              {func(c *Config) { c.Executor = "docker" }, []string{"--executor", `"docker"`}},
		"job image":             {func(c *Config) { c.JobImage = "" }, []string{"--job-image", "required"}},
		"agent image":           {func(c *Config) { c.AgentImage = "" }, []string{"--agent-image (OUTPOST_AGENT_IMAGE)", "required"}},
		"leader ns":             {func(c *Config) { c.Namespace = "" }, []string{"--namespace", "--leader-elect=false"}},
		"process dir":           {func(c *Config) { c.Executor = ExecutorProcess; c.WorkDir = "rel/dir" }, []string{"--work-dir", "absolute"}},
		"poll wait":             {func(c *Config) { c.PollWait = time.Minute }, []string{"--poll-wait", "30s"}},
		"cli":                   {func(c *Config) { c.CLI = "terragrunt" }, []string{"--cli", "terragrunt"}},
		"labels":                {func(c *Config) { c.JobPodLabels = map[string]string{"outpost.dev/deployment-id": "x"} }, []string{"--job-pod-labels", "set by the agent"}},
		"pull secret":           {func(c *Config) { c.JobImagePullSecrets = []string{"Bad_Name"} }, []string{"--job-image-pull-secrets", "Bad_Name"}},
		"qps":                   {func(c *Config) { c.KubeQPS = 0 }, []string{"--kube-qps"}},
		"log level":             {func(c *Config) { c.LogLevel = "verbose" }, []string{"--log-level", "verbose"}},
		"ca bundle":             {func(c *Config) { c.CABundleFile = "/does/not/exist.pem" }, []string{"--ca-bundle-file", "/does/not/exist.pem"}},
		"startup":               {func(c *Config) { c.StartupTimeout = 0 }, []string{"--startup-timeout", "at least"}},
		"max concurrent":        {func(c *Config) { c.MaxConcurrency = -1 }, []string{"--max-concurrency"}},
		"log format":            {func(c *Config) { c.LogFormat = "logfmt" }, []string{"--log-format", "logfmt"}},
		"provider installation": {func(c *Config) { c.JobProviderInstallation = "direct {}" }, []string{"--job-provider-installation", "provider_installation"}},
		"history":               {func(c *Config) { c.JobHistoryFailed = -1 }, []string{"--job-history-failed", "out of range"}},
		"forward owned":         {func(c *Config) { c.JobForwardEnv = map[string]string{"OUTPOST_API_URL": "x"} }, []string{"--job-forward-env", "OUTPOST_API_URL"}},
		"forward proxy":         {func(c *Config) { c.JobForwardEnv = map[string]string{"https_proxy": ""} }, []string{"--job-forward-env", "proxy.*"}},
		"forward name":          {func(c *Config) { c.JobForwardEnv = map[string]string{"A=B": ""} }, []string{"--job-forward-env", "A=B"}},
		"resources": {func(c *Config) {
			c.JobResources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}
		}, []string{"--job-resources", "above limits.memory"}},
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
		"--namespace", "outpost-system", "--pod-name", "agent-0"}, env(map[string]string{"OUTPOST_INSECURE_ALLOW_HTTP": "true"}))
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
		c := &Config{StateEncryptionKeyFile: file}
		key, err := c.LoadStateEncryptionKey()
		if err != nil || !bytes.Equal(key, raw) {
			t.Errorf("%s: key %x, %v", name, key, err)
		}
	}
	c := &Config{StateEncryptionKeyFile: write("short", []byte("too short"))}
	if _, err := c.LoadStateEncryptionKey(); err == nil || !strings.Contains(err.Error(), "openssl rand -base64 32") {
		t.Errorf("short key: %v", err)
	}
	if key, err := (&Config{}).LoadStateEncryptionKey(); key != nil || err != nil {
		t.Errorf("no key file must mean no encryption: %x, %v", key, err)
	}
}
