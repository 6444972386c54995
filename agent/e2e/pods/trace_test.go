package pods

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing/tracingtest"
)

// TestTraceInJobPod follows one deployment's trace end to end on real pods into an OTLP/HTTP
// collector of the test's own, listening on the test bed's HostIP like the orchestrator so the
// agent pod and the job pod reach it: the orchestrator's enqueue, the agent pod's claim and Job
// creation (the chart's tracing.endpoint), the job runner's phases in the job pod, and the spans
// of the real OpenTofu in the job pod's main container under them, all one trace whose id the
// deployment names, each span under the right parent.
func TestTraceInJobPod(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	col := tracingtest.Start(t, net.JoinHostPort(c.HostIP, "0"))
	tp, err := tracing.Start(t.Context(), tracingtest.ServiceOrchestrator, tracing.Settings{TracesURL: col.URL + "/v1/traces"})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Shutdown(context.Background()) //nolint:errcheck // the spans are checked below
	e := newEnv(t, envOptions{values: "tracing: {endpoint: " + col.URL + "}", orchestrator: []orchestratortest.Option{orchestratortest.WithTracerProvider(tp)}})
	r := e.deploy(api.OperationApply, greeting, "traced")
	if r.d.Status != api.StatusSucceeded {
		t.Fatalf("deployment %s (%s): %s\nlog:\n%s", r.d.Status, r.d.Reason, r.d.Message, r.log)
	}
	if len(r.d.TraceID) != 32 {
		t.Fatalf("the deployment names trace id %q, want 32 hex digits", r.d.TraceID)
	}
	_ = tp.Shutdown(t.Context()) // exports the enqueue's span now
	spans := col.WaitTrace(t, r.d.TraceID, tracingtest.DeploymentTrace(tracing.SpanCreateJob, string(api.OperationApply)), time.Minute)
	t.Logf("trace %s, %d spans:\n%s", r.d.TraceID, len(spans), tracingtest.Tree(spans))
	if err := tracingtest.CLIRuns(spans, "tofu", 3); err != nil {
		t.Error(err)
	}
}
