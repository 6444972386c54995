package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// slowConfig needs no provider download: terraform_data and local-exec are built in.
const slowConfig = `
variable "name" { type = string }
variable "sleep" { type = number }
resource "terraform_data" "slow" {
  input = var.name
  provisioner "local-exec" { command = "sleep ${var.sleep}" }
}
output "name" { value = terraform_data.slow.output }
`

// TestProcessExecutorTerraformSurvivesAgentKill runs a real `terraform apply` through the
// process executor, with state in the agent's Kubernetes state backend, and SIGKILLs the agent
// while terraform runs. The job process survives, the restarted agent re-adopts it (and its
// token, so the state write is authorised), and the deployment gets exactly one finished event.
func TestProcessExecutorTerraformSurvivesAgentKill(t *testing.T) {
	t.Parallel()
	tf := "/usr/local/bin/terraform"
	if _, err := os.Stat(tf); err != nil {
		t.Fatalf("terraform CLI not found at %s (the machines have Terraform 1.11 there): %v", tf, err)
	}
	e := newEnv(t, "", 5)
	stateAddr, healthAddr, workDir := porttest.Addr(t), porttest.Addr(t), t.TempDir()
	flags := []string{"--executor", "process", "--leader-elect=false", "--work-dir", workDir, "--agent-binary", agentBinary(t),
		"--cli", tf, "--state-listen", stateAddr, "--state-url", "http://" + stateAddr, "--health-listen", healthAddr}
	a := e.startAgent("agent-0", flags...)
	vars := map[string]json.RawMessage{"name": json.RawMessage(`"first"`), "sleep": json.RawMessage(`8`)}
	d, err := e.admin.CreateDeployment(t.Context(), api.DeploymentInput{RunnerID: e.runnerID, Operation: api.OperationApply,
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": slowConfig})}}, StateKey: "apps/slow", Variables: vars})
	if err != nil {
		t.Fatal(err)
	}
	testbed.WaitFor(t, 60*time.Second, "terraform to run", func() (bool, string) {
		got, err := e.admin.GetLogs(context.Background(), d.ID, 0, 1<<20)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(string(got.Data), "terraform_data.slow: Creating"), string(got.Data)
	})
	checkHealth(t, healthAddr)
	a.kill()
	t.Log("agent killed while terraform applies")
	e.startAgent("agent-0", flags...)

	got := e.waitTerminal([]string{d.ID}, 2*time.Minute)[d.ID]
	if got.Status != api.StatusSucceeded || got.ExitCode == nil || *got.ExitCode != 0 {
		logs, _ := e.admin.GetLogs(context.Background(), d.ID, 0, 1<<20)
		t.Fatalf("deployment %s (%s, exit %v): %s\nlog:\n%s", got.Status, got.Reason, got.ExitCode, got.Message, logs.Data)
	}
	if n, evs := e.finishedEvents(d.ID); n != 1 {
		t.Errorf("%d finished events: %+v", n, evs)
	}
	outs, err := e.admin.GetOutputs(context.Background(), d.ID)
	if err != nil || string(outs["name"].Value) != `"first"` {
		t.Errorf("outputs %v, %v", outs, err)
	}
	state, _, err := mustStore(statestore.New(e.cluster.Client(), e.ns, statestore.Options{Scope: testOrg})).Read(context.Background(), "apps/slow")
	if err != nil || !strings.Contains(string(state), `"first"`) {
		t.Errorf("state in the cluster: %v\n%s", err, state)
	}
	testbed.WaitFor(t, 30*time.Second, "the attempt's folder removed after its finished event", func() (bool, string) {
		ents, _ := os.ReadDir(workDir)
		return len(ents) == 0, ""
	})
}

// checkHealth reads the agent's health endpoints while it leads and runs a job.
func checkHealth(t *testing.T, addr string) {
	t.Helper()
	get := func(path string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("/readyz %d: %s", code, body)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{`outpost_agent_claims_total{result="claimed"} 1`, `outpost_agent_orchestrator_requests_total{code="200",endpoint="poll"}`,
		`outpost_agent_jobs_running 1`, `outpost_agent_leader 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestAgentWithoutStateBackendRefusesKubernetesState runs the agent as a user would without a
// cluster (process executor, no --kubeconfig): it serves no state backend, so a deployment whose
// state storage is kubernetes fails at once, reason no_state_backend, with a message naming the
// flag that fixes it. Before, the job ran and `terraform init` retried the unreachable backend
// for about five minutes.
func TestAgentWithoutStateBackendRefusesKubernetesState(t *testing.T) {
	t.Parallel()
	orch := orchestratortest.Start(t)
	admin, priv := orch.RegisterRunner(t.Context(), t)
	privPEM, err := keys.EncodePrivatePEM(priv)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "private-key.pem")
	if err := os.WriteFile(keyFile, []byte(privPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	stateAddr := porttest.Addr(t)
	var logs clienttest.Buffer
	cmd := exec.CommandContext(t.Context(), agentBinary(t), "--api-url", orch.URL, "--org-id", testOrg, "--runner-id", "r1",
		"--private-key-file", keyFile, "--executor", "process", "--leader-elect=false", "--work-dir", t.TempDir(),
		"--agent-binary", agentBinary(t), "--cli", "/usr/local/bin/terraform", "--state-listen", stateAddr,
		"--state-url", "http://"+stateAddr, "--health-listen", "127.0.0.1:0", "--poll-wait", "5s")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})
	d, err := admin.CreateDeployment(t.Context(), api.DeploymentInput{RunnerID: "r1", Operation: api.OperationApply,
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": `resource "terraform_data" "x" {}`})}}, StateKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	var got *api.Deployment
	testbed.WaitFor(t, 60*time.Second, "the deployment to end", func() (bool, string) {
		got, err = admin.GetDeployment(t.Context(), d.ID)
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Terminal(), string(got.Status)
	})
	if got.Status != api.StatusFailed || got.Reason != "no_state_backend" || !strings.Contains(got.Message, "--kubeconfig") {
		t.Fatalf("deployment %s, reason %q: %s; want failed, reason no_state_backend, naming --kubeconfig", got.Status, got.Reason, got.Message)
	}
	if got.StartedAt != nil {
		t.Errorf("the refused attempt started its CLI at %s", got.StartedAt)
	}
	// A state operation is answered at once, refused with the same reason, not left to expire.
	op, err := admin.CreateStateOperation(t.Context(), "s", api.StateOperationRequest{StateKey: "k", StateOperationInput: api.StateOperationInput{Kind: api.StateOperationShow}})
	if err != nil {
		t.Fatal(err)
	}
	testbed.WaitFor(t, 30*time.Second, "the state operation to end", func() (bool, string) {
		op, err = admin.GetStateOperation(t.Context(), op.ID)
		return err == nil && op.Status.Terminal(), fmt.Sprint(op.Status, err)
	})
	if op.Error == nil || op.Error.Code != api.StateOpRefused || !strings.Contains(op.Error.Message, "--kubeconfig") {
		t.Errorf("state operation on an agent without a state backend: %+v, want refused naming --kubeconfig", op.Error)
	}
}
