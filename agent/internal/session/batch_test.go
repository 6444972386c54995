package session

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// batchingOrch is a fakeOrch that also takes event batches (api.ProtocolEventBatch). Every
// request, alone or batch, is held until gate is closed.
type batchingOrch struct {
	*fakeOrch
	gate chan struct{}
	// unsupported answers every batch as a replica without the route does.
	unsupported bool

	mu                      sync.Mutex
	held, requests, batches int
	open                    sync.Once
}

// hold counts a request of n events and holds it until the gate opens.
func (b *batchingOrch) hold(n int) {
	b.mu.Lock()
	b.held += n
	b.requests++
	b.mu.Unlock()
	<-b.gate
	b.mu.Lock()
	b.held -= n
	b.mu.Unlock()
}

func (b *batchingOrch) release() { b.open.Do(func() { close(b.gate) }) }

func (b *batchingOrch) Event(ctx context.Context, deploymentID string, req api.EventRequest) (*api.EventResponse, error) {
	b.hold(1)
	return b.fakeOrch.Event(ctx, deploymentID, req)
}

func (b *batchingOrch) Events(ctx context.Context, events []api.DeploymentEvent) ([]api.EventResult, error) {
	if b.unsupported {
		return nil, fmt.Errorf("%w: HTTP 404", api.ErrEventBatchUnsupported)
	}
	b.hold(len(events))
	b.mu.Lock()
	b.batches++
	b.mu.Unlock()
	out := make([]api.EventResult, len(events))
	for i, ev := range events {
		resp, _ := b.fakeOrch.Event(ctx, ev.DeploymentID, ev.EventRequest)
		out[i].Response = resp
	}
	return out, nil
}

func (b *batchingOrch) count() (held, requests, batches int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held, b.requests, b.batches
}

// finishAll starts n attempts in ex once the session's first poll answer chose its protocol,
// and ends them all at once.
func finishAll(t *testing.T, s *Session, ex *fakeExec, n int) {
	t.Helper()
	waitFor(t, "the first poll answer", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.protocol != 0
	})
	for i := range n {
		id := fmt.Sprintf("dep-%d", i)
		if err := ex.Start(t.Context(), &api.Claim{DeploymentID: id, Attempt: 1, Lease: api.Lease{Fencing: 1}}, "opst_"+id); err != nil {
			t.Fatal(err)
		}
		ex.set(id, func(s *executor.AttemptStatus) { s.Started, s.Status, s.Fencing = true, api.StatusSucceeded, 1 })
	}
}

func finishedEvents(o *fakeOrch) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, evs := range o.events {
		if slices.ContainsFunc(evs, func(e api.EventRequest) bool { return e.Type == api.EventFinished }) {
			n++
		}
	}
	return n
}

// TestEventsOfAttemptsEndingTogetherGoInBatches: when many attempts end at once and the
// orchestrator speaks api.ProtocolEventBatch, their events go in a few requests (the ones sent
// while the first are on their way gather into batches) instead of one request each.
func TestEventsOfAttemptsEndingTogetherGoInBatches(t *testing.T) {
	const n = 40
	ex := newFakeExec()
	orch := &batchingOrch{fakeOrch: &fakeOrch{protocol: api.ProtocolEventBatch}, gate: make(chan struct{})}
	s := New(Options{Client: orch, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0"})
	stop := run(t, s)
	defer stop()
	defer orch.release() // before stop: the session waits for its requests
	finishAll(t, s, ex, n)
	// Each attempt's first event (started) is held on its way: sent one by one, that is n
	// requests; gathered, a few.
	waitFor(t, "every attempt's first event on its way", func() bool { held, _, _ := orch.count(); return held == n })
	orch.release()
	waitFor(t, fmt.Sprintf("the finished events of all %d attempts", n), func() bool { return finishedEvents(orch.fakeOrch) == n })
	if _, requests, batches := orch.count(); requests >= n || batches == 0 {
		t.Fatalf("%d events in %d requests (%d of them batches); want batches, fewer requests than events", n, requests, batches)
	} else {
		t.Logf("%d finished events in %d requests, %d of them batches", n, requests, batches)
	}
}

// TestEventsGoOneByOneWithoutTheBatchRoute: a batch that reaches an orchestrator replica
// without the route (an older release during a rolling upgrade) is sent again event by event,
// and every finished event arrives; an orchestrator that chose an older protocol gets no batch.
func TestEventsGoOneByOneWithoutTheBatchRoute(t *testing.T) {
	for _, tc := range []struct {
		name        string
		protocol    int
		unsupported bool
	}{{"batch route missing", api.ProtocolEventBatch, true}, {"older protocol", api.ProtocolTimeline, false}} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 20
			ex := newFakeExec()
			orch := &batchingOrch{fakeOrch: &fakeOrch{protocol: tc.protocol}, gate: make(chan struct{}), unsupported: tc.unsupported}
			orch.release()
			s := New(Options{Client: orch, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0"})
			stop := run(t, s)
			defer stop()
			finishAll(t, s, ex, n)
			waitFor(t, fmt.Sprintf("the finished events of all %d attempts", n), func() bool { return finishedEvents(orch.fakeOrch) == n })
			if _, _, batches := orch.count(); batches != 0 {
				t.Fatalf("%d batches taken, want none", batches)
			}
		})
	}
}
