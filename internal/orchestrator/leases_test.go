package orchestrator

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// holding is the held list entry of a claimed attempt.
func holding(c api.Claim, started bool) api.HeldAttempt {
	return api.HeldAttempt{DeploymentID: c.DeploymentID, Attempt: c.Attempt, Fencing: c.Lease.Fencing, Started: started}
}

func TestLeaseExpiryRules(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 5)
	claimedPlan := h.deploy(api.OperationPlan)
	runningApply := h.deploy(api.OperationApply)
	runningPlan := h.deploy(api.OperationPlan)
	runningDestroy := h.deploy(api.OperationDestroy)
	renewed := h.deploy(api.OperationApply)

	c1 := a.claim(claimedPlan.ID, 1, "pod-a")
	c2 := a.claim(runningApply.ID, 1, "pod-a")
	c3 := a.claim(runningPlan.ID, 1, "pod-a")
	c4 := a.claim(runningDestroy.ID, 1, "pod-a")
	c5 := a.claim(renewed.ID, 1, "pod-a")
	if c1.Lease.Fencing != 1 || !c1.Lease.ExpiresAt.Equal(h.clock.Now().Add(DefaultLeaseDuration)) {
		t.Fatalf("lease %+v, want fencing 1 expiring in %s", c1.Lease, DefaultLeaseDuration)
	}
	// Apply, plan and destroy started (one through the poll, two through events).
	a.poll(api.PollRequest{Instance: "pod-a", Held: []api.HeldAttempt{holding(c1, false), holding(c2, true), holding(c3, false), holding(c4, false), holding(c5, true)}})
	for _, c := range []api.Claim{c3, c4} {
		if r := a.event(c.DeploymentID, api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventStarted}}); r.code != http.StatusOK {
			t.Fatalf("started event: HTTP %d %s", r.code, r.body)
		}
	}
	if d := h.deployment(runningApply.ID); d.Status != api.StatusRunning || d.StartedAt == nil {
		t.Fatalf("apply after a poll with started=true: %+v", d)
	}

	// 60 s later only the renewed job is restated; 60 s after that every other lease is over.
	h.clock.Advance(60 * time.Second)
	a.poll(api.PollRequest{Instance: "pod-a", Held: []api.HeldAttempt{holding(c5, true)}})
	h.clock.Advance(60 * time.Second)
	h.sweep()

	want := map[string]struct {
		status  api.Status
		attempt int
		reason  string
	}{
		claimedPlan.ID:    {api.StatusQueued, 2, "lease_expired"},
		runningApply.ID:   {api.StatusLost, 1, "lease_expired"},
		runningPlan.ID:    {api.StatusQueued, 2, "lease_expired"},
		runningDestroy.ID: {api.StatusLost, 1, "lease_expired"},
		renewed.ID:        {api.StatusRunning, 1, ""},
	}
	for id, w := range want {
		d := h.deployment(id)
		if d.Status != w.status || d.Attempt != w.attempt || string(d.Reason) != w.reason {
			t.Errorf("%s (%s): status %s attempt %d reason %q; want %s, %d, %q", id, d.Operation, d.Status, d.Attempt, d.Reason, w.status, w.attempt, w.reason)
		}
		if w.status == api.StatusLost && d.FinishedAt == nil {
			t.Errorf("%s lost without finished_at", id)
		}
	}

	// The old grant of a requeued job is stale everywhere: events, logs, claims of attempt 1.
	if r := a.event(c1.DeploymentID, api.EventRequest{Fencing: 1, Event: api.Event{Attempt: 1, Seq: 2, Type: api.EventStarted}}); r.code != http.StatusConflict || r.err(t).Code != api.CodeStaleFencing {
		t.Fatalf("event of the expired attempt: HTTP %d %s, want 409 stale_fencing", r.code, r.body)
	}
	if r := h.appendLog(c1.JobToken, 0, "x"); r.code != http.StatusConflict || r.err(t).Code != api.CodeStaleFencing {
		t.Fatalf("log with the old job token: HTTP %d %s, want 409 stale_fencing", r.code, r.body)
	}
	if r := a.post("/api/v1/agent/deployments/"+c1.DeploymentID+"/claim", api.ClaimRequest{Attempt: 1, Instance: "pod-a"}); r.code != http.StatusConflict {
		t.Fatalf("claim of attempt 1 after requeue: HTTP %d, want 409", r.code)
	}
	// Restating the lost and requeued jobs gets forget directives.
	resp := a.poll(api.PollRequest{Instance: "pod-a", CapacityFree: 2, Held: []api.HeldAttempt{holding(c1, false), holding(c2, true), holding(c5, true)}})
	forgets := map[string]string{}
	for _, d := range resp.Directives {
		if d.Type == api.DirectiveForget {
			forgets[d.DeploymentID] = d.Reason
		}
	}
	if forgets[c1.DeploymentID] != store.ReasonLeaseLost || forgets[c2.DeploymentID] != store.ReasonTerminal || len(forgets) != 2 {
		t.Fatalf("forget directives %v; want %s lease_lost and %s terminal only", forgets, c1.DeploymentID, c2.DeploymentID)
	}
	// Attempt 2 is offered again (oldest first) and gets a new, higher fencing number.
	if len(resp.Offers) == 0 || resp.Offers[0].DeploymentID != claimedPlan.ID || resp.Offers[0].Attempt != 2 {
		t.Fatalf("offers %+v, want %s attempt 2 first", resp.Offers, claimedPlan.ID)
	}
	c1b := a.claim(c1.DeploymentID, 2, "pod-b")
	if c1b.Lease.Fencing != 2 || c1b.JobToken == c1.JobToken {
		t.Fatalf("re-claim: fencing %d (want 2), token reused: %v", c1b.Lease.Fencing, c1b.JobToken == c1.JobToken)
	}
	// A late event of the lost apply is refused: its attempt ended, and it does not revive it.
	before := everything(h)
	r := a.event(c2.DeploymentID, api.EventRequest{Fencing: 1, Event: api.Event{Attempt: 1, Seq: 9, Type: api.EventFinished, Result: api.StatusSucceeded}})
	if r.code != http.StatusConflict || !strings.Contains(r.err(t).Message, "already ended with status lost") {
		t.Fatalf("late finished event of a lost apply: HTTP %d %s, want 409", r.code, r.body)
	}
	if after := everything(h); after != before {
		t.Fatalf("the refused late event changed stored state:\nbefore %s\nafter  %s", before, after)
	}
}

// Leases settle in the transaction that next touches the job, whether or not the sweeper ran.
func TestExpiredLeaseSettlesWithoutSweeper(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	d := h.deploy(api.OperationPlan)
	c := a.claim(d.ID, 1, "pod-a")
	h.clock.Advance(DefaultLeaseDuration + time.Second)
	// The same instance cannot extend an expired lease by re-claiming: the job went back.
	if r := a.post("/api/v1/agent/deployments/"+d.ID+"/claim", api.ClaimRequest{Attempt: 1, Instance: "pod-a"}); r.code != http.StatusConflict {
		t.Fatalf("re-claim after expiry: HTTP %d %s, want 409", r.code, r.body)
	}
	if got := h.deployment(d.ID); got.Status != api.StatusQueued || got.Attempt != 2 {
		t.Fatalf("after expiry: %s attempt %d", got.Status, got.Attempt)
	}
	if c2 := a.claim(d.ID, 2, "pod-a"); c2.Lease.Fencing != c.Lease.Fencing+1 {
		t.Fatalf("fencing %d after %d", c2.Lease.Fencing, c.Lease.Fencing)
	}
}

func TestSweeperRunsInBackground(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *testConfig) {
		c.SweepInterval = 20 * time.Millisecond
		c.LeaseDuration = time.Second
	})
	a := h.setupRunner("acme", "r1", 1)
	d := h.deploy(api.OperationPlan)
	a.claim(d.ID, 1, "pod-a")
	h.clock.Advance(2 * time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for h.deployment(d.ID).Attempt != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the background sweeper did not requeue the expired claim")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
