package jobrun

import (
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing/tracingtest"
)

// TestTraceWithRealCLIs runs the job runner with the tracing variables an executor sets
// (TRACEPARENT and the OTLP settings, tracing.ChildEnv) against a collector on loopback, with
// each real CLI: the job runner's span nests under the given traceparent and its phases under
// it; OpenTofu's spans nest under the phases that ran it. Terraform exports its spans to the
// same collector but in traces of its own: it does not read TRACEPARENT (README, "Tracing").
func TestTraceWithRealCLIs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real terraform and tofu")
	}
	const traceID, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	for _, tc := range []struct{ cli, service string }{{"tofu", tracingtest.ServiceOpenTofu}, {"terraform", "Terraform CLI"}} {
		t.Run(tc.cli, func(t *testing.T) {
			path := cliUnderTest()[tc.cli]
			if path == "" {
				t.Skipf("%s is not available (OUTPOST_TOFU for tofu)", tc.cli)
			}
			col := tracingtest.Start(t, "127.0.0.1:0")
			h := newHarness(t, path)
			src := inlineSource(t, map[string]string{"main.tf": goodConfig})
			res := h.runJob(h.deploy(api.OperationApply, src, map[string]any{"name": "trace"}, "traced"), runOptions{env: map[string]string{
				tracing.EnvTraceparent: "00-" + traceID + "-" + parent + "-01", tracing.EnvExporter: "otlp",
				tracing.EnvTracesEndpoint: col.URL + "/v1/traces", tracing.EnvProtocol: tracing.ProtocolHTTP,
			}})
			if res.Code != 0 {
				t.Fatalf("apply exited %d\n%s", res.Code, res.Stdout)
			}
			// The job runner flushed its spans before it returned; the CLI's went when it exited.
			want := []tracingtest.Want{
				{Name: tracing.SpanJob, Service: tracingtest.ServiceJob},
				{Name: tracing.SpanFetchSpec, Service: tracingtest.ServiceJob, Parent: tracing.SpanJob},
				{Name: tracing.SpanInit, Service: tracingtest.ServiceJob, Parent: tracing.SpanJob},
				{Name: "apply", Service: tracingtest.ServiceJob, Parent: tracing.SpanJob},
				{Name: tracing.SpanStateWrite, Service: tracingtest.ServiceJob, Parent: "apply"},
				{Name: tracing.SpanOutputs, Service: tracingtest.ServiceJob, Parent: tracing.SpanJob},
			}
			if tc.cli == "tofu" {
				want = append(want, tracingtest.Want{Name: "tofu", Service: tc.service, Parent: "apply"})
			}
			// The run's span is under the executor's, which this test stands for and never sends:
			// checked, it becomes the root of what the collector holds.
			rooted := func() []tracingtest.Span {
				spans := col.Trace(traceID)
				for i, s := range spans {
					if s.Name == tracing.SpanJob && s.ParentID == parent {
						spans[i].ParentID = ""
					}
				}
				return spans
			}
			spans := rooted()
			for deadline := time.Now().Add(10 * time.Second); tracingtest.Check(spans, want) != nil && time.Now().Before(deadline); spans = rooted() {
				time.Sleep(100 * time.Millisecond)
			}
			if err := tracingtest.Check(spans, want); err != nil {
				t.Fatalf("%v\n%s", err, tracingtest.Tree(spans))
			}
			other := 0
			for _, s := range col.Spans() {
				if s.Service == tc.service && s.TraceID != traceID {
					other++
				}
			}
			switch {
			case tc.cli == "terraform" && other == 0:
				t.Errorf("no spans of Terraform arrived in traces of their own")
			case tc.cli == "tofu" && other != 0:
				t.Errorf("%d spans of OpenTofu outside the deployment's trace", other)
			}
			t.Logf("%s: %d spans in the trace, %d of the CLI outside it:\n%s", tc.cli, len(spans), other, tracingtest.Tree(spans))
		})
	}
}
