package orchestrator

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/bolt"
)

func eventPath(id string) string { return "/api/v1/agent/deployments/" + id + "/events" }

// TestEventsOnEndedAttemptsAreRefused sends new events for attempts that ended three ways (the
// deployment finished, was canceled, or moved on to a later attempt): each is refused with a
// message that says why, and nothing stored changes. A resend of an event already stored is
// still acknowledged, so an agent that lost an answer is not stuck.
func TestEventsOnEndedAttemptsAreRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 3)

	finished := h.deploy(api.OperationApply)
	fc := a.claim(finished.ID, 1, "pod-a")
	last := api.EventRequest{Fencing: fc.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventFinished, Result: api.StatusSucceeded}}
	a.mustOK(eventPath(finished.ID), last, nil)

	canceled := h.deploy(api.OperationApply)
	cc := a.claim(canceled.ID, 1, "pod-a")
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/deployments/"+canceled.ID+"/cancel", nil, http.StatusOK, nil)
	h.clock.Advance(DefaultLeaseDuration + time.Second) // the agent never answers the cancel
	h.sweep()

	requeued := h.deploy(api.OperationPlan)
	rc := a.claim(requeued.ID, 1, "pod-a")
	h.clock.Advance(DefaultLeaseDuration + time.Second)
	h.sweep()
	if d := h.deployment(requeued.ID); d.Attempt != 2 || d.Status != api.StatusQueued {
		t.Fatalf("the plan whose job lease expired: %+v, want attempt 2 queued", d)
	}
	if d := h.deployment(canceled.ID); d.Status != api.StatusCanceled {
		t.Fatalf("the canceled deployment: %+v", d)
	}

	// The agent was seen at this instant already, so the refused events below change not even
	// the runner's last_seen_at (the clock does not move).
	a.poll(api.PollRequest{Instance: "pod-a"})
	before := everything(h)
	cases := []struct {
		name, id string
		req      api.EventRequest
		code     string
		msg      string
	}{
		{"progress after the finished event", finished.ID, api.EventRequest{Fencing: fc.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 2, Type: api.EventProgress, Message: "late"}}, api.CodeConflict, "already ended with status succeeded"},
		{"a second finished event", finished.ID, api.EventRequest{Fencing: fc.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 9, Type: api.EventFinished, Result: api.StatusFailed}}, api.CodeConflict, "already ended"},
		{"started after the cancel ended it", canceled.ID, api.EventRequest{Fencing: cc.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 0, Type: api.EventStarted}}, api.CodeConflict, "already ended with status canceled"},
		{"finished after the cancel ended it", canceled.ID, api.EventRequest{Fencing: cc.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventFinished, Result: api.StatusSucceeded}}, api.CodeConflict, "already ended"},
		{"an older attempt", requeued.ID, api.EventRequest{Fencing: rc.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventFinished, Result: api.StatusSucceeded}}, api.CodeStaleFencing, "is at attempt 2"},
	}
	for _, tc := range cases {
		r := a.event(tc.id, tc.req)
		if r.code != http.StatusConflict {
			t.Errorf("%s: HTTP %d %s, want 409", tc.name, r.code, r.body)
			continue
		}
		e := r.err(t)
		if e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: %+v, want code %s and a message with %q", tc.name, e, tc.code, tc.msg)
		}
		t.Logf("%s: HTTP %d %s: %s", tc.name, r.code, e.Code, e.Message)
	}
	if after := everything(h); after != before {
		t.Fatalf("refused events changed stored state:\nbefore %s\nafter  %s", before, after)
	}
	var resp api.EventResponse
	a.mustOK(eventPath(finished.ID), last, &resp)
	if resp.Status != api.StatusSucceeded {
		t.Fatalf("resend of the stored finished event: %+v", resp)
	}
}

// TestEventCapPerAttempt fills an attempt up to MaxEventsPerAttempt: the next progress event is
// refused with a message naming the cap, the finished event is still taken, and nothing beyond
// the cap is stored.
func TestEventCapPerAttempt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	d := h.deploy(api.OperationApply)
	c := a.claim(d.ID, 1, "pod-a")
	// All but the last event of the cap go straight into the store (the claim recorded one);
	// the rest over HTTP.
	if err := h.srv.store.Update(t.Context(), func(tx store.Tx) error {
		for i := range int64(store.MaxEventsPerAttempt - 2) {
			seq := 10000 + i
			if err := tx.PutEvent("acme", d.ID, 1, seq, api.Event{Attempt: 1, Seq: seq, Type: api.EventProgress}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	progress := func(seq int64) api.EventRequest {
		return api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: seq, Type: api.EventProgress}}
	}
	a.mustOK(eventPath(d.ID), progress(20000), nil) // the last one within the cap
	r := a.event(d.ID, progress(20001))
	if r.code != http.StatusConflict || !strings.Contains(r.err(t).Message, "1000 events, the most one attempt may record") {
		t.Fatalf("an event beyond the cap: HTTP %d %s, want 409 naming the cap", r.code, r.body)
	}
	t.Logf("beyond the cap: HTTP %d %s", r.code, r.err(t).Message)
	a.mustOK(eventPath(d.ID), progress(10005), nil) // a resend of a stored one is still acknowledged
	var resp api.EventResponse
	a.mustOK(eventPath(d.ID), api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: api.SeqFinished, Type: api.EventFinished, Result: api.StatusSucceeded}}, &resp)
	if resp.Status != api.StatusSucceeded {
		t.Fatalf("the finished event at the cap: %+v", resp)
	}
	var events api.List[api.Event]
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments/"+d.ID+"/events", nil, http.StatusOK, &events)
	if n := len(events.Items); n != store.MaxEventsPerAttempt+1 || events.Items[n-1].Type != api.EventFinished {
		t.Fatalf("%d events stored (last %+v), want the cap of %d plus the finished event", n, events.Items[n-1], store.MaxEventsPerAttempt)
	}
}

// Finished events that arrive together are all recorded, each deployment ends once, and on bbolt
// they share commits: a wave of ending attempts is not written one commit (two fsyncs) at a time.
func TestConcurrentFinishedEventsShareCommits(t *testing.T) {
	t.Parallel()
	const n = 20
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", n)
	ids := make([]string, n)
	fencing := make([]int64, n)
	for i := range n {
		d := h.deploy(api.OperationPlan)
		ids[i], fencing[i] = d.ID, a.claim(d.ID, 1, "pod-a").Lease.Fencing
	}
	txID := func() int {
		be, ok := h.eng.(*bolt.Engine)
		if !ok {
			return 0
		}
		id := 0
		if err := be.DB.View(func(tx *bbolt.Tx) error { id = tx.ID(); return nil }); err != nil {
			t.Fatal(err)
		}
		return id
	}
	before := txID()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			ev := api.EventRequest{Fencing: fencing[i], Event: api.Event{Attempt: 1, Seq: 2, Type: api.EventFinished, Result: api.StatusSucceeded}}
			if _, _, err := h.srv.store.RecordEvent(t.Context(), agentauth.Identity{Org: "acme", RunnerID: "r1"}, ids[i], ev, DefaultLeaseDuration); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, id := range ids {
		if d := h.deployment(id); d.Status != api.StatusSucceeded {
			t.Errorf("deployment %s: %s, want succeeded", id, d.Status)
		}
	}
	if commits := txID() - before; before != 0 && commits >= n {
		t.Errorf("%d finished events took %d commits; want them to share commits", n, commits)
	} else {
		t.Logf("%d finished events, %d commits (0 on PostgreSQL: not counted)", n, commits)
	}
}

// TestReasonsReachTheMetrics: a waiting event and a finished event with another reason each count
// once in outpost_orchestrator_deployment_reasons_total for their runner (a resend counts none, a
// finished event with the reason the attempt waited for counts none), and the queue depth is
// per runner.
func TestReasonsReachTheMetrics(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	d := h.deploy(api.OperationApply)
	h.deploy(api.OperationPlan)
	h.deploy(api.OperationPlan)
	if got := h.metric(`outpost_orchestrator_queue_depth{org="acme",runner="r1"}`); got != 3 {
		t.Fatalf("queue depth of r1: %v, want 3", got)
	}
	c := a.claim(d.ID, 1, "pod-a")
	if got := h.metric(`outpost_orchestrator_queue_depth{org="acme",runner="r1"}`); got != 2 {
		t.Fatalf("queue depth of r1 after a claim: %v, want 2", got)
	}
	seq, _ := api.WaitingSeq(api.ReasonUnschedulable)
	waiting := api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: seq, Type: api.EventProgress, Step: api.StepWaiting,
		Reason: api.ReasonUnschedulable, Message: "no node fits", Detail: "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."}}
	a.mustOK(eventPath(d.ID), waiting, nil)
	a.mustOK(eventPath(d.ID), waiting, nil) // a resend
	if got := h.deployment(d.ID); got.Reason != api.ReasonUnschedulable || got.Detail != waiting.Detail {
		t.Fatalf("waiting deployment: reason %q, detail %q", got.Reason, got.Detail)
	}
	a.mustOK(eventPath(d.ID), api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: api.SeqFinished, Type: api.EventFinished,
		Step: api.StepFinished, Result: api.StatusFailed, Reason: api.ReasonStartupTimeout, Message: "did not start"}}, nil)
	for reason, want := range map[api.Reason]float64{api.ReasonUnschedulable: 1, api.ReasonStartupTimeout: 1, api.ReasonOOMKilled: 0} {
		if got := h.metric(`outpost_orchestrator_deployment_reasons_total{org="acme",reason="` + string(reason) + `",runner="r1"}`); got != want {
			t.Errorf("reason %s counted %v times, want %v", reason, got, want)
		}
	}
}

// TestEventBatchAnswersEachEvent sends one EventBatch (agent protocol 6) with events that are
// taken, one that follows another of the same attempt in the batch, a resend, and events refused
// for three different reasons: each gets the result it would have got alone, in order, and the
// refused ones do not stop the others.
func TestEventBatchAnswersEachEvent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 3)
	one, two := h.deploy(api.OperationPlan), h.deploy(api.OperationPlan)
	c1, c2 := a.claim(one.ID, 1, "pod-a"), a.claim(two.ID, 1, "pod-a")
	ev := func(id string, fencing, seq int64, typ api.EventType, result api.Status) api.DeploymentEvent {
		return api.DeploymentEvent{DeploymentID: id, EventRequest: api.EventRequest{Fencing: fencing,
			Event: api.Event{Attempt: 1, Seq: seq, Type: typ, Result: result, Time: h.clock.Now()}}}
	}
	batch := api.EventBatch{Events: []api.DeploymentEvent{
		ev(one.ID, c1.Lease.Fencing, 0, api.EventStarted, ""),
		ev(one.ID, c1.Lease.Fencing, 1, api.EventFinished, api.StatusSucceeded), // sees the started event before it
		ev(two.ID, c2.Lease.Fencing+5, 1, api.EventFinished, api.StatusFailed),  // a fencing never granted
		ev(two.ID, c2.Lease.Fencing, -1, api.EventProgress, ""),                 // fails validation
		ev(one.ID, c1.Lease.Fencing, 1, api.EventFinished, api.StatusSucceeded), // a resend
		ev("dep-unknown", 1, 1, api.EventFinished, api.StatusSucceeded),
		ev(two.ID, c2.Lease.Fencing, 0, api.EventStarted, ""),
	}}
	var out api.EventBatchResponse
	a.mustOK("/api/v1/agent/events", batch, &out)
	want := []struct {
		status api.Status
		code   int
		field  string
	}{{api.StatusRunning, 0, ""}, {api.StatusSucceeded, 0, ""}, {"", http.StatusBadRequest, "fencing"}, {"", http.StatusBadRequest, "seq"},
		{api.StatusSucceeded, 0, ""}, {"", http.StatusNotFound, ""}, {api.StatusRunning, 0, ""}}
	if len(out.Results) != len(want) {
		t.Fatalf("%d results for %d events: %+v", len(out.Results), len(want), out.Results)
	}
	for i, w := range want {
		r := out.Results[i]
		switch {
		case w.code == 0 && (r.Error != nil || r.Response == nil || r.Response.Status != w.status):
			t.Errorf("event %d: %+v %+v, want taken with status %s", i, r.Response, r.Error, w.status)
		case w.code != 0 && (r.Error == nil || r.Error.Status != w.code || r.Error.Field != w.field || r.Response != nil):
			t.Errorf("event %d: %+v %+v, want refused with HTTP %d on field %q", i, r.Response, r.Error, w.code, w.field)
		}
	}
	if d := h.deployment(one.ID); d.Status != api.StatusSucceeded {
		t.Errorf("deployment one after its batch: %s, want succeeded", d.Status)
	}
	if d := h.deployment(two.ID); d.Status != api.StatusRunning {
		t.Errorf("deployment two after its batch: %s, want running (only its started event was valid)", d.Status)
	}

	for _, tc := range []struct {
		name  string
		batch api.EventBatch
	}{{"empty", api.EventBatch{}}, {"too many", api.EventBatch{Events: make([]api.DeploymentEvent, api.MaxEventBatch+1)}}} {
		if r := a.post("/api/v1/agent/events", tc.batch); r.code != http.StatusBadRequest || r.err(t).Field != "events" {
			t.Errorf("%s batch: HTTP %d %s, want 400 on events", tc.name, r.code, r.body)
		}
	}
}
