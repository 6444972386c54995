package orchestrator

import (
	"context"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

func offerIDs(offers []api.Offer) []string {
	var ids []string
	for _, o := range offers {
		ids = append(ids, o.DeploymentID)
	}
	return ids
}

// waitPolling waits until a poll of runner r1 of acme is held by the server.
func waitPolling(t *testing.T, h *harness, done <-chan result) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !h.srv.notify.Polling("acme/r1") {
		select {
		case r := <-done:
			t.Fatalf("poll ended before it was held: HTTP %d %s %v", r.code, r.body, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("poll never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestOffersGoOnlyToTheirRunner(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	mine := h.setupRunner("acme", "r1", 3)
	sibling := h.setupRunner("acme", "r2", 3)
	// Same runner id in another organisation.
	foreign := h.setupRunner("other", "r1", 3)
	var ids []string
	for range 4 {
		ids = append(ids, h.deploy(api.OperationPlan).ID)
	}
	for _, a := range []*agent{sibling, foreign} {
		if resp := a.poll(api.PollRequest{CapacityFree: 5}); len(resp.Offers) != 0 {
			t.Fatalf("%s/%s was offered %v", a.org, a.runner, offerIDs(resp.Offers))
		}
	}
	resp := mine.poll(api.PollRequest{CapacityFree: 2})
	if got := offerIDs(resp.Offers); !slices.Equal(got, ids[:2]) {
		t.Fatalf("offers %v, want the two oldest %v", got, ids[:2])
	}
	if resp.MaxConcurrency != 3 || resp.ServerTime.IsZero() {
		t.Fatalf("poll response %+v", resp)
	}
	// Claims of another runner's job are 404, so nothing leaks across runners or orgs.
	for _, a := range []*agent{sibling, foreign} {
		if r := a.post("/api/v1/agent/deployments/"+ids[0]+"/claim", api.ClaimRequest{Attempt: 1, Instance: "x"}); r.code != http.StatusNotFound {
			t.Fatalf("%s/%s claiming r1's job: HTTP %d, want 404", a.org, a.runner, r.code)
		}
	}
	// max_concurrency counts the jobs already held: 3 - 2 held = 1 more, whatever capacity_free says.
	c0, c1 := mine.claim(ids[0], 1, "pod"), mine.claim(ids[1], 1, "pod")
	resp = mine.poll(api.PollRequest{CapacityFree: 5, Held: []api.HeldAttempt{holding(c0, false), holding(c1, false)}})
	if got := offerIDs(resp.Offers); !slices.Equal(got, ids[2:3]) {
		t.Fatalf("offers with 2 of 3 slots held: %v, want %v", got, ids[2:3])
	}
	mine.claim(ids[2], 1, "pod")
	if r := mine.post("/api/v1/agent/deployments/"+ids[3]+"/claim", api.ClaimRequest{Attempt: 1, Instance: "pod"}); r.code != http.StatusConflict {
		t.Fatalf("claim beyond max_concurrency: HTTP %d, want 409", r.code)
	}
}

func TestClaimIsIdempotentAndExclusive(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 2)
	d := h.deploy(api.OperationApply)

	// Two instances race for the same attempt: exactly one wins.
	path := "/api/v1/agent/deployments/" + d.ID + "/claim"
	racing := []<-chan result{
		a.goPost(path, api.ClaimRequest{Attempt: 1, Instance: "pod-a"}),
		a.goPost(path, api.ClaimRequest{Attempt: 1, Instance: "pod-b"}),
	}
	codes := make([]int, 2)
	claims := make([]api.Claim, 2)
	for i, ch := range racing {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		codes[i] = r.code
		if r.code == http.StatusOK {
			r.decode(t, &claims[i])
		}
	}
	slices.Sort(codes)
	if !slices.Equal(codes, []int{http.StatusOK, http.StatusConflict}) {
		t.Fatalf("racing claims got %v, want one 200 and one 409", codes)
	}
	winner, inst := claims[0], "pod-a"
	if winner.JobToken == "" {
		winner, inst = claims[1], "pod-b"
	}
	// The winner's retry returns the same grant and the same token.
	again := a.claim(d.ID, 1, inst)
	if again.Lease.Fencing != winner.Lease.Fencing || again.JobToken != winner.JobToken {
		t.Fatalf("re-claim changed the grant: fencing %d→%d, same token %v", winner.Lease.Fencing, again.Lease.Fencing, again.JobToken == winner.JobToken)
	}
	if got := h.deployment(d.ID); got.Status != api.StatusClaimed || got.ClaimedAt == nil {
		t.Fatalf("after claim: %+v", got)
	}
	if r := a.post("/api/v1/agent/deployments/"+d.ID+"/claim", api.ClaimRequest{Attempt: 2, Instance: inst}); r.code != http.StatusConflict {
		t.Fatalf("claim of a wrong attempt: HTTP %d, want 409", r.code)
	}
	if r := a.post("/api/v1/agent/deployments/"+d.ID+"/claim", api.ClaimRequest{Attempt: 1}); r.code != http.StatusBadRequest || r.err(t).Field != "instance" {
		t.Fatalf("claim without instance: HTTP %d %s", r.code, r.body)
	}
}

func TestEventsAreIdempotentAndFenced(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	d := h.deploy(api.OperationApply)
	c := a.claim(d.ID, 1, "pod-a")
	started := api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventStarted, Message: "pod started"}}
	for range 2 {
		var resp api.EventResponse
		a.mustOK("/api/v1/agent/deployments/"+d.ID+"/events", started, &resp)
		if resp.Status != api.StatusRunning {
			t.Fatalf("status after started: %s", resp.Status)
		}
	}
	exit := 0
	finished := api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 2, Type: api.EventFinished, Result: api.StatusSucceeded, ExitCode: &exit}}
	for range 2 {
		var resp api.EventResponse
		a.mustOK("/api/v1/agent/deployments/"+d.ID+"/events", finished, &resp)
		if resp.Status != api.StatusSucceeded {
			t.Fatalf("status after finished: %s", resp.Status)
		}
	}
	var events api.List[api.Event]
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments/"+d.ID+"/events", nil, http.StatusOK, &events)
	if len(events.Items) != 3 || events.Items[0].Step != api.StepClaimed || events.Items[1].Type != api.EventStarted || events.Items[2].Result != api.StatusSucceeded {
		t.Fatalf("events %+v, want the claim, then started and finished once each", events.Items)
	}
	got := h.deployment(d.ID)
	if got.Status != api.StatusSucceeded || got.ExitCode == nil || *got.ExitCode != 0 || got.FinishedAt == nil {
		t.Fatalf("deployment %+v", got)
	}
	// The lease is released: the slot is free for the next job.
	next := h.deploy(api.OperationPlan)
	if resp := a.poll(api.PollRequest{CapacityFree: 1}); !slices.Equal(offerIDs(resp.Offers), []string{next.ID}) {
		t.Fatalf("offers after finishing %v", offerIDs(resp.Offers))
	}

	bad := []struct {
		req   api.EventRequest
		field string
	}{
		{api.EventRequest{Fencing: 1, Event: api.Event{Attempt: 1, Seq: 9, Type: "exploded"}}, "type"},
		{api.EventRequest{Fencing: 1, Event: api.Event{Attempt: 1, Seq: 9, Type: api.EventFinished, Result: "done"}}, "result"},
		{api.EventRequest{Fencing: 1, Event: api.Event{Attempt: 0, Seq: 9, Type: api.EventProgress}}, "attempt"},
		{api.EventRequest{Fencing: 7, Event: api.Event{Attempt: 1, Seq: 9, Type: api.EventProgress}}, "fencing"},
		{api.EventRequest{Fencing: 1, Event: api.Event{Attempt: 1, Seq: api.SeqClaimed, Type: api.EventProgress}}, "seq"},
		{api.EventRequest{Fencing: 1, Event: api.Event{Attempt: 1, Seq: 9, Type: api.EventProgress, Step: "pulled"}}, "step"},
		{api.EventRequest{Fencing: 1, Event: api.Event{Attempt: 1, Seq: 9, Type: api.EventProgress, Step: api.StepWaiting}}, "reason"},
		// Review steps and who acted are the orchestrator's own: an agent cannot forge an approval.
		{api.EventRequest{Fencing: 1, Event: api.Event{Attempt: 1, Seq: 9, Type: api.EventProgress, Step: api.StepApproved}}, "step"},
		{api.EventRequest{Fencing: 1, Event: api.Event{Attempt: 1, Seq: 9, Type: api.EventProgress, By: "token alice"}}, "by"},
	}
	for _, b := range bad {
		if r := a.event(d.ID, b.req); r.code != http.StatusBadRequest || r.err(t).Field != b.field {
			t.Fatalf("event %+v: HTTP %d %s, want 400 on %s", b.req, r.code, r.body, b.field)
		}
	}
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments/"+d.ID+"/events", nil, http.StatusOK, &events)
	if len(events.Items) != 3 { // the claim's, started, finished
		t.Fatalf("refused events were stored: %+v", events.Items)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 2)
	queued := h.deploy(api.OperationPlan)
	held := h.deploy(api.OperationApply)
	c := a.claim(held.ID, 1, "pod-a")

	var d api.Deployment
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/deployments/"+queued.ID+"/cancel", nil, http.StatusOK, &d)
	if d.Status != api.StatusCanceled || d.FinishedAt == nil {
		t.Fatalf("queued deployment after cancel: %+v", d)
	}
	if r := h.admin(http.MethodPost, orgPath("acme")+"/deployments/"+queued.ID+"/cancel", nil); r.code != http.StatusConflict {
		t.Fatalf("cancel of a canceled deployment: HTTP %d, want 409", r.code)
	}
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/deployments/"+held.ID+"/cancel", nil, http.StatusOK, &d)
	if d.Status != api.StatusClaimed || !d.CancelRequested {
		t.Fatalf("claimed deployment after cancel: %+v", d)
	}
	resp := a.poll(api.PollRequest{CapacityFree: 1, WaitSeconds: 5, Held: []api.HeldAttempt{holding(c, true)}})
	want := api.Directive{Type: api.DirectiveCancel, DeploymentID: held.ID, Attempt: 1, Reason: store.ReasonCancelRequested}
	if len(resp.Directives) != 1 || resp.Directives[0] != want || len(resp.Offers) != 0 {
		t.Fatalf("poll after cancel: %+v, want only %+v", resp, want)
	}
	var er api.EventResponse
	a.mustOK("/api/v1/agent/deployments/"+held.ID+"/events", api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 5, Type: api.EventFinished, Result: api.StatusCanceled}}, &er)
	if er.Status != api.StatusCanceled || !er.CancelRequested {
		t.Fatalf("event response %+v", er)
	}
}

func TestLongPollWaitsAndWakes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 2)

	// Nothing to offer: the poll is held for wait_seconds, then answers empty.
	start := time.Now()
	resp := a.poll(api.PollRequest{CapacityFree: 1, WaitSeconds: 1})
	if el := time.Since(start); el < 900*time.Millisecond || len(resp.Offers) != 0 {
		t.Fatalf("empty poll returned after %s with %v", el, resp.Offers)
	}

	// A deployment queued while the poll waits wakes it at once.
	done := a.goPost(pollPath, api.PollRequest{CapacityFree: 1, WaitSeconds: 20})
	// While the poll is held the runner counts as connected, even a minute later.
	waitPolling(t, h, done)
	h.clock.Advance(5 * time.Minute)
	var r api.Runner
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/runners/r1", nil, http.StatusOK, &r)
	if !r.Status.Connected {
		t.Fatal("runner with a poll in flight is not connected")
	}
	if got := h.metric("outpost_orchestrator_long_polls_in_flight"); got != 1 {
		t.Fatalf("long_polls_in_flight = %v, want 1", got)
	}
	d := h.deploy(api.OperationPlan)
	res := <-done
	if res.err != nil || res.code != http.StatusOK {
		t.Fatalf("woken poll: HTTP %d %v", res.code, res.err)
	}
	var pr api.PollResponse
	res.decode(t, &pr)
	if res.took > 5*time.Second || !slices.Equal(offerIDs(pr.Offers), []string{d.ID}) {
		t.Fatalf("woken poll took %s and offered %v, want %s at once", res.took, offerIDs(pr.Offers), d.ID)
	}
	// Offers exist: the next poll answers immediately.
	start = time.Now()
	if resp := a.poll(api.PollRequest{CapacityFree: 1, WaitSeconds: 20}); len(resp.Offers) != 1 || time.Since(start) > 2*time.Second {
		t.Fatalf("poll with an offer waiting took %s", time.Since(start))
	}
}

func TestClosingAnswersWaitingPolls(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	done := a.goPost(pollPath, api.PollRequest{CapacityFree: 1, WaitSeconds: 30})
	waitPolling(t, h, done)
	start := time.Now()
	h.close()
	if r := <-done; r.err != nil || r.code != http.StatusOK || time.Since(start) > 5*time.Second {
		t.Fatalf("poll during Close: HTTP %d (%v) after %s", r.code, r.err, time.Since(start))
	}
}

func TestDeletingRunnerCancelsQueued(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 2)
	queued := h.deploy(api.OperationPlan)
	held := h.deploy(api.OperationPlan)
	a.claim(held.ID, 1, "pod-a")
	h.mustAdmin(http.MethodDelete, orgPath("acme")+"/runners/r1", nil, http.StatusNoContent, nil)
	if d := h.deployment(queued.ID); d.Status != api.StatusCanceled || d.Reason != "runner_deleted" {
		t.Fatalf("queued deployment of a deleted runner: %s (%s)", d.Status, d.Reason)
	}
	if d := h.deployment(held.ID); !d.CancelRequested || d.Status != api.StatusClaimed {
		t.Fatalf("held deployment of a deleted runner: %+v", d)
	}
	// Its agent can no longer authenticate; when the lease runs out the job ends canceled.
	if r := a.post(pollPath, api.PollRequest{}); r.code != http.StatusUnauthorized {
		t.Fatalf("poll of a deleted runner: HTTP %d", r.code)
	}
	h.clock.Advance(DefaultLeaseDuration + time.Second)
	h.sweep()
	if d := h.deployment(held.ID); d.Status != api.StatusCanceled {
		t.Fatalf("held deployment after its lease ran out: %s", d.Status)
	}
	var list api.List[api.Deployment]
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments?status=canceled", nil, http.StatusOK, &list)
	if len(list.Items) != 2 || list.Items[0].ID != held.ID || list.Items[0].Source.Inline != nil {
		t.Fatalf("list of canceled (newest first, no sources): %+v", list.Items)
	}
	if got := h.metric(`outpost_orchestrator_jobs{status="canceled"}`); got != 2 {
		t.Fatalf("jobs{status=canceled} = %v, want 2", got)
	}
	if got := h.metric(`outpost_orchestrator_jobs{status="queued"}`); got != 0 {
		t.Fatalf("jobs{status=queued} = %v, want 0", got)
	}
}

// An agent killed between a claim and its Job forgets the claim; so does one whose poll answer
// carrying the claim (agent protocol 7) was lost on the wire. The same instance, restarted or
// polling again, is offered the attempt again once reofferAfter has passed since the claim (not
// before, and not another instance, and not when it restates it); its claim returns the same
// grant, from the claim request or, from protocol 7 on, in the poll answer itself.
func TestLostClaimIsOfferedAgainToItsInstance(t *testing.T) {
	t.Parallel()
	for _, inPoll := range []bool{false, true} {
		name := map[bool]string{false: "claim request", true: "claim in the poll answer"}[inPoll]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			a := h.setupRunner("acme", "r1", 2)
			d := h.deploy(api.OperationApply)
			protocol := api.ProtocolRange{Min: 1, Max: api.ProtocolClaimInPoll - 1}
			if inPoll {
				protocol.Max = api.ProtocolClaimInPoll
			}
			poll := func(instance string, held ...api.HeldAttempt) api.PollResponse {
				return a.poll(api.PollRequest{Instance: instance, CapacityFree: 2, Held: held, Protocol: protocol})
			}
			// grant claims what the answer offers, or takes the grant the answer carries.
			grant := func(resp api.PollResponse) (api.Claim, bool) {
				if inPoll {
					if len(resp.Offers) != 0 || len(resp.Claims) != 1 || resp.Claims[0].DeploymentID != d.ID || resp.Claims[0].Attempt != 1 {
						return api.Claim{}, false
					}
					return resp.Claims[0], true
				}
				if !slices.Equal(offerIDs(resp.Offers), []string{d.ID}) || resp.Offers[0].Attempt != 1 || len(resp.Claims) != 0 {
					return api.Claim{}, false
				}
				return a.claim(d.ID, 1, "agent-0"), true
			}
			first := poll("agent-0")
			c, ok := grant(first) // for the claim in the poll answer, this answer is the one lost
			if !ok {
				t.Fatalf("first poll answered %+v, want %s", first, d.ID)
			}
			if got := h.deployment(d.ID); got.Status != api.StatusClaimed {
				t.Fatalf("deployment after the grant: %s, want claimed", got.Status)
			}
			if resp := poll("agent-0"); len(resp.Offers)+len(resp.Claims) != 0 {
				t.Fatalf("handed out %+v again right after the claim; a claim answer may still be on its way", resp)
			}
			h.clock.Advance(store.ReofferAfter)
			if resp := poll("agent-1"); len(resp.Offers)+len(resp.Claims) != 0 {
				t.Fatalf("handed %+v to another instance, which must wait for the job lease", resp)
			}
			if resp := poll("agent-0", holding(c, false)); len(resp.Offers)+len(resp.Claims) != 0 {
				t.Fatalf("handed out %+v although the instance restates it", resp)
			}
			if inPoll {
				// A poll that states no free slot is handed no grant: the agent could not start it.
				if resp := a.poll(api.PollRequest{Instance: "agent-0", Protocol: protocol}); len(resp.Claims) != 0 {
					t.Fatalf("a poll without a free slot was handed %+v", resp.Claims)
				}
			}
			again, ok := grant(poll("agent-0"))
			if !ok {
				t.Fatalf("the instance that lost its grant was not handed attempt 1 of %s again", d.ID)
			}
			if again.JobToken != c.JobToken || again.Lease.Fencing != c.Lease.Fencing {
				t.Fatalf("the claim of the re-offer is another grant: fencing %d, want %d", again.Lease.Fencing, c.Lease.Fencing)
			}
			// Once started, it is not offered again even if the instance stops restating it (the
			// Job exists; a lost Job is the job lease's business).
			poll("agent-0", holding(c, true))
			h.clock.Advance(store.ReofferAfter)
			if resp := poll("agent-0"); len(resp.Offers)+len(resp.Claims) != 0 {
				t.Fatalf("a started attempt was handed out again: %+v", resp)
			}
			// Nobody else ever got it: one grant, one fencing number.
			var events api.List[api.Event]
			h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments/"+d.ID+"/events", nil, http.StatusOK, &events)
			if len(events.Items) != 1 || events.Items[0].Step != api.StepClaimed {
				t.Fatalf("events %+v, want the one claimed event", events.Items)
			}
		})
	}
}

// viewCounter counts the read transactions the server runs on its engine.
type viewCounter struct {
	store.Engine
	views atomic.Int64
}

func (v *viewCounter) View(ctx context.Context, fn func(tx store.Tx) error) error {
	v.views.Add(1)
	return v.Engine.View(ctx, fn)
}

// TestIdlePollWaitsWithoutLookingAgain: a poll with nothing to answer that waits out its whole
// wait, no wake meanwhile, answers with what its first look found; it reads the store no more
// than a poll that does not wait. With 30,000 idle agents over PostgreSQL replicas every extra
// look is two transactions per poll (BenchmarkOrchestratorScaleReplicas).
func TestIdlePollWaitsWithoutLookingAgain(t *testing.T) {
	t.Parallel()
	counter := &viewCounter{}
	h := newHarness(t, func(c *testConfig) {
		c.WrapEngine = func(e store.Engine) store.Engine { counter.Engine = e; return counter }
	})
	a := h.setupRunner("acme", "r1", 2)
	views := func(req api.PollRequest) int64 {
		before := counter.views.Load()
		if resp := a.poll(req); len(resp.Offers) != 0 {
			t.Fatalf("idle poll offered %v", offerIDs(resp.Offers))
		}
		return counter.views.Load() - before
	}
	now := views(api.PollRequest{Instance: "a", CapacityFree: 1, WaitSeconds: 0, Protocol: api.AgentProtocols()})
	waited := views(api.PollRequest{Instance: "a", CapacityFree: 1, WaitSeconds: 1, Protocol: api.AgentProtocols()})
	if waited != now {
		t.Fatalf("an idle poll that waited 1 s read the store %d times, one that did not wait %d times; want the same", waited, now)
	}
	// Two reads: the runner's keys for the signature, and one look (offers, cancels and state
	// operations in one transaction).
	if now != 2 {
		t.Fatalf("an idle poll read the store in %d transactions, want 2 (the keys, one look)", now)
	}
}

// TestReofferDueDuringAWaitComesAtItsEnd: a poll from the instance that lost a claim's answer,
// waiting while the re-offer falls due (time passes, nothing wakes it), answers at the end of its
// wait with the re-offer: a runner holding leased attempts is looked at again then.
func TestReofferDueDuringAWaitComesAtItsEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 2)
	d := h.deploy(api.OperationApply)
	a.claim(d.ID, 1, "agent-0")
	done := a.goPost(pollPath, api.PollRequest{Instance: "agent-0", CapacityFree: 2, WaitSeconds: 1})
	waitPolling(t, h, done)
	h.clock.Advance(store.ReofferAfter)
	res := <-done
	if res.err != nil || res.code != http.StatusOK {
		t.Fatalf("poll: HTTP %d %s %v", res.code, res.body, res.err)
	}
	var pr api.PollResponse
	res.decode(t, &pr)
	if !slices.Equal(offerIDs(pr.Offers), []string{d.ID}) {
		t.Fatalf("the poll's answer at the end of its wait offered %v, want the re-offer of %s", offerIDs(pr.Offers), d.ID)
	}
}
