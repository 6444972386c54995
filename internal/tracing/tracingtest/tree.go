package tracingtest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
)

// Want is one span a trace must hold: its name, the service that sent it, and the name of its
// parent ("" for the trace's root, which must have no parent at all).
type Want struct {
	Name, Service, Parent string
}

// Check reports what of want the spans of one trace lack: each wanted span present, from its
// service, under a span of the parent's name in the same trace (or the root, for an empty
// Parent); and that the trace is one tree: one root, every other span's parent in the trace.
// Nil when all hold.
func Check(spans []Span, want []Want) error {
	byID := map[string]Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	var errs []error
	roots := 0
	for _, s := range spans {
		if s.ParentID == "" {
			roots++
		} else if _, ok := byID[s.ParentID]; !ok {
			errs = append(errs, fmt.Errorf("span %q of %s has a parent (%s) that is not in the trace", s.Name, s.Service, s.ParentID))
		}
	}
	if roots != 1 {
		errs = append(errs, fmt.Errorf("the trace has %d roots, want 1", roots))
	}
	for _, w := range want {
		found := false
		var seen []string
		for _, s := range spans {
			if s.Name != w.Name || s.Service != w.Service {
				continue
			}
			parent, ok := byID[s.ParentID]
			switch {
			case w.Parent == "" && s.ParentID == "":
				found = true
			case w.Parent != "" && ok && parent.Name == w.Parent:
				found = true
			case s.ParentID == "":
				seen = append(seen, "a root")
			case !ok:
				seen = append(seen, "a span not in the trace ("+s.ParentID+")")
			default:
				seen = append(seen, fmt.Sprintf("%q", parent.Name))
			}
		}
		if found {
			continue
		}
		where := "under " + fmt.Sprintf("%q", w.Parent)
		if w.Parent == "" {
			where = "as the root"
		}
		if len(seen) > 0 {
			errs = append(errs, fmt.Errorf("span %q of %s is under %s, not %s", w.Name, w.Service, strings.Join(seen, ", "), where))
		} else {
			errs = append(errs, fmt.Errorf("no span %q of %s %s", w.Name, w.Service, where))
		}
	}
	return errors.Join(errs...)
}

// WaitTrace waits up to timeout for the trace to hold every wanted span (exporters batch and
// send a few seconds late) and returns its spans; it fails the test with what arrived when
// they do not all come.
func (c *Collector) WaitTrace(t testing.TB, traceID string, want []Want, timeout time.Duration) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		spans := c.Trace(traceID)
		err := Check(spans, want)
		if err == nil {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s after %s: %v\nthe trace (%d spans):\n%s\nother traces' spans: %d", traceID, timeout, err, len(spans), Tree(spans), len(c.Spans())-len(spans))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The services of one deployment's trace, as the resource's service.name names them.
const (
	ServiceOrchestrator = "outpost-orchestrator"
	ServiceAgent        = "outpost-agent"
	ServiceJob          = "outpost-job"
	// ServiceOpenTofu is OpenTofu's own service name (seen from 1.10.6).
	ServiceOpenTofu = "OpenTofu CLI"
)

// DeploymentTrace is the tree of one deployment of operation op (apply or destroy) run with
// OpenTofu: the orchestrator's enqueue at the root, the agent's claim and its start of the
// attempt (start: the executor's span, tracing.SpanCreateJob or SpanStartProcess), the job
// runner's run and phases, and OpenTofu's own spans under the phases that ran it.
func DeploymentTrace(start, op string) []Want {
	return []Want{
		{Name: tracing.SpanEnqueue, Service: ServiceOrchestrator},
		{Name: tracing.SpanClaim, Service: ServiceAgent, Parent: tracing.SpanEnqueue},
		{Name: start, Service: ServiceAgent, Parent: tracing.SpanClaim},
		{Name: tracing.SpanJob, Service: ServiceJob, Parent: start},
		{Name: tracing.SpanFetchSpec, Service: ServiceJob, Parent: tracing.SpanJob},
		{Name: tracing.SpanFetchSource, Service: ServiceJob, Parent: tracing.SpanJob},
		{Name: tracing.SpanInit, Service: ServiceJob, Parent: tracing.SpanJob},
		{Name: op, Service: ServiceJob, Parent: tracing.SpanJob},
		{Name: tracing.SpanOutputs, Service: ServiceJob, Parent: tracing.SpanJob},
		{Name: tracing.SpanStateWrite, Service: ServiceJob, Parent: op},
		{Name: "tofu", Service: ServiceOpenTofu, Parent: tracing.SpanInit},
		{Name: "tofu", Service: ServiceOpenTofu, Parent: op},
		{Name: "tofu", Service: ServiceOpenTofu, Parent: tracing.SpanOutputs},
		{Name: "Apply phase", Service: ServiceOpenTofu, Parent: "tofu"},
	}
}

// CLIRuns checks that the CLI's root spans (named root) are exactly want, the CLI runs of the
// job runner's phases (init, the operation, output): no other process the job runner starts
// joins the trace.
func CLIRuns(spans []Span, root string, want int) error {
	n := 0
	for _, s := range spans {
		if s.Name == root {
			n++
		}
	}
	if n != want {
		return fmt.Errorf("%d %s runs in the trace, want %d (init, the operation, output):\n%s", n, root, want, Tree(spans))
	}
	return nil
}
