package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing/tracingtest"
)

// traceConfig needs no provider download: terraform_data is built in.
const traceConfig = `
resource "terraform_data" "x" { input = "traced" }
output "x" { value = terraform_data.x.output }
`

// TestProcessExecutorTrace follows one deployment's trace into an OTLP/HTTP collector on
// loopback (decoded with the OTLP protobuf types): the orchestrator's enqueue, the agent's
// claim and process start, the job runner's phases, and the spans the real OpenTofu exports
// under its phases, all one trace whose id the deployment names. The real-pod version is
// agent/e2e/pods TestTraceInJobPod.
func TestProcessExecutorTrace(t *testing.T) {
	t.Parallel()
	tofu := os.Getenv("OUTPOST_TOFU")
	if tofu == "" {
		t.Fatal("OUTPOST_TOFU is not set: build OpenTofu with scripts/tools.sh and export OUTPOST_TOFU=<path to tofu> (make test does)")
	}
	col := tracingtest.Start(t, "127.0.0.1:0")
	tp, err := tracing.Start(t.Context(), "outpost-orchestrator", tracing.Settings{TracesURL: col.URL + "/v1/traces"})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Shutdown(context.Background()) //nolint:errcheck // the spans are checked below
	e := newEnv(t, "", 2, orchestratortest.WithTracerProvider(tp))
	stateAddr, workDir := porttest.Addr(t), t.TempDir()
	e.startAgent("agent-0", "--executor", "process", "--leader-elect=false", "--work-dir", workDir, "--agent-binary", agentBinary(t),
		"--cli", tofu, "--state-listen", stateAddr, "--state-url", "http://"+stateAddr, "--trace-endpoint", col.URL)
	d, err := e.admin.CreateDeployment(t.Context(), api.DeploymentInput{RunnerID: e.runnerID, Operation: api.OperationApply,
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": traceConfig})}}, StateKey: "apps/traced"})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.TraceID) != 32 {
		t.Fatalf("the enqueue's answer names trace id %q, want 32 hex digits", d.TraceID)
	}
	got := e.waitTerminal([]string{d.ID}, 2*time.Minute)[d.ID]
	if got.Status != api.StatusSucceeded {
		logs, _ := e.admin.GetLogs(context.Background(), d.ID, 0, 1<<20)
		t.Fatalf("deployment %s (%s): %s\nlog:\n%s", got.Status, got.Reason, got.Message, logs.Data)
	}
	if got.TraceID != d.TraceID {
		t.Errorf("the deployment's trace id is %q after it ran, %q at the enqueue", got.TraceID, d.TraceID)
	}
	_ = tp.Shutdown(t.Context()) // exports the enqueue's span now
	spans := col.WaitTrace(t, d.TraceID, tracingtest.DeploymentTrace(tracing.SpanStartProcess, string(api.OperationApply)), 30*time.Second)
	t.Logf("trace %s, %d spans:\n%s", d.TraceID, len(spans), tracingtest.Tree(spans))
	if err := tracingtest.CLIRuns(spans, "tofu", 3); err != nil {
		t.Error(err)
	}
}
