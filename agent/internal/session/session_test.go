package session

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/health"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/metrics"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// fakeOrch is an orchestrator that records every request and fails events while down.
type fakeOrch struct {
	mu     sync.Mutex
	polls  []api.PollRequest
	events map[string][]api.EventRequest
	down   bool
	offers []api.Offer
	max    int
}

func (f *fakeOrch) Poll(ctx context.Context, req api.PollRequest) (*api.PollResponse, error) {
	f.mu.Lock()
	f.polls = append(f.polls, req)
	n := min(req.CapacityFree, len(f.offers))
	offers := f.offers[:n]
	f.offers = f.offers[n:]
	f.mu.Unlock()
	if len(offers) == 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return &api.PollResponse{Offers: offers, MaxConcurrency: f.max}, nil
}

func (f *fakeOrch) Claim(_ context.Context, jobID string, req api.ClaimRequest) (*api.Claim, error) {
	return &api.Claim{JobID: jobID, Attempt: req.Attempt, JobToken: "opj_" + jobID, Lease: api.Lease{Fencing: 3}, Spec: api.JobSpec{StateKey: "k/" + jobID}}, nil
}

func (f *fakeOrch) Event(_ context.Context, jobID string, req api.EventRequest) (*api.EventResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, &api.Error{StatusCode: 503, Code: api.CodeUnavailable, Message: "down"}
	}
	if f.events == nil {
		f.events = map[string][]api.EventRequest{}
	}
	f.events[jobID] = append(f.events[jobID], req)
	return &api.EventResponse{}, nil
}

// fakeExec holds jobs in memory; the test moves them through phases.
type fakeExec struct {
	mu      sync.Mutex
	jobs    map[string]*executor.Status
	saved   map[string][]byte
	cleaned map[string]int
	n       *executor.Notifier
}

func newFakeExec() *fakeExec {
	return &fakeExec{jobs: map[string]*executor.Status{}, saved: map[string][]byte{}, cleaned: map[string]int{}, n: executor.NewNotifier()}
}

func (f *fakeExec) Start(_ context.Context, c *api.Claim) error {
	if c.JobID == "bad" {
		return fmt.Errorf("%w: spec.containers: needs a container named \"main\"", executor.ErrInvalidJob)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs[c.JobID] = &executor.Status{JobID: c.JobID, Attempt: c.Attempt, Fencing: c.Lease.Fencing, Phase: executor.PhasePending}
	return nil
}

func (f *fakeExec) List(context.Context) ([]executor.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []executor.Status
	for _, s := range f.jobs {
		c := *s
		c.PendingReport = f.saved[s.JobID]
		out = append(out, c)
	}
	return out, nil
}

func (f *fakeExec) Cancel(context.Context, string, int, time.Duration) error { return nil }
func (f *fakeExec) Cleanup(_ context.Context, id string, _ int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.jobs, id)
	f.cleaned[id]++
	return nil
}
func (f *fakeExec) SavePendingReport(_ context.Context, id string, _ int, r []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.saved[id] = r
	return nil
}
func (f *fakeExec) JobToken(context.Context, string, int) (string, error) {
	return "", executor.ErrNoToken
}
func (f *fakeExec) Changes() <-chan struct{} { return f.n.C() }

func (f *fakeExec) set(id string, mut func(*executor.Status)) {
	f.mu.Lock()
	mut(f.jobs[id])
	f.mu.Unlock()
	f.n.Notify()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSessionClaimsReportsAndKeepsUndeliveredReports(t *testing.T) {
	orch := &fakeOrch{max: 5, offers: []api.Offer{{JobID: "a", Attempt: 1}, {JobID: "b", Attempt: 1}}}
	ex := newFakeExec()
	s := New(Options{Client: orch, Executor: ex, Metrics: metrics.New("test"), Health: health.NewState(time.Second, nil),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Instance: "agent-0", MaxConcurrency: 3, PollWait: time.Second,
		ReportBackoff: retry.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()

	waitFor(t, "two jobs started", func() bool { l, _ := ex.List(ctx); return len(l) == 2 })
	if h, err := s.o.Tokens.Authorize(ctx, "a", "opj_a", "k/a"); err != nil || h != "job/a/1" {
		t.Errorf("claim of a not authorised: %v", err)
	}
	if _, err := s.o.Tokens.Authorize(ctx, "a", "opj_b", "k/a"); err == nil {
		t.Error("wrong token authorised")
	}
	if _, err := s.o.Tokens.Authorize(ctx, "a", "opj_a", "k/b"); err == nil {
		t.Error("other state authorised")
	}
	// Capacity restated: min(orchestrator 5, configured 3) − 2 running.
	waitFor(t, "a poll restating both jobs", func() bool {
		orch.mu.Lock()
		defer orch.mu.Unlock()
		last := orch.polls[len(orch.polls)-1]
		return len(last.Running) == 2 && last.CapacityFree == 1 && last.Instance == "agent-0"
	})

	// A running job is reported started and left alone.
	ex.set("b", func(s *executor.Status) { s.Started, s.Phase = true, executor.PhaseRunning })
	waitFor(t, "b reported started", func() bool { orch.mu.Lock(); defer orch.mu.Unlock(); return len(orch.events["b"]) == 1 })
	time.Sleep(100 * time.Millisecond)
	ex.mu.Lock()
	if ex.cleaned["b"] != 0 || ex.jobs["b"] == nil {
		t.Error("a running job was cleaned up")
	}
	ex.mu.Unlock()

	orch.mu.Lock()
	orch.down = true
	orch.mu.Unlock()
	code := 2
	ex.set("a", func(s *executor.Status) {
		s.Started, s.Phase, s.ExitCode, s.Reason = true, executor.PhaseFailed, &code, executor.ReasonExitCode
		s.FinishedAt = time.Unix(1700000000, 0)
	})
	waitFor(t, "the undelivered report saved with the job", func() bool { ex.mu.Lock(); defer ex.mu.Unlock(); return ex.saved["a"] != nil })
	ex.mu.Lock()
	if ex.cleaned["a"] != 0 {
		t.Error("job cleaned up before its report was acknowledged")
	}
	ex.mu.Unlock()
	orch.mu.Lock()
	orch.down = false
	orch.mu.Unlock()
	waitFor(t, "job a cleaned after the report", func() bool { ex.mu.Lock(); defer ex.mu.Unlock(); return ex.cleaned["a"] == 1 })

	orch.mu.Lock()
	evs := orch.events["a"]
	orch.mu.Unlock()
	if len(evs) != 2 || evs[0].Seq != SeqStarted || evs[0].Type != api.EventStarted || evs[1].Seq != SeqFinished ||
		evs[1].Result != api.StatusFailed || *evs[1].ExitCode != 2 || evs[1].Fencing != 3 {
		t.Fatalf("events of a = %+v", evs)
	}
	if string(encodeReport(evs[1])) != string(ex.saved["a"]) {
		t.Errorf("delivered report differs from the saved one:\n%s\n%s", encodeReport(evs[1]), ex.saved["a"])
	}
	if _, err := s.o.Tokens.Authorize(ctx, "a", "opj_a", "k/a"); err == nil {
		t.Error("finished job still authorised")
	}

	// A job the executor refuses (bad pod template) is reported failed, not retried or crashed on.
	orch.mu.Lock()
	orch.offers = []api.Offer{{JobID: "bad", Attempt: 1}}
	orch.mu.Unlock()
	waitFor(t, "the refused job reported", func() bool { orch.mu.Lock(); defer orch.mu.Unlock(); return len(orch.events["bad"]) > 0 })
	orch.mu.Lock()
	bad := orch.events["bad"]
	orch.mu.Unlock()
	if len(bad) != 1 || bad[0].Type != api.EventFinished || bad[0].Result != api.StatusFailed || bad[0].Reason != executor.ReasonInvalidTemplate ||
		!strings.Contains(bad[0].Message, "needs a container named") {
		t.Errorf("report of the refused job: %+v", bad)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A job whose start is still in flight while the executor already lists it counts once, in the
// capacity stated and in the jobs_running gauge.
func TestStartingJobCountsOnce(t *testing.T) {
	ex := newFakeExec()
	s := New(Options{Client: &fakeOrch{}, Executor: ex, Logger: slog.New(slog.DiscardHandler), MaxConcurrency: 3})
	if err := ex.Start(t.Context(), &api.Claim{JobID: "a", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.starting[executor.Key{JobID: "a", Attempt: 1}] = true // claimAndStart has not returned yet
	s.starting[executor.Key{JobID: "b", Attempt: 1}] = true // not listed yet: counts too
	s.orchMax, s.orchKnown = 5, true
	s.mu.Unlock()
	req, err := s.pollRequest(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if req.CapacityFree != 1 {
		t.Errorf("capacity free %d, want 3 − 2 jobs = 1", req.CapacityFree)
	}
	families, err := s.o.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if got := f.GetMetric()[0].GetGauge().GetValue(); f.GetName() == "outpost_agent_jobs_running" && got != 2 {
			t.Errorf("jobs_running %v, want 2", got)
		}
	}
}
