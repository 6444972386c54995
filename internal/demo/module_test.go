package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// TestInstallerModule applies modules/kubernetes-agent-runner for real, the way a user's root
// module calls it, with the real CLI and the locally built provider: against the test bed and the
// reference orchestrator. It checks what was registered and installed, that a second apply
// changes nothing, and that destroy deregisters the runner.
func TestInstallerModule(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("set TF_ACC=1 to apply the installer module (make test does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var out bytes.Buffer
	c := Config{Repo: repoRoot(t), Dir: t.TempDir(), CLI: "terraform",
		OrchestratorAddr: freeAddr(t), StateAddr: freeAddr(t), HealthAddr: freeAddr(t), Out: &out}
	c.Defaults()
	t.Cleanup(func() { _ = Down(context.Background(), c) })
	s := &stepper{out: &out, of: 3}
	cli, err := c.cliPath()
	if err != nil {
		t.Fatal(err)
	}
	if err := buildBinaries(ctx, &c, s); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := startTestbed(ctx, &c, s)
	if err != nil {
		t.Fatal(err)
	}
	token, err := startOrchestrator(ctx, &c, s)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := writeCLIConfig(&c)
	if err != nil {
		t.Fatal(err)
	}
	apiURL := "http://" + c.OrchestratorAddr
	admin, err := client.NewAdminClient(apiURL, c.Org, token)
	if err != nil {
		t.Fatal(err)
	}

	work := t.TempDir()
	root := fmt.Sprintf(`
module "runner" {
  source = %q

  runner_id           = "module-runner"
  agent_namespace     = "mod-system"
  job_namespace       = "mod-jobs"
  state_namespace     = "mod-state"
  max_concurrency     = 3
  job_timeout         = "45m"
  wait_for_connection = false
  pod_template = {
    spec = { containers = [{ name = "main", resources = { requests = { cpu = "250m" } } }] }
  }
}

output "fingerprint" {
  value = module.runner.key_fingerprint
}
`, filepath.Join(c.Repo, "modules", "kubernetes-agent-runner"))
	if err := os.WriteFile(filepath.Join(work, "main.tf"), []byte(root), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, cli, args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1",
			"OUTPOST_API_URL="+apiURL, "OUTPOST_ORG_ID="+c.Org, "OUTPOST_TOKEN="+token, "KUBE_CONFIG_PATH="+kubeconfig)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", c.CLI, strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	// `get` installs the module; with dev overrides there is no provider to install.
	run("get", "-no-color")
	run("apply", "-auto-approve", "-input=false", "-no-color")

	r, err := admin.GetRunner(ctx, "module-runner")
	if err != nil {
		t.Fatalf("runner not registered: %v", err)
	}
	if r.MaxConcurrency != 3 || r.JobTimeoutSeconds != 45*60 || r.Job.Namespace != "mod-jobs" || r.StateStorageID != "module-runner-states" || len(r.PublicKeys) != 1 {
		t.Fatalf("runner registered as %+v", r)
	}
	if !strings.Contains(r.Job.PodTemplate, `"cpu":"250m"`) {
		t.Errorf("pod template %s lacks the module's input", r.Job.PodTemplate)
	}
	kc, err := kubeClient(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := kc.CoreV1().Secrets("mod-system").Get(ctx, "module-runner-key", metav1.GetOptions{})
	if err != nil || len(sec.Data[privateKeyDataKey]) == 0 {
		t.Fatalf("key Secret: %v", err)
	}
	if _, err := kc.AppsV1().Deployments("mod-system").Get(ctx, "outpost-agent", metav1.GetOptions{}); err != nil {
		t.Fatalf("agent Deployment not installed: %v", err)
	}
	state, err := os.ReadFile(filepath.Join(work, "terraform.tfstate"))
	if err != nil || strings.Contains(string(state), "PRIVATE KEY") {
		t.Fatalf("state must exist and hold no private key (read error: %v)", err)
	}

	if plan := run("plan", "-input=false", "-no-color", "-detailed-exitcode"); !strings.Contains(plan, "No changes.") {
		t.Errorf("second plan is not empty:\n%s", plan)
	}
	run("destroy", "-auto-approve", "-input=false", "-no-color")
	if _, err := admin.GetRunner(ctx, "module-runner"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("runner still registered after destroy: %v", err)
	}
}
