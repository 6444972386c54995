package orchestratortest_test

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
)

// TestEnqueueTraceOnDeploymentAndClaim: a traced orchestrator's enqueue span is the root of the
// deployment's trace; the deployment names its trace id and the claim hands the agent the
// enqueue span's traceparent. Untraced, neither appears.
func TestEnqueueTraceOnDeploymentAndClaim(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	for _, traced := range []bool{true, false} {
		var opts []orchestratortest.Option
		if traced {
			opts = append(opts, orchestratortest.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))))
		}
		inst := orchestratortest.Start(t, opts...)
		admin, key := inst.RegisterRunner(t.Context(), t)
		d, err := admin.CreateDeployment(t.Context(), api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan, StateKey: "k",
			Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": ""})}}})
		if err != nil {
			t.Fatal(err)
		}
		cl := inst.NewAgent(t, "acme", "r1", key, "test").Claim(t.Context(), d.ID).Claim
		got, err := admin.GetDeployment(t.Context(), d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !traced {
			if d.TraceID != "" || got.TraceID != "" || cl.Placement.Traceparent != "" {
				t.Errorf("untraced: trace id %q / %q, traceparent %q", d.TraceID, got.TraceID, cl.Placement.Traceparent)
			}
			continue
		}
		spans := rec.Ended()
		if len(spans) != 1 || spans[0].Name() != tracing.SpanEnqueue || spans[0].Parent().IsValid() {
			t.Fatalf("ended spans %v, want one root %q", spans, tracing.SpanEnqueue)
		}
		sc := spans[0].SpanContext()
		if d.TraceID != sc.TraceID().String() || got.TraceID != d.TraceID {
			t.Errorf("trace id at the enqueue %q, read back %q; the enqueue span's is %s", d.TraceID, got.TraceID, sc.TraceID())
		}
		if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; cl.Placement.Traceparent != want {
			t.Errorf("the claim's traceparent is %q, want the enqueue span's %q", cl.Placement.Traceparent, want)
		}
	}
}
