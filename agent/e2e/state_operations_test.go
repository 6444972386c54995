package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// TestStateOperationsOnTheAgentBinary runs the outpost-agent binary (process executor, state
// backend on the test bed's kube-apiserver) with real terraform: two applies write two
// versions, `outpost state diff` and `rollback` go through the orchestrator to the agent's poll
// and back, and a plan deployment after the rollback finds nothing to change with the first
// apply's variables.
func TestStateOperationsOnTheAgentBinary(t *testing.T) {
	t.Parallel()
	tf := "/usr/local/bin/terraform"
	if _, err := os.Stat(tf); err != nil {
		t.Fatalf("terraform CLI not found at %s (the machines have Terraform 1.11 there): %v", tf, err)
	}
	e := newEnv(t, "", 2)
	stateAddr := porttest.Addr(t)
	e.startAgent("agent-0", "--executor", "process", "--leader-elect=false", "--work-dir", t.TempDir(), "--agent-binary", agentBinary(t),
		"--cli", tf, "--state-listen", stateAddr, "--state-url", "http://"+stateAddr)
	src := api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": slowConfig})}}
	deploy := func(op api.Operation, name string) *api.Deployment {
		t.Helper()
		vars := map[string]json.RawMessage{"name": json.RawMessage(`"` + name + `"`), "sleep": json.RawMessage(`0`)}
		d, err := e.admin.CreateDeployment(t.Context(), api.DeploymentInput{RunnerID: e.runnerID, Operation: op, Source: src, StateKey: "apps/ops", Variables: vars})
		if err != nil {
			t.Fatal(err)
		}
		got := e.waitTerminal([]string{d.ID}, 2*time.Minute)[d.ID]
		if got.Status != api.StatusSucceeded {
			logs, _ := e.admin.GetLogs(t.Context(), d.ID, 0, 1<<20)
			t.Fatalf("%s name=%s: %s (%s)\n%s", op, name, got.Status, got.Message, logs.Data)
		}
		return got
	}
	deploy(api.OperationApply, "first")
	deploy(api.OperationApply, "second")
	testbed.WaitFor(t, 30*time.Second, "two versions reported", func() (bool, string) {
		st, err := e.admin.GetState(t.Context(), "k8s", "apps/ops")
		return err == nil && len(st.Versions) == 2, ""
	})

	c := &outpostCLI{t: t, env: map[string]string{"OUTPOST_API_URL": e.orch.URL, "OUTPOST_ORG_ID": testOrg, "OUTPOST_TOKEN": e.orch.AdminToken,
		"OUTPOST_CONFIG": filepath.Join(t.TempDir(), "config.yaml")}}
	if d := c.must("state", "diff", "k8s", "apps/ops", "1", "2").stdout; !strings.Contains(d, "~ terraform_data.slow") || !strings.Contains(d, "~ output name") {
		t.Errorf("diff of the two applies:\n%s", d)
	}
	if r := c.must("state", "rollback", "k8s", "apps/ops", "1", "--reason", "second broke it").stdout; !strings.Contains(r, "written as generation 3, serial 3") {
		t.Errorf("rollback:\n%s", r)
	}
	plan := deploy(api.OperationPlan, "first")
	logs, err := e.admin.GetLogs(t.Context(), plan.ID, 0, 1<<20)
	if err != nil || !strings.Contains(string(logs.Data), "No changes.") {
		t.Errorf("plan with the first apply's variables after the rollback: %v\n%s", err, logs.Data)
	}
}
