package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
)

// moduleEnv is what the module tests apply against: the test bed, the reference orchestrator and
// the locally built provider, driven by one CLI the way a user's root module is.
type moduleEnv struct {
	t                        *testing.T
	ctx                      context.Context
	c                        Config
	cli, rc, kubeconfig, url string
	token                    string
	admin                    *client.AdminClient
	kube                     kubernetes.Interface
}

// moduleCLIs are the CLIs the module tests run with: terraform, and tofu when OUTPOST_TOFU names
// it (make test sets it).
func moduleCLIs(t *testing.T) []string {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("set TF_ACC=1 to apply the installer module (make test does)")
	}
	clis := []string{"terraform"}
	if os.Getenv("OUTPOST_TOFU") != "" {
		clis = append(clis, "tofu")
	} else {
		t.Log("OUTPOST_TOFU is not set: the OpenTofu run is skipped")
	}
	return clis
}

func startModuleEnv(t *testing.T, cli string) *moduleEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	var out bytes.Buffer
	c := Config{Repo: repoRoot(t), Dir: t.TempDir(), CLI: cli, TofuPath: os.Getenv("OUTPOST_TOFU"), Org: "acme",
		OrchestratorAddr: porttest.Addr(t), StateAddr: porttest.Addr(t), HealthAddr: porttest.Addr(t), Out: &out,
		// The module's agent pods need not run: its tests check what is installed and registered.
		Executor: ExecutorProcess}
	c.Defaults()
	t.Cleanup(func() { _ = Down(context.Background(), c) })
	s := &stepper{out: &out, of: 3}
	bin, err := c.cliPath()
	if err != nil {
		t.Fatal(err)
	}
	if err := buildBinaries(ctx, &c, s); err != nil {
		t.Fatal(err)
	}
	tc, err := startTestbed(ctx, &c, s)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := tc.Kubeconfig
	token, err := startOrchestrator(ctx, &c, s, c.OrchestratorAddr)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := writeCLIConfig(&c)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + c.OrchestratorAddr
	admin, err := client.NewAdminClient(url, c.Org, token)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubeClient(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return &moduleEnv{t: t, ctx: ctx, c: c, cli: bin, rc: rc, kubeconfig: kubeconfig, url: url, token: token, admin: admin, kube: kc}
}

// workDir makes a root module directory holding files, with MODULE_SOURCE in them replaced by the
// installer module's path relative to it (a local path, as a checkout of this repository uses),
// and HUMANITEC_MODULE_SOURCE by the Humanitec-compatible module's.
func (e *moduleEnv) workDir(files map[string]string) string {
	e.t.Helper()
	dir := e.t.TempDir()
	rel := func(module string) string {
		r, err := filepath.Rel(dir, filepath.Join(e.c.Repo, "modules", module))
		if err != nil {
			e.t.Fatal(err)
		}
		return r
	}
	sources := strings.NewReplacer("HUMANITEC_MODULE_SOURCE", rel("kubernetes-agent-orchestrator-runner"), "MODULE_SOURCE", rel("kubernetes-agent-runner"))
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(sources.Replace(body)), 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
	return dir
}

// run runs the CLI in dir with the orchestrator's and the cluster's settings in the environment,
// failing the test if it fails.
func (e *moduleEnv) run(dir string, args ...string) string {
	e.t.Helper()
	out, err := e.try(dir, args...)
	if err != nil {
		e.t.Fatalf("%s %s: %v\n%s", e.c.CLI, strings.Join(args, " "), err, out)
	}
	return out
}

// try is run, returning the error.
func (e *moduleEnv) try(dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(e.ctx, e.cli, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+e.rc, "TF_IN_AUTOMATION=1",
		"OUTPOST_API_URL="+e.url, "OUTPOST_ORG_ID="+e.c.Org, "OUTPOST_TOKEN="+e.token, "KUBE_CONFIG_PATH="+e.kubeconfig)
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// applyPlanEmptyDestroy applies dir, runs check, plans again (it must be empty), destroys, and
// checks that the runner is gone from the orchestrator.
func (e *moduleEnv) applyPlanEmptyDestroy(dir, runnerID string, check func()) {
	e.t.Helper()
	// `get` installs the module; with dev overrides there is no provider to install.
	e.run(dir, "get", "-no-color")
	e.run(dir, "apply", "-auto-approve", "-input=false", "-no-color")
	check()
	state, err := os.ReadFile(filepath.Join(dir, "terraform.tfstate"))
	if err != nil || strings.Contains(string(state), "PRIVATE KEY") {
		e.t.Fatalf("state must exist and hold no private key (read error: %v)", err)
	}
	if plan := e.run(dir, "plan", "-input=false", "-no-color", "-detailed-exitcode"); !strings.Contains(plan, "No changes.") {
		e.t.Errorf("second plan is not empty:\n%s", plan)
	}
	e.run(dir, "destroy", "-auto-approve", "-input=false", "-no-color")
	if _, err := e.admin.GetRunner(e.ctx, runnerID); !errors.Is(err, api.ErrNotFound) {
		e.t.Errorf("runner still registered after destroy: %v", err)
	}
}

// deploymentJSON returns the agent Deployment of namespace ns as JSON.
func (e *moduleEnv) deploymentJSON(ns string) string {
	e.t.Helper()
	d, err := e.kube.AppsV1().Deployments(ns).Get(e.ctx, "outpost-agent", metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("agent Deployment not installed: %v", err)
	}
	b, err := json.Marshal(d)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

// agentSettings reads the agent's configuration file from the ConfigMap the chart installed in ns.
func (e *moduleEnv) agentSettings(ns string) map[string]any {
	e.t.Helper()
	cm, err := e.kube.CoreV1().ConfigMaps(ns).Get(e.ctx, "outpost-agent-config", metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("agent ConfigMap not installed: %v", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["agent.yaml"]), &m); err != nil {
		e.t.Fatalf("agent.yaml of ConfigMap %s/%s: %v", ns, cm.Name, err)
	}
	return m
}

// setting is the value of a dotted key of the agent's settings as JSON; "" when there is none.
func setting(settings map[string]any, key string) string {
	var v any = settings
	for _, k := range strings.Split(key, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[k]
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestInstallerModule applies modules/kubernetes-agent-runner for real, the way a user's root
// module calls it, with Terraform and OpenTofu and the locally built provider: against the test
// bed and the reference orchestrator. It checks what was registered and installed, that a second
// plan is empty, and that destroy deregisters the runner; then the same for the worked example of
// the Humanitec migration guide (guide_test.go).
func TestInstallerModule(t *testing.T) {
	for _, cli := range moduleCLIs(t) {
		t.Run(cli, func(t *testing.T) {
			e := startModuleEnv(t, cli)
			t.Run("inputs", func(t *testing.T) { e.t = t; testModuleInputs(e) })
			t.Run("humanitec-guide", func(t *testing.T) { e.t = t; testHumanitecGuide(e) })
			t.Run("humanitec-module", func(t *testing.T) { e.t = t; testHumanitecModule(e) })
		})
	}
}

// testModuleInputs sets the module's inputs, the pod template as an object (the guide's example
// gives it as the string jsonencode() makes).
func testModuleInputs(e *moduleEnv) {
	t := e.t
	ca := testCAPEM(t)
	dir := e.workDir(map[string]string{"main.tf": strings.Replace(`
module "runner" {
  source = "MODULE_SOURCE"

  runner_id                  = "module-runner"
  org_id                     = "acme"
  agent_namespace            = "mod-system"
  agent_service_account_name = "mod-agent"
  job_namespace              = "mod-jobs"
  state_namespace            = "mod-state"
  max_concurrency            = 3
  job_timeout                = "45m"
  wait_for_connection        = false
  pod_template = {
    spec = { containers = [{ name = "main", resources = { requests = { cpu = "250m" } } }] }
  }
  agent_image  = { registry = "mirror.example.com", tag = "1.2.3" }
  job_image    = { repository = "mirror.example.com/outpost/job", tag = "1.2.3" }
  image_registry         = "mirror.example.com"
  image_pull_secret_name = "mirror-login"
  image_pull_secret_docker_config_json = jsonencode({ auths = { "mirror.example.com" = { auth = base64encode("robot:secret") } } })
  agent_values = yamlencode({ serviceAccount = { annotations = { "example.com/owner" = "platform" } } })
  network_policy = {
    metrics_from = [{ namespaceSelector = { matchLabels = { "kubernetes.io/metadata.name" = "monitoring" } } }]
  }

  # The job and network settings, and one shape for tolerations, env and resources.
  proxy       = { https = "http://proxy.corp:3128", no_proxy = [".corp"] }
  ca_bundle   = { pem = <<EOT
CA_PEMEOT
  }
  job_history = { succeeded = 0, failed = 5 }
  plugin_cache = { volume = { nfs = { server = "nfs.corp", path = "/tf-plugins" } } }
  provider_installation = {
    filesystem_mirror = { path = "/plugins" }
    direct            = { exclude = ["registry.terraform.io/corp/*"] }
  }
  forward_env       = ["AWS_REGION"]
  agent_extra_env   = [{ name = "AWS_REGION", value = "eu-west-1" }, { name = "API_TOKEN", secret_key_ref = { name = "agent-secrets", key = "token" } }]
  agent_tolerations = [{ key = "dedicated", operator = "Equal", value = "outpost", effect = "NoSchedule" }]
  agent_resources   = { limits = { memory = "300Mi" } }
  job_resources     = { requests = { memory = "1Gi" } }
  job_tolerations   = [{ key = "dedicated", operator = "Equal", value = "outpost", effect = "NoSchedule" }]
  job_env           = [{ name = "TF_LOG", value = "INFO" }]
  job_node_selector = { "kubernetes.io/os" = "linux" }
}

output "fingerprint" {
  value = module.runner.key_fingerprint
}
`, "CA_PEM", ca, 1)})
	e.applyPlanEmptyDestroy(dir, "module-runner", func() {
		r, err := e.admin.GetRunner(e.ctx, "module-runner")
		if err != nil {
			t.Fatalf("runner not registered: %v", err)
		}
		if r.MaxConcurrency != 3 || r.JobTimeoutSeconds != 45*60 || r.Job.Namespace != "mod-jobs" || r.StateStorageID != "module-runner-states" || len(r.PublicKeys) != 1 {
			t.Fatalf("runner registered as %+v", r)
		}
		if r.Job.PodTemplate != `{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"250m"}}}]}}` {
			t.Errorf("pod template %s is not the module's input", r.Job.PodTemplate)
		}
		sec, err := e.kube.CoreV1().Secrets("mod-system").Get(e.ctx, "module-runner-key", metav1.GetOptions{})
		if err != nil || len(sec.Data[privateKeyDataKey]) == 0 {
			t.Fatalf("key Secret: %v", err)
		}
		sa, err := e.kube.CoreV1().ServiceAccounts("mod-system").Get(e.ctx, "mod-agent", metav1.GetOptions{})
		if err != nil || sa.Annotations["example.com/owner"] != "platform" {
			t.Errorf("agent service account mod-agent (with agent_values' annotation merged): %v %v", sa, err)
		}
		// network_policy reaches the chart: the agent's metrics port is open to monitoring only.
		np, err := e.kube.NetworkingV1().NetworkPolicies("mod-system").Get(e.ctx, "outpost-agent", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the agent's ingress NetworkPolicy: %v", err)
		}
		if in := np.Spec.Ingress; len(in) != 2 || len(in[1].From) != 1 || in[1].From[0].NamespaceSelector == nil ||
			in[1].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" || in[1].Ports[0].Port.IntValue() != 9090 {
			t.Errorf("agent NetworkPolicy ingress %+v, want the state rule and metrics from monitoring", in)
		}
		if r.Job.Pod == nil || r.Job.Pod.Resources == nil || r.Job.Pod.Resources.Requests["memory"] != "1Gi" || len(r.Job.Pod.Tolerations) != 1 ||
			len(r.Job.Pod.Env) != 1 || r.Job.Pod.Env[0].Name != "TF_LOG" || r.Job.Pod.NodeSelector["kubernetes.io/os"] != "linux" {
			t.Errorf("runner job pod settings %+v, want job_resources, job_tolerations, job_env and job_node_selector", r.Job.Pod)
		}
		for _, ns := range []string{"mod-system", "mod-jobs"} {
			if sec, err := e.kube.CoreV1().Secrets(ns).Get(e.ctx, "outpost-agent-ca-bundle", metav1.GetOptions{}); err != nil || string(sec.Data["ca.crt"]) != ca {
				t.Errorf("ca_bundle.pem did not reach Secret %s/outpost-agent-ca-bundle: %v", ns, err)
			}
		}
		// The pull Secret is in both namespaces, and the agent pods (and through the agent, the
		// job pods) pull with it.
		for _, ns := range []string{"mod-system", "mod-jobs"} {
			s, err := e.kube.CoreV1().Secrets(ns).Get(e.ctx, "mirror-login", metav1.GetOptions{})
			if err != nil || !strings.Contains(string(s.Data[".dockerconfigjson"]), "cm9ib3Q6c2VjcmV0") {
				t.Errorf("image pull Secret %s/mirror-login: %v", ns, err)
			}
		}
		settings := e.agentSettings("mod-system")
		for key, want := range map[string]string{"jobs.imagePullSecrets": `["mirror-login"]`, "jobs.image": `"mirror.example.com/outpost/job:1.2.3"`,
			"orgId": `"acme"`, "jobs.caSecret": `"outpost-agent-ca-bundle"`, "jobs.history": `{"failed":5,"succeeded":0}`,
			"jobs.pluginCache": `{"nfs":{"path":"/tf-plugins","server":"nfs.corp"}}`, "jobs.forwardEnv": `["AWS_REGION"]`} {
			if got := setting(settings, key); got != want {
				t.Errorf("agent setting %s = %s, want %s", key, got, want)
			}
		}
		if got := setting(settings, "jobs.providerInstallation"); !strings.HasPrefix(got, `"provider_installation {\n  filesystem_mirror {\n    path = \"/plugins\"`) {
			t.Errorf("agent setting jobs.providerInstallation = %s", got)
		}
		d := e.deploymentJSON("mod-system")
		for _, want := range []string{`"imagePullSecrets":[{"name":"mirror-login"}]`,
			`"serviceAccountName":"mod-agent"`, `"image":"mirror.example.com/outpost-dev/outpost-agent:1.2.3"`,
			`"name":"HTTPS_PROXY","value":"http://proxy.corp:3128"`, `"name":"NO_PROXY","value":".corp,`,
			`"name":"AWS_REGION","value":"eu-west-1"`,
			`"name":"API_TOKEN","valueFrom":{"secretKeyRef":{"name":"agent-secrets","key":"token"}}`,
			`"tolerations":[{"key":"dedicated","operator":"Equal","value":"outpost","effect":"NoSchedule"}]`,
			`"limits":{"memory":"300Mi"}`} {
			if !strings.Contains(d, want) {
				t.Errorf("agent Deployment lacks %s:\n%s", want, d)
			}
		}
	})

	// A private key given as the public one, a wrong organisation, half a key pair and a template
	// that is no JSON object fail at plan time, each with a message that says what to do.
	pub, priv := testKeyPair(t)
	for _, bad := range []struct{ inputs, want string }{
		{fmt.Sprintf("public_key = %q\n  private_key_secret = { name = \"k\" }", priv), "public_key holds a PRIVATE key"},
		{`org_id = "other"`, `org_id is "other", but the outpost provider registers the runner in organisation "acme"`},
		{fmt.Sprintf("public_key = %q", pub), "public_key and private_key_secret go together"},
		{`pod_template = "{not json"`, "pod_template must be an object, or a string holding a JSON object"},
	} {
		dir := e.workDir(map[string]string{"main.tf": `
module "runner" {
  source    = "MODULE_SOURCE"
  runner_id = "bad-inputs"
  ` + bad.inputs + `
}
`})
		e.run(dir, "get", "-no-color")
		out, err := e.try(dir, "plan", "-input=false", "-no-color")
		if err == nil || !strings.Contains(strings.Join(strings.Fields(out), " "), bad.want) {
			t.Errorf("plan with %s: error %v, want one saying %q:\n%s", bad.inputs, err, bad.want, out)
		}
	}
	if _, err := e.admin.GetRunner(e.ctx, "bad-inputs"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("a failed plan registered a runner: %v", err)
	}
}
