package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
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
	stateAddr, workDir := freeAddr(t), t.TempDir()
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
	spans := col.WaitTrace(t, d.TraceID, traceWant(tracing.SpanStartProcess, api.OperationApply), 30*time.Second)
	t.Logf("trace %s, %d spans:\n%s", d.TraceID, len(spans), tracingtest.Tree(spans))
	checkCLIRuns(t, spans, 3)
}

// checkCLIRuns checks that OpenTofu's root spans are exactly the CLI runs of the job runner's
// phases (init, the operation, output): no process the job runner starts joins the trace
// elsewhere.
func checkCLIRuns(t *testing.T, spans []tracingtest.Span, want int) {
	t.Helper()
	n := 0
	for _, s := range spans {
		if s.Name == "tofu" {
			n++
		}
	}
	if n != want {
		t.Errorf("%d OpenTofu runs in the trace, want %d (init, the operation, output):\n%s", n, want, tracingtest.Tree(spans))
	}
}

// traceWant is one deployment's trace: the orchestrator's enqueue at the root, the agent's claim
// and its start of the attempt (start, the executor's span), the job runner's run and phases,
// and OpenTofu's own spans under the phases that ran it.
func traceWant(start string, op api.Operation) []tracingtest.Want {
	const orch, agent, job, tofu = "outpost-orchestrator", "outpost-agent", "outpost-job", "OpenTofu CLI"
	return []tracingtest.Want{
		{Name: tracing.SpanEnqueue, Service: orch},
		{Name: tracing.SpanClaim, Service: agent, Parent: tracing.SpanEnqueue},
		{Name: start, Service: agent, Parent: tracing.SpanClaim},
		{Name: tracing.SpanJob, Service: job, Parent: start},
		{Name: tracing.SpanFetchSpec, Service: job, Parent: tracing.SpanJob},
		{Name: tracing.SpanFetchSource, Service: job, Parent: tracing.SpanJob},
		{Name: tracing.SpanInit, Service: job, Parent: tracing.SpanJob},
		{Name: string(op), Service: job, Parent: tracing.SpanJob},
		{Name: tracing.SpanOutputs, Service: job, Parent: tracing.SpanJob},
		{Name: "tofu", Service: tofu, Parent: tracing.SpanInit},
		{Name: "tofu", Service: tofu, Parent: string(op)},
		{Name: "tofu", Service: tofu, Parent: tracing.SpanOutputs},
		{Name: "Apply phase", Service: tofu, Parent: "tofu"},
	}
}
