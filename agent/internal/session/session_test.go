package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/health"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobtoken"
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
	// strict refuses a poll that restates a malformed attempt, as the orchestrator does.
	strict bool
	// hold is how long a long poll with nothing to offer is held (default 50 ms).
	hold time.Duration
	// pollErr, when set, fails every poll.
	pollErr error
	// storage is the state storage type of the claims' placements, by deployment (none unset).
	storage map[string]string
	// protocol is the agent protocol the poll answers choose (0: an orchestrator from before
	// negotiation).
	protocol int
	// applyPlan is the saved plan the claims' placements apply, by deployment (none unset).
	applyPlan map[string]*api.PlanRef
}

func (f *fakeOrch) Poll(ctx context.Context, req api.PollRequest) (*api.PollResponse, error) {
	f.mu.Lock()
	f.polls = append(f.polls, req)
	if f.pollErr != nil {
		err := f.pollErr
		f.mu.Unlock()
		return nil, err
	}
	for _, h := range req.Held {
		if err := api.ValidateID("held.deployment_id", h.DeploymentID); f.strict && (err != nil || h.Fencing < 1) {
			f.mu.Unlock()
			return nil, &api.Error{StatusCode: 400, Code: api.CodeInvalid, Message: fmt.Sprintf("held attempt %q: %v", h.DeploymentID, err)}
		}
	}
	n := min(req.CapacityFree, len(f.offers))
	offers := f.offers[:n]
	f.offers = f.offers[n:]
	hold, limit := 50*time.Millisecond, f.max
	if f.hold > 0 && req.WaitSeconds > 0 {
		hold = f.hold
	}
	f.mu.Unlock()
	if len(offers) == 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(hold):
		}
	}
	f.mu.Lock()
	protocol := f.protocol
	f.mu.Unlock()
	return &api.PollResponse{Offers: offers, MaxConcurrency: limit, OrchestratorVersion: "9.9.9", Protocol: protocol}, nil
}

func (f *fakeOrch) Claim(_ context.Context, deploymentID string, req api.ClaimRequest) (*api.Claim, error) {
	c := &api.Claim{DeploymentID: deploymentID, Attempt: req.Attempt, JobToken: "opj_" + deploymentID, Lease: api.Lease{Fencing: 3}, Placement: api.Placement{StateKey: "k/" + deploymentID}}
	c.Placement.StateStorage.Type = f.storage[deploymentID]
	c.Placement.ApplyPlan = f.applyPlan[deploymentID]
	return c, nil
}

func (f *fakeOrch) Event(_ context.Context, deploymentID string, req api.EventRequest) (*api.EventResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, &api.Error{StatusCode: 503, Code: api.CodeUnavailable, Message: "down"}
	}
	if f.events == nil {
		f.events = map[string][]api.EventRequest{}
	}
	f.events[deploymentID] = append(f.events[deploymentID], req)
	return &api.EventResponse{}, nil
}

// fakeExec holds attempts in memory; the test moves them through their statuses.
type fakeExec struct {
	mu       sync.Mutex
	starts   []string // every Start, with the claim's token
	attempts map[string]*executor.AttemptStatus
	saved    map[string][]byte
	cleaned  map[string]int
	// stateTokens are the state credentials Start was given, by deployment.
	stateTokens map[string]string
	n           *executor.Notifier
	// cleanupGate, when set, holds every Cleanup until it is closed (a slow API server).
	cleanupGate chan struct{}
}

func newFakeExec() *fakeExec {
	return &fakeExec{attempts: map[string]*executor.AttemptStatus{}, saved: map[string][]byte{}, cleaned: map[string]int{}, stateTokens: map[string]string{}, n: executor.NewNotifier()}
}

func (f *fakeExec) Start(_ context.Context, c *api.Claim, stateToken string) error {
	if c.DeploymentID == "bad" {
		return fmt.Errorf("%w: spec.containers[0].command: the command of \"main\" is set by the runner", executor.ErrInvalidJob)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts = append(f.starts, c.DeploymentID+" "+c.JobToken)
	f.stateTokens[c.DeploymentID] = stateToken
	if _, ok := f.attempts[c.DeploymentID]; ok {
		return nil // adopted, as the executors do
	}
	f.attempts[c.DeploymentID] = &executor.AttemptStatus{DeploymentID: c.DeploymentID, Attempt: c.Attempt, Fencing: c.Lease.Fencing, Status: api.StatusClaimed}
	return nil
}

func (f *fakeExec) List(context.Context) ([]executor.AttemptStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []executor.AttemptStatus
	for _, s := range f.attempts {
		c := *s
		c.PendingEvent = f.saved[s.DeploymentID]
		out = append(out, c)
	}
	return out, nil
}

func (f *fakeExec) Cancel(context.Context, string, int, time.Duration) error { return nil }
func (f *fakeExec) Cleanup(ctx context.Context, id string, _ int) error {
	if f.cleanupGate != nil {
		select {
		case <-f.cleanupGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.attempts, id)
	f.cleaned[id]++
	return nil
}
func (f *fakeExec) SavePendingEvent(_ context.Context, id string, _ int, r []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.saved[id] = r
	return nil
}
func (f *fakeExec) JobToken(context.Context, string, int) (string, error) {
	return "", executor.ErrNoToken
}
func (f *fakeExec) Changes() <-chan struct{} { return f.n.C() }

func (f *fakeExec) set(id string, mut func(*executor.AttemptStatus)) {
	f.mu.Lock()
	mut(f.attempts[id])
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

func TestSessionClaimsSendsEventsAndKeepsUndeliveredOnes(t *testing.T) {
	orch := &fakeOrch{max: 5, offers: []api.Offer{{DeploymentID: "a", Attempt: 1}, {DeploymentID: "b", Attempt: 1}}}
	ex := newFakeExec()
	s := New(Options{Client: orch, Executor: ex, Metrics: metrics.New("test"), Health: health.NewState(time.Second, nil),
		Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", MaxConcurrency: 3, PollWait: time.Second,
		EventBackoff: retry.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()

	waitFor(t, "two attempts started", func() bool { l, _ := ex.List(ctx); return len(l) == 2 })
	ex.mu.Lock()
	stateA, stateB := ex.stateTokens["a"], ex.stateTokens["b"]
	ex.mu.Unlock()
	if !strings.HasPrefix(stateA, jobtoken.StateTokenPrefix) || stateA == stateB {
		t.Fatalf("state credentials handed to the executor: %q and %q, want one per attempt", stateA, stateB)
	}
	if h, err := s.o.Tokens.Authorize(ctx, "a", stateA, "k/a"); err != nil || h.Holder != "job/a/1" {
		t.Errorf("claim of a not authorised with the state credential its Job got: %v", err)
	}
	for _, wrong := range []string{"opj_a", stateB} { // a's job token; b's state credential
		if _, err := s.o.Tokens.Authorize(ctx, "a", wrong, "k/a"); err == nil {
			t.Errorf("%q authorised for a's state", wrong)
		}
	}
	if _, err := s.o.Tokens.Authorize(ctx, "a", stateA, "k/b"); err == nil {
		t.Error("other state authorised")
	}
	// Capacity restated: min(orchestrator 5, configured 3) − 2 running.
	waitFor(t, "a poll restating both attempts", func() bool {
		orch.mu.Lock()
		defer orch.mu.Unlock()
		last := orch.polls[len(orch.polls)-1]
		return len(last.Held) == 2 && last.CapacityFree == 1 && last.Instance == "agent-0"
	})

	// A running attempt gets its started event and is left alone.
	ex.set("b", func(s *executor.AttemptStatus) { s.Started, s.Status = true, api.StatusRunning })
	waitFor(t, "b's started event", func() bool { orch.mu.Lock(); defer orch.mu.Unlock(); return len(orch.events["b"]) == 1 })
	time.Sleep(100 * time.Millisecond)
	ex.mu.Lock()
	if ex.cleaned["b"] != 0 || ex.attempts["b"] == nil {
		t.Error("a running attempt was cleaned up")
	}
	ex.mu.Unlock()

	orch.mu.Lock()
	orch.down = true
	orch.mu.Unlock()
	code := 2
	ex.set("a", func(s *executor.AttemptStatus) {
		s.Started, s.Status, s.ExitCode, s.Reason = true, api.StatusFailed, &code, executor.ReasonExitCode
		s.FinishedAt = time.Unix(1700000000, 0)
	})
	waitFor(t, "the undelivered finished event saved with the attempt", func() bool { ex.mu.Lock(); defer ex.mu.Unlock(); return ex.saved["a"] != nil })
	ex.mu.Lock()
	if ex.cleaned["a"] != 0 {
		t.Error("attempt cleaned up before its finished event was acknowledged")
	}
	ex.mu.Unlock()
	orch.mu.Lock()
	orch.down = false
	orch.mu.Unlock()
	waitFor(t, "attempt a cleaned after the finished event", func() bool { ex.mu.Lock(); defer ex.mu.Unlock(); return ex.cleaned["a"] == 1 })

	orch.mu.Lock()
	evs := orch.events["a"]
	orch.mu.Unlock()
	if len(evs) != 2 || evs[0].Seq != SeqStarted || evs[0].Type != api.EventStarted || evs[1].Seq != SeqFinished ||
		evs[1].Result != api.StatusFailed || *evs[1].ExitCode != 2 || evs[1].Fencing != 3 {
		t.Fatalf("events of a = %+v", evs)
	}
	if string(encodeEvent(evs[1])) != string(ex.saved["a"]) {
		t.Errorf("delivered finished event differs from the saved one:\n%s\n%s", encodeEvent(evs[1]), ex.saved["a"])
	}
	if _, err := s.o.Tokens.Authorize(ctx, "a", stateA, "k/a"); err == nil {
		t.Error("finished attempt still authorised")
	}

	// An attempt the executor refuses (bad pod template) ends failed, not retried or crashed on.
	orch.mu.Lock()
	orch.offers = []api.Offer{{DeploymentID: "bad", Attempt: 1}}
	orch.mu.Unlock()
	waitFor(t, "the refused attempt's finished event", func() bool { orch.mu.Lock(); defer orch.mu.Unlock(); return len(orch.events["bad"]) > 0 })
	orch.mu.Lock()
	bad := orch.events["bad"]
	orch.mu.Unlock()
	if len(bad) != 1 || bad[0].Type != api.EventFinished || bad[0].Result != api.StatusFailed || bad[0].Reason != executor.ReasonInvalidTemplate ||
		!strings.Contains(bad[0].Message, "is set by the runner") {
		t.Errorf("finished event of the refused attempt: %+v", bad)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestAttemptEndingCutsAPollAtCapacity: an agent at its capacity long-polls stating no slot free
// (the orchestrator then offers nothing, however long the queue). When its attempt's finished
// event is acknowledged, that poll is cut short and the next one states the free slot, instead of
// the queue waiting out the long poll.
func TestAttemptEndingCutsAPollAtCapacity(t *testing.T) {
	orch := &fakeOrch{max: 1, hold: time.Minute, offers: []api.Offer{{DeploymentID: "dep-a", Attempt: 1}}}
	ex := newFakeExec()
	s := New(Options{Client: orch, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", PollWait: 30 * time.Second})
	stop := run(t, s)
	waitFor(t, "the attempt started and a long poll with no slot free", func() bool {
		ex.mu.Lock()
		started := len(ex.starts) == 1
		ex.mu.Unlock()
		_, p := orch.lastPoll()
		return started && p.CapacityFree == 0 && p.WaitSeconds > 0
	})
	ex.set("dep-a", func(s *executor.AttemptStatus) { s.Started, s.Status = true, api.StatusSucceeded })
	waitFor(t, "a poll stating the free slot, before the held poll's minute is over", func() bool { _, p := orch.lastPoll(); return p.CapacityFree == 1 })
	stop()
}

// run runs the session until the returned stop is called.
func run(t *testing.T, s *Session) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// lastPoll returns how many polls came and the last one.
func (f *fakeOrch) lastPoll() (int, api.PollRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.polls) == 0 {
		return 0, api.PollRequest{}
	}
	return len(f.polls), f.polls[len(f.polls)-1]
}

// An attempt whose start is still in flight while the executor already lists it counts once, in
// the capacity stated and in the jobs_running gauge.
func TestStartingAttemptCountsOnce(t *testing.T) {
	ex := newFakeExec()
	s := New(Options{Client: &fakeOrch{}, Executor: ex, Logger: slog.New(slog.DiscardHandler), MaxConcurrency: 3})
	if err := ex.Start(t.Context(), &api.Claim{DeploymentID: "a", Attempt: 1}, "opst_a"); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.starting[executor.AttemptKey{DeploymentID: "a", Attempt: 1}] = true // claimAndStart has not returned yet
	s.starting[executor.AttemptKey{DeploymentID: "b", Attempt: 1}] = true // not listed yet: counts too
	s.orchMax, s.orchKnown = 5, true
	s.mu.Unlock()
	req, err := s.pollRequest(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if req.CapacityFree != 1 {
		t.Errorf("capacity free %d, want 3 − 2 attempts = 1", req.CapacityFree)
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

// TestMalformedAttemptDoesNotStopPolling: an attempt the executor lists but the orchestrator
// would refuse (an id that is no id, no fencing number) is left out of every poll, so the runner
// keeps polling and claiming; the good attempt is still restated.
func TestMalformedAttemptDoesNotStopPolling(t *testing.T) {
	orch := &fakeOrch{max: 5, offers: []api.Offer{{DeploymentID: "fresh", Attempt: 1}}, strict: true}
	ex := newFakeExec()
	ex.attempts["Not An ID!"] = &executor.AttemptStatus{DeploymentID: "Not An ID!", Attempt: 1, Fencing: 2, Status: api.StatusRunning}
	ex.attempts["no-fencing"] = &executor.AttemptStatus{DeploymentID: "no-fencing", Attempt: 1, Status: api.StatusRunning}
	ex.attempts["good"] = &executor.AttemptStatus{DeploymentID: "good", Attempt: 1, Fencing: 4, Status: api.StatusRunning}
	s := New(Options{Client: orch, Executor: ex, Metrics: metrics.New("test"), Health: health.NewState(time.Second, nil),
		Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", PollWait: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	waitFor(t, "the offered attempt claimed and started", func() bool { l, _ := ex.List(ctx); return len(l) == 4 })
	waitFor(t, "a poll restating the well-formed attempts", func() bool {
		orch.mu.Lock()
		defer orch.mu.Unlock()
		last := orch.polls[len(orch.polls)-1]
		var ids []string
		for _, h := range last.Held {
			ids = append(ids, h.DeploymentID)
		}
		return strings.Join(ids, ",") == "fresh,good" || strings.Join(ids, ",") == "good,fresh"
	})
	orch.mu.Lock()
	for _, p := range orch.polls {
		for _, h := range p.Held {
			if h.DeploymentID == "Not An ID!" || h.DeploymentID == "no-fencing" {
				t.Errorf("a poll restated the malformed attempt %q", h.DeploymentID)
			}
		}
	}
	orch.mu.Unlock()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// The session reports the number of attempts it may run at once (the runner's max_concurrency
// capped by the agent's own) when a poll first tells it and whenever it changes, and not on
// every poll.
func TestSessionReportsTheLimitWhenItChanges(t *testing.T) {
	orch := &fakeOrch{max: 40}
	var mu sync.Mutex
	var got []int
	s := New(Options{Client: orch, Executor: newFakeExec(), Metrics: metrics.New("test"), Health: health.NewState(time.Second, nil),
		Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", MaxConcurrency: 25, PollWait: time.Second,
		LimitChanged: func(n int) { mu.Lock(); got = append(got, n); mu.Unlock() }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	polls := func() int { orch.mu.Lock(); defer orch.mu.Unlock(); return len(orch.polls) }
	waitFor(t, "three polls", func() bool { return polls() >= 3 })
	orch.mu.Lock()
	orch.max = 10
	orch.mu.Unlock()
	after := polls()
	waitFor(t, "three more polls", func() bool { return polls() >= after+3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != 25 || got[1] != 10 {
		t.Errorf("limits reported %v, want [25 10]: the agent's cap of 25 under the runner's 40, then the runner's 10", got)
	}
}

// An attempt adopted without its job token stored (the agent stopped between creating the Job
// and its token Secret) is claimed again and started again, so the executor stores the token
// the job pod is waiting for; its status is left as it was.
func TestAdoptStoresARecoveredToken(t *testing.T) {
	orch := &fakeOrch{max: 5}
	ex := newFakeExec()
	ex.attempts["held"] = &executor.AttemptStatus{DeploymentID: "held", Attempt: 1, Fencing: 3, Status: api.StatusClaimed}
	s := New(Options{Client: orch, Executor: ex, Metrics: metrics.New("test"), Health: health.NewState(time.Second, nil),
		Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", PollWait: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	waitFor(t, "the first poll", func() bool { orch.mu.Lock(); defer orch.mu.Unlock(); return len(orch.polls) > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if len(ex.starts) != 1 || ex.starts[0] != "held opj_held" {
		t.Errorf("starts %q, want the adopted attempt started once with its re-claimed token", ex.starts)
	}
	if ex.attempts["held"].Status != api.StatusClaimed || ex.attempts["held"].Fencing != 3 {
		t.Errorf("the adopted attempt changed: %+v", ex.attempts["held"])
	}
	stateToken := s.o.Tokens.StateToken("held", 1, "opj_held")
	if ex.stateTokens["held"] != stateToken {
		t.Errorf("Start got state credential %q, want the one derived from the re-claimed token", ex.stateTokens["held"])
	}
	if _, err := s.o.Tokens.Authorize(context.Background(), "held", stateToken, "k/held"); err != nil {
		t.Errorf("the recovered attempt's state credential is not registered: %v", err)
	}
	if _, err := s.o.Tokens.Authorize(context.Background(), "held", "opj_held", "k/held"); err == nil {
		t.Error("the state backend accepts the job token of the recovered attempt; only its state credential may reach the state")
	}
}

// connRecorder records what the session tells a ConnectionRecorder.
type connRecorder struct {
	mu       sync.Mutex
	versions []string
	errs     []error
}

func (c *connRecorder) PollOK(v string) {
	c.mu.Lock()
	c.versions = append(c.versions, v)
	c.mu.Unlock()
}
func (c *connRecorder) PollFailed(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}
func (c *connRecorder) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.versions), len(c.errs)
}

// TestSessionTellsTheConnectionRecorder: every poll's outcome reaches the connection record,
// failures with their error and successes with the orchestrator's release.
func TestSessionTellsTheConnectionRecorder(t *testing.T) {
	refused := &api.Error{StatusCode: 401, Code: api.CodeUnauthorized, Message: "unknown key"}
	orch := &fakeOrch{max: 1, pollErr: refused}
	rec := &connRecorder{}
	s := New(Options{Client: orch, Executor: newFakeExec(), Connection: rec, Logger: slog.New(slog.DiscardHandler),
		Instance: "agent-0", PollWait: time.Second, PollBackoff: retry.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	waitFor(t, "two failed polls recorded", func() bool { _, n := rec.counts(); return n >= 2 })
	orch.mu.Lock()
	orch.pollErr = nil
	orch.mu.Unlock()
	waitFor(t, "a successful poll recorded", func() bool { n, _ := rec.counts(); return n >= 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !errors.Is(rec.errs[0], api.ErrUnauthorized) || rec.versions[0] != "9.9.9" {
		t.Errorf("recorded errors %v and versions %v", rec.errs, rec.versions)
	}
}

// queueOrch answers polls as the orchestrator does: an offer stays queued (and is offered again
// at once) until its claim is answered, and a poll with nothing queued is held until something
// is queued or the poll ends. Claims take claimFor.
type queueOrch struct {
	fakeOrch
	claimFor time.Duration
	queued   []api.Offer
	claims   []string
	// offered records each offer answered; repeats counts offers answered again.
	offered map[string]bool
	repeats int
	inClaim int
	wake    chan struct{}
}

func (q *queueOrch) queue(o api.Offer) {
	q.mu.Lock()
	q.queued = append(q.queued, o)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queueOrch) Poll(ctx context.Context, req api.PollRequest) (*api.PollResponse, error) {
	for {
		q.mu.Lock()
		offers := append([]api.Offer{}, q.queued[:min(len(q.queued), req.CapacityFree)]...)
		for _, o := range offers {
			if q.offered[o.DeploymentID] {
				q.repeats++
			}
			q.offered[o.DeploymentID] = true
		}
		q.mu.Unlock()
		if len(offers) > 0 || req.WaitSeconds == 0 {
			return &api.PollResponse{Offers: offers, MaxConcurrency: 10}, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-q.wake:
		}
	}
}

func (q *queueOrch) Claim(ctx context.Context, deploymentID string, req api.ClaimRequest) (*api.Claim, error) {
	q.mu.Lock()
	q.inClaim++
	q.mu.Unlock()
	time.Sleep(q.claimFor)
	q.mu.Lock()
	q.inClaim--
	q.claims = append(q.claims, deploymentID)
	q.queued = slices.DeleteFunc(q.queued, func(o api.Offer) bool { return o.DeploymentID == deploymentID })
	q.mu.Unlock()
	return q.fakeOrch.Claim(ctx, deploymentID, req)
}

// TestNoPollWhileAClaimIsInFlight: after taking an offer the agent polls again as soon as the
// claim is answered, not before (the orchestrator would answer at once with the same offer, and
// the agent would then wait out its gap, delaying whatever was queued meanwhile) and not after a
// fixed gap. An offer queued while the claim is in flight is taken by the very next poll.
func TestNoPollWhileAClaimIsInFlight(t *testing.T) {
	q := &queueOrch{claimFor: 100 * time.Millisecond, wake: make(chan struct{}, 1), offered: map[string]bool{}}
	ex := newFakeExec()
	s := New(Options{Client: q, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", PollWait: 30 * time.Second})
	stop := run(t, s)
	claims := func() []string {
		q.mu.Lock()
		defer q.mu.Unlock()
		return slices.Clone(q.claims)
	}
	for i, id := range []string{"dep-a", "dep-b", "dep-c"} {
		q.queue(api.Offer{DeploymentID: id, Attempt: 1, Operation: api.OperationPlan})
		if i == 1 {
			// Queued while dep-b's claim is in flight: the next poll takes it.
			waitFor(t, "dep-b's claim in flight", func() bool { q.mu.Lock(); defer q.mu.Unlock(); return q.inClaim > 0 })
			q.queue(api.Offer{DeploymentID: "dep-b2", Attempt: 1, Operation: api.OperationPlan})
		}
		waitFor(t, id+" claimed", func() bool { return slices.Contains(claims(), id) })
	}
	waitFor(t, "dep-b2 claimed", func() bool { return slices.Contains(claims(), "dep-b2") })
	stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.repeats != 0 {
		t.Errorf("%d offers were answered again to a poll sent while their claim was in flight; want none", q.repeats)
	}
	if want := []string{"dep-a", "dep-b", "dep-b2", "dep-c"}; !slices.Equal(q.claims, want) {
		t.Errorf("claims %v, want %v, each once", q.claims, want)
	}
}

// An attempt ending does not cut a long poll that stated a free slot: the orchestrator answers
// that poll itself as soon as it has an offer, and a cut costs a new request (and connection).
func TestAttemptEndingLeavesAPollWithAFreeSlot(t *testing.T) {
	orch := &fakeOrch{max: 2, hold: time.Minute, offers: []api.Offer{{DeploymentID: "dep-a", Attempt: 1}}}
	ex := newFakeExec()
	s := New(Options{Client: orch, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", PollWait: 30 * time.Second})
	stop := run(t, s)
	polls := orch.lastPoll
	waitFor(t, "the attempt started and a long poll with one slot free", func() bool {
		ex.mu.Lock()
		started := len(ex.starts) == 1
		ex.mu.Unlock()
		_, p := polls()
		return started && p.CapacityFree == 1 && p.WaitSeconds > 0
	})
	before, _ := polls()
	ex.set("dep-a", func(s *executor.AttemptStatus) { s.Started, s.Status = true, api.StatusSucceeded })
	waitFor(t, "the finished event acknowledged", func() bool {
		orch.mu.Lock()
		defer orch.mu.Unlock()
		for _, ev := range orch.events["dep-a"] {
			if ev.Type == api.EventFinished {
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond) // a cut poll would be followed by a new one at once
	if after, _ := polls(); after != before {
		t.Errorf("%d polls after the attempt ended, want the one in flight (%d) left alone", after, before)
	}
	stop()
}

// directiveOrch answers every poll at once with the directives of its script, one answer after
// the other (the last one over and over).
type directiveOrch struct {
	fakeOrch
	script [][]api.Directive
	times  []time.Time
}

func (d *directiveOrch) Poll(ctx context.Context, req api.PollRequest) (*api.PollResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.times = append(d.times, time.Now())
	ds := d.script[min(len(d.times), len(d.script))-1]
	return &api.PollResponse{Directives: ds, MaxConcurrency: 1}, nil
}

// An answer with a directive not in the answer before is followed by the next poll at once (the
// agent has acted on it, so the next answer differs); a directive repeated waits out the gap.
func TestNewDirectivesAreNotFollowedByTheGap(t *testing.T) {
	forget := func(id string) api.Directive {
		return api.Directive{Type: api.DirectiveForget, DeploymentID: id, Attempt: 1, Reason: "terminal"}
	}
	orch := &directiveOrch{script: [][]api.Directive{{forget("dep-a")}, {forget("dep-b")}, {forget("dep-b")}}}
	s := New(Options{Client: orch, Executor: newFakeExec(), Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", PollGap: time.Hour})
	stop := run(t, s)
	waitFor(t, "three polls", func() bool { orch.mu.Lock(); defer orch.mu.Unlock(); return len(orch.times) >= 3 })
	time.Sleep(200 * time.Millisecond) // a fourth poll would follow the repeated directive at once
	stop()
	orch.mu.Lock()
	defer orch.mu.Unlock()
	if len(orch.times) != 3 {
		t.Errorf("%d polls; want 3: two after new directives at once, then the gap (an hour here) after the repeated one", len(orch.times))
	}
}

// A forgotten attempt (acknowledged by a forget directive) whose Job runs and whose started event
// was never sent gets no event, only its cleanup: the orchestrator refuses events of an attempt
// it forgot, and a refusal would leave the Job running.
func TestNoEventsForAForgottenAttempt(t *testing.T) {
	orch := &fakeOrch{}
	s := New(Options{Client: orch, Executor: newFakeExec(), Logger: slog.New(slog.DiscardHandler), Instance: "agent-0"})
	att := &attemptState{acked: true, fencing: 1}
	st := executor.AttemptStatus{DeploymentID: "dep-a", Attempt: 1, Fencing: 1, Started: true, Status: api.StatusRunning}
	clean, err := s.send(t.Context(), att, st, s.log)
	if err != nil || !clean {
		t.Errorf("send: clean %v, err %v; want the cleanup next", clean, err)
	}
	if evs := orch.events["dep-a"]; len(evs) != 0 {
		t.Errorf("events sent for a forgotten attempt: %+v", evs)
	}
}

// A forget directive does not hold up the poll loop while the attempt's cleanup waits (here on a
// gate; in a cluster, at the client's rate limit, where cleanups give way to starts).
func TestForgetDoesNotHoldUpThePollLoop(t *testing.T) {
	ex := newFakeExec()
	ex.cleanupGate = make(chan struct{})
	if err := ex.Start(t.Context(), &api.Claim{DeploymentID: "dep-a", Attempt: 1, Lease: api.Lease{Fencing: 1}}, "opst_a"); err != nil {
		t.Fatal(err)
	}
	forget := api.Directive{Type: api.DirectiveForget, DeploymentID: "dep-a", Attempt: 1, Reason: "terminal"}
	orch := &directiveOrch{script: [][]api.Directive{{forget}, nil}}
	s := New(Options{Client: orch, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", PollGap: 10 * time.Millisecond})
	stop := run(t, s)
	waitFor(t, "polls going on while the forgotten attempt's cleanup waits", func() bool {
		orch.mu.Lock()
		defer orch.mu.Unlock()
		return len(orch.times) >= 5
	})
	ex.mu.Lock()
	cleaned := ex.cleaned["dep-a"]
	ex.mu.Unlock()
	if cleaned != 0 {
		t.Fatalf("cleaned %d times through a closed gate", cleaned)
	}
	close(ex.cleanupGate)
	waitFor(t, "the forgotten attempt cleaned up", func() bool { ex.mu.Lock(); defer ex.mu.Unlock(); return ex.cleaned["dep-a"] == 1 })
	stop()
}

// Cleanups do not hold the event-sending slots: with every cleanup stuck (a slow API server),
// the finished events of more attempts than there are slots are still all delivered.
func TestFinishedEventsDoNotWaitForCleanups(t *testing.T) {
	const n = maxConcurrentSends + 4
	ex := newFakeExec()
	ex.cleanupGate = make(chan struct{})
	for i := range n {
		id := fmt.Sprintf("dep-%d", i)
		if err := ex.Start(t.Context(), &api.Claim{DeploymentID: id, Attempt: 1, Lease: api.Lease{Fencing: 1}}, "opst_"+id); err != nil {
			t.Fatal(err)
		}
		ex.set(id, func(s *executor.AttemptStatus) { s.Started, s.Status, s.Fencing = true, api.StatusSucceeded, 1 })
	}
	orch := &fakeOrch{}
	s := New(Options{Client: orch, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0"})
	stop := run(t, s)
	waitFor(t, fmt.Sprintf("the finished events of all %d attempts, their cleanups stuck", n), func() bool { return finishedEvents(orch) == n })
	close(ex.cleanupGate)
	stop()
}

// TestALateJobIsAdopted: a Job that appears after the term began (the previous leader created it
// while it stepped down) gets its grant registered before the next poll, so its job runner's
// state requests are admitted; while a term takes over, an unknown credential is "retry", not
// "refused".
func TestALateJobIsAdopted(t *testing.T) {
	orch := &fakeOrch{max: 5}
	ex := newFakeExec()
	tokens := jobtoken.New(nil)
	s := New(Options{Client: orch, Executor: ex, Tokens: tokens, Metrics: metrics.New("test"), Health: health.NewState(time.Second, nil),
		Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", PollWait: 100 * time.Millisecond})
	tokens.Adopting() // as the agent does when it becomes the leader
	if _, err := tokens.Authorize(t.Context(), "late", "opst_x", "k/late"); !errors.Is(err, jobtoken.ErrAdopting) {
		t.Fatalf("an unknown credential while taking over: %v, want ErrAdopting", err)
	}
	defer run(t, s)()
	waitFor(t, "the first poll", func() bool { orch.mu.Lock(); defer orch.mu.Unlock(); return len(orch.polls) > 0 })
	if _, err := tokens.Authorize(t.Context(), "late", "opst_x", "k/late"); !errors.Is(err, jobtoken.ErrUnauthenticated) {
		t.Fatalf("an unknown credential once the term took over: %v, want ErrUnauthenticated", err)
	}

	ex.mu.Lock()
	ex.attempts["late"] = &executor.AttemptStatus{DeploymentID: "late", Attempt: 1, Fencing: 2, Status: api.StatusClaimed}
	ex.mu.Unlock()
	ex.n.Notify()
	waitFor(t, "the late Job's grant", func() bool { return tokens.Has("late", 1) })
	if _, err := tokens.Authorize(t.Context(), "late", s.o.Tokens.StateToken("late", 1, "opj_late"), "k/late"); err != nil {
		t.Fatalf("the late Job's state credential: %v", err)
	}
}

// An agent that serves no state backend refuses the attempts whose state storage is kubernetes
// (failed, reason no_state_backend, the reason it was given) without starting them, and starts
// the others.
func TestAgentWithoutStateBackendRefusesKubernetesState(t *testing.T) {
	orch := &fakeOrch{max: 5, offers: []api.Offer{{DeploymentID: "in-cluster", Attempt: 1}, {DeploymentID: "in-s3", Attempt: 1}},
		storage: map[string]string{"in-cluster": api.StateStorageKubernetes, "in-s3": api.StateStorageS3}}
	ex := newFakeExec()
	s := New(Options{Client: orch, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", PollWait: time.Second,
		NoStateBackend: "give it one with --kubeconfig"})
	stop := run(t, s)
	defer stop()
	waitFor(t, "the refusal of in-cluster", func() bool { orch.mu.Lock(); defer orch.mu.Unlock(); return len(orch.events["in-cluster"]) == 1 })
	orch.mu.Lock()
	ev := orch.events["in-cluster"][0].Event
	orch.mu.Unlock()
	if ev.Type != api.EventFinished || ev.Result != api.StatusFailed || ev.Reason != executor.ReasonNoStateBackend ||
		!strings.Contains(ev.Message, "give it one with --kubeconfig") {
		t.Errorf("event of the kubernetes-state attempt: %+v", ev)
	}
	waitFor(t, "in-s3 started", func() bool { l, _ := ex.List(context.Background()); return len(l) == 1 })
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if len(ex.starts) != 1 || !strings.HasPrefix(ex.starts[0], "in-s3") {
		t.Errorf("starts %v, want only in-s3", ex.starts)
	}
}

// stalePlans is a PlanChecker that finds every saved plan but "fresh" stale.
type stalePlans struct{}

type staleErr struct{}

func (staleErr) Error() string             { return "the state moved since the plan" }
func (staleErr) RefusalReason() api.Reason { return api.ReasonStalePlan }
func (stalePlans) CheckPlan(_ context.Context, _, _ string, ref api.PlanRef) error {
	if ref.DeploymentID == "fresh" {
		return nil
	}
	return staleErr{}
}

// The apply of a saved plan whose state moved is refused at the claim, before the executor
// creates anything: its finished event says failed with reason stale_plan. The apply of a plan
// the check passes starts.
func TestStalePlanRefusedBeforeStart(t *testing.T) {
	orch := &fakeOrch{max: 5, offers: []api.Offer{{DeploymentID: "stale", Attempt: 1}, {DeploymentID: "ok", Attempt: 1}},
		storage:   map[string]string{"stale": api.StateStorageKubernetes, "ok": api.StateStorageKubernetes},
		applyPlan: map[string]*api.PlanRef{"stale": {DeploymentID: "old"}, "ok": {DeploymentID: "fresh"}}}
	ex := newFakeExec()
	s := New(Options{Client: orch, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", PollWait: time.Second, Plans: stalePlans{}})
	stop := run(t, s)
	defer stop()
	waitFor(t, "the refusal of stale", func() bool { orch.mu.Lock(); defer orch.mu.Unlock(); return len(orch.events["stale"]) == 1 })
	orch.mu.Lock()
	ev := orch.events["stale"][0].Event
	orch.mu.Unlock()
	if ev.Type != api.EventFinished || ev.Result != api.StatusFailed || ev.Reason != api.ReasonStalePlan || !strings.Contains(ev.Message, "the state moved") {
		t.Errorf("event of the stale plan's apply: %+v", ev)
	}
	waitFor(t, "ok started", func() bool { l, _ := ex.List(context.Background()); return len(l) == 1 })
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if len(ex.starts) != 1 || !strings.HasPrefix(ex.starts[0], "ok") {
		t.Errorf("starts %v, want only ok", ex.starts)
	}
}

// refusingOrch refuses every event for good (a stale fencing number) and, once it has refused
// one, answers polls with a forget directive for that attempt, as the orchestrator does for an
// attempt it no longer assigns to the agent.
type refusingOrch struct {
	fakeOrch
	refused int
}

func (r *refusingOrch) Event(context.Context, string, api.EventRequest) (*api.EventResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused++
	return nil, &api.Error{StatusCode: 409, Code: api.CodeConflict, Message: "stale fencing number"}
}

func (r *refusingOrch) Poll(ctx context.Context, _ api.PollRequest) (*api.PollResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	resp := &api.PollResponse{MaxConcurrency: 1}
	if r.refused > 0 {
		resp.Directives = []api.Directive{{Type: api.DirectiveForget, DeploymentID: "dep-a", Attempt: 1, Reason: "terminal"}}
	}
	return resp, nil
}

// An attempt whose event the orchestrator refused waits for its forget directive, and is then
// cleaned up: a refusal must not leave its Job behind for good.
func TestARefusedAttemptIsCleanedUpWhenForgotten(t *testing.T) {
	ex := newFakeExec()
	if err := ex.Start(t.Context(), &api.Claim{DeploymentID: "dep-a", Attempt: 1, Lease: api.Lease{Fencing: 1}}, "opst_a"); err != nil {
		t.Fatal(err)
	}
	ex.set("dep-a", func(s *executor.AttemptStatus) { s.Started, s.Status, s.Fencing = true, api.StatusSucceeded, 1 })
	orch := &refusingOrch{}
	s := New(Options{Client: orch, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", PollGap: 10 * time.Millisecond})
	stop := run(t, s)
	waitFor(t, "the refused and forgotten attempt cleaned up", func() bool { ex.mu.Lock(); defer ex.mu.Unlock(); return ex.cleaned["dep-a"] == 1 })
	stop()
}

// TestAClaimedAttemptIsNotStartedAgainWhenReoffered: the orchestrator re-offers an attempt its
// holder did not restate in a poll (as an offer, or from agent protocol 7 as a claim in the
// answer); the session that claimed it does not claim and start it a second time. Found in a fresh-clone make test: an attempt whose pod could not pull its image
// was started again between its finished event and the acknowledgement.
func TestAClaimedAttemptIsNotStartedAgainWhenReoffered(t *testing.T) {
	ex := newFakeExec()
	s := New(Options{Client: &fakeOrch{}, Executor: ex, Logger: slog.New(slog.DiscardHandler), MaxConcurrency: 3})
	offer := api.Offer{DeploymentID: "dep-a", Attempt: 1, Operation: api.OperationApply}
	var wg sync.WaitGroup
	if taken, _ := s.offers(t.Context(), &wg, []api.Offer{offer}, 3); taken != 1 {
		t.Fatalf("the first offer was not taken (%d)", taken)
	}
	wg.Wait()
	// The executor lets go of the attempt as after a startup failure: it is no longer listed,
	// and the poll no longer restates it.
	ex.mu.Lock()
	delete(ex.attempts, "dep-a")
	ex.mu.Unlock()
	taken, repeated := s.offers(t.Context(), &wg, []api.Offer{offer}, 3)
	wg.Wait()
	if taken != 0 || !repeated {
		t.Errorf("the re-offer was taken (%d, repeated %v)", taken, repeated)
	}
	// From agent protocol 7 the re-offer comes claimed, in the poll answer: not started either.
	again, _ := (&fakeOrch{}).Claim(t.Context(), offer.DeploymentID, api.ClaimRequest{Attempt: offer.Attempt})
	taken, repeated = s.claimed(t.Context(), &wg, []api.Claim{*again}, 3)
	wg.Wait()
	if taken != 0 || !repeated {
		t.Errorf("the claim handed out again was taken (%d, repeated %v)", taken, repeated)
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if len(ex.starts) != 1 {
		t.Errorf("the attempt was started %d times (%v), want once", len(ex.starts), ex.starts)
	}
}

// stateOpsOrch answers every poll at once with a state operation.
type stateOpsOrch struct{ fakeOrch }

func (o *stateOpsOrch) Poll(ctx context.Context, req api.PollRequest) (*api.PollResponse, error) {
	return &api.PollResponse{MaxConcurrency: 1, Protocol: api.ProtocolStateOperations,
		StateOperations: []api.StateOperationOffer{{ID: "sop-a", Namespace: "states", StateKey: "k", StateOperationInput: api.StateOperationInput{Kind: api.StateOperationShow}}}}, nil
}

type offeredOps struct {
	mu  sync.Mutex
	ids []string
}

func (o *offeredOps) Offered(_ context.Context, ops []api.StateOperationOffer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, op := range ops {
		o.ids = append(o.ids, op.ID)
	}
}

// The state operations of a poll answer go to Options.StateOperations (the state backend runs
// them); a session without one ignores them.
func TestStateOperationsAreHandedOver(t *testing.T) {
	ops := &offeredOps{}
	s := New(Options{Client: &stateOpsOrch{}, Executor: newFakeExec(), Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", StateOperations: ops, PollGap: 10 * time.Millisecond})
	stop := run(t, s)
	waitFor(t, "the state operation handed over", func() bool { ops.mu.Lock(); defer ops.mu.Unlock(); return len(ops.ids) > 0 && ops.ids[0] == "sop-a" })
	stop()
	s = New(Options{Client: &stateOpsOrch{}, Executor: newFakeExec(), Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", PollGap: 10 * time.Millisecond})
	stop = run(t, s)
	time.Sleep(50 * time.Millisecond)
	stop()
}
