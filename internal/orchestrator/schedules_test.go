package orchestrator

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// scheduleInput is a schedule of drift checks of stacks/r1 on acme's runner r1.
func scheduleInput(id, cron string) api.ScheduleInput {
	return api.ScheduleInput{ID: id, RunnerID: "r1", Cron: cron, StateKey: "stacks/r1",
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}}}
}

// checksOf lists acme's deployments that schedule id queued, oldest first.
func checksOf(h *harness, id string) []api.Deployment {
	h.t.Helper()
	var list api.List[api.Deployment]
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments", nil, http.StatusOK, &list)
	var out []api.Deployment
	for i := len(list.Items) - 1; i >= 0; i-- {
		if d := list.Items[i]; d.ScheduleID == id {
			out = append(out, d)
		}
	}
	return out
}

func (h *harness) schedule(id string) api.Schedule {
	h.t.Helper()
	var s api.Schedule
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/schedules/"+id, nil, http.StatusOK, &s)
	return s
}

func (h *harness) cancel(id string) {
	h.t.Helper()
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/deployments/"+id+"/cancel", nil, http.StatusOK, nil)
}

// TestScheduleFiresOncePerPeriod: a schedule fires at its cron time, once, as a plan marked as a
// drift check; a sweep before the time, or a second sweep in the same period, queues nothing; a
// period whose previous check has not ended queues nothing and says so; an hour of missed
// periods fires once; a disabled schedule never fires. On both engines.
func TestScheduleFiresOncePerPeriod(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setupRunner("acme", "r1", 1)
	var sch api.Schedule
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/schedules", scheduleInput("nightly", "*/10 * * * * *"), http.StatusCreated, &sch)
	if sch.NextFireAt.Second()%10 != 0 || !sch.NextFireAt.After(h.clock.Now()) || sch.StateStorageID != "state" || !sch.IsEnabled() || sch.OnDrift != api.OnDriftNone {
		t.Fatalf("created: %+v", sch)
	}
	h.sweep()
	if got := checksOf(h, "nightly"); len(got) != 0 {
		t.Fatalf("fired before its time: %+v", got)
	}
	h.clock.Advance(sch.NextFireAt.Sub(h.clock.Now()))
	h.sweep()
	h.sweep()
	got := checksOf(h, "nightly")
	if len(got) != 1 || !got[0].DriftCheck || got[0].Operation != api.OperationPlan || got[0].StateKey != "stacks/r1" || got[0].Status != api.StatusQueued {
		t.Fatalf("after its time and two sweeps: %+v, want one queued drift check", got)
	}
	var list api.List[api.Schedule]
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/schedules", nil, http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0].Source.Inline != nil || list.Items[0].LastDeploymentID != got[0].ID {
		t.Fatalf("list: %+v, want the schedule without its inline archive", list.Items)
	}
	sch = h.schedule("nightly")
	if sch.Source.Inline == nil || sch.LastDeploymentID != got[0].ID || !sch.NextFireAt.After(h.clock.Now()) {
		t.Fatalf("after firing: %+v", sch)
	}

	// The next period while the first check is still queued: nothing new, and the schedule says why.
	h.clock.Advance(10 * time.Second)
	h.sweep()
	if n := len(checksOf(h, "nightly")); n != 1 {
		t.Fatalf("%d checks while the first had not ended, want 1", n)
	}
	if m := h.schedule("nightly").LastMessage; !strings.Contains(m, "has not ended") {
		t.Errorf("last_message %q, want why nothing was queued", m)
	}

	// An hour of missed periods (no sweep ran) fires once, and the next time is after now.
	h.cancel(got[0].ID)
	h.clock.Advance(time.Hour)
	h.sweep()
	h.sweep()
	if n := len(checksOf(h, "nightly")); n != 2 {
		t.Fatalf("%d checks after an hour of missed periods, want 2 (one for the hour)", n)
	}
	if next := h.schedule("nightly").NextFireAt; !next.After(h.clock.Now()) || next.Sub(h.clock.Now()) > 10*time.Second {
		t.Errorf("next fire %s, want within 10 s after now %s", next, h.clock.Now())
	}

	// Disabled: never fires.
	in := scheduleInput("nightly", "*/10 * * * * *")
	off := false
	in.Enabled = &off
	h.cancel(checksOf(h, "nightly")[1].ID)
	h.mustAdmin(http.MethodPut, orgPath("acme")+"/schedules/nightly", in, http.StatusOK, nil)
	h.clock.Advance(time.Minute)
	h.sweep()
	if n := len(checksOf(h, "nightly")); n != 2 {
		t.Fatalf("a disabled schedule fired: %d checks", n)
	}
}

// TestScheduleInputIsChecked: a bad cron expression, a time zone, an unknown on_drift and an
// unknown runner are refused naming the field; beyond --max-schedules-per-org a create gets 403.
func TestScheduleInputIsChecked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *testConfig) { c.Quotas = store.Quotas{Schedules: 1} })
	h.setupRunner("acme", "r1", 1)
	bad := map[string]api.ScheduleInput{}
	bad["cron"] = scheduleInput("a", "every night")
	bad["cron "] = scheduleInput("a", "CRON_TZ=Europe/Berlin 0 3 * * *")
	s := scheduleInput("a", "@daily")
	s.OnDrift = "destroy"
	bad["on_drift"] = s
	s = scheduleInput("a", "@daily")
	s.RunnerID = "nope"
	bad["runner_id"] = s
	for field, in := range bad {
		r := h.admin(http.MethodPost, orgPath("acme")+"/schedules", in)
		if r.code != http.StatusBadRequest || r.err(t).Field != strings.TrimSpace(field) {
			t.Errorf("%s: HTTP %d %s, want 400 naming %s", field, r.code, r.body, field)
		}
	}
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/schedules", scheduleInput("a", "0 3 * * *"), http.StatusCreated, nil)
	r := h.admin(http.MethodPost, orgPath("acme")+"/schedules", scheduleInput("b", "0 3 * * *"))
	if r.code != http.StatusForbidden || r.err(t).Code != api.CodeQuotaExceeded || !strings.Contains(r.err(t).Message, "--max-schedules-per-org") {
		t.Fatalf("a second schedule beyond the quota of 1: HTTP %d %s", r.code, r.body)
	}
}

// TestDriftCheckMarksAndClears: a drift check's report with changes marks the state key
// drifted, with the summary, on the state key, on the schedule and in
// outpost_orchestrator_drifted_states; a later check without changes clears it. A deployment
// that is not a drift check cannot report drift. On both engines.
func TestDriftCheckMarksAndClears(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	var sch api.Schedule
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/schedules", scheduleInput("drift", "* * * * * *"), http.StatusCreated, &sch)
	check := func() api.Claim {
		t.Helper()
		h.clock.Advance(time.Second)
		h.sweep()
		got := checksOf(h, "drift")
		d := got[len(got)-1]
		if d.Status != api.StatusQueued {
			t.Fatalf("no new check queued: %+v", got)
		}
		return a.claim(d.ID, 1, "pod-1")
	}
	report := func(c api.Claim, rep api.DriftReport) {
		t.Helper()
		if r := h.job(c.JobToken, http.MethodPut, "/api/v1/job/drift", "application/json", jsonBytes(t, rep)); r.code != http.StatusNoContent {
			t.Fatalf("drift report: HTTP %d %s", r.code, r.body)
		}
		a.mustOK("/api/v1/agent/deployments/"+c.DeploymentID+"/events", api.EventRequest{Fencing: c.Lease.Fencing,
			Event: api.Event{Attempt: 1, Seq: api.SeqFinished, Type: api.EventFinished, Result: api.StatusSucceeded}}, nil)
	}
	c := check()
	summary := &api.PlanSummary{Counts: api.PlanCounts{Create: 1}, ResourceChanges: []api.ResourceChange{{Address: "local_file.f", Action: api.PlanCreate}},
		Drift: []api.ResourceChange{{Address: "local_file.f", Action: api.PlanDelete}}}
	report(c, api.DriftReport{Drifted: true, Summary: summary})

	var st api.State
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/state-storages/state/states/stacks/r1", nil, http.StatusOK, &st)
	if st.Drift == nil || !st.Drift.Drifted || st.Drift.DeploymentID != c.DeploymentID || st.Drift.ScheduleID != "drift" || st.Drift.Summary == nil || st.Drift.Summary.Drift[0].Address != "local_file.f" {
		t.Fatalf("state after a check with changes: %+v", st)
	}
	var list api.List[api.State]
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/state-storages/state/states", nil, http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0].Drift == nil {
		t.Fatalf("state list: %+v", list.Items)
	}
	if last := h.schedule("drift").LastCheck; last == nil || !last.Drifted || last.DeploymentID != c.DeploymentID {
		t.Fatalf("schedule's last check: %+v", last)
	}
	if got := h.metric(`outpost_orchestrator_drifted_states{org="acme"}`); got != 1 {
		t.Fatalf("outpost_orchestrator_drifted_states{org=acme} = %v, want 1", got)
	}

	c = check()
	report(c, api.DriftReport{Drifted: false})
	if r := h.admin(http.MethodGet, orgPath("acme")+"/state-storages/state/states/stacks/r1", nil); r.code != http.StatusNotFound {
		t.Fatalf("the cleared state key (no agent reported it) is still there: HTTP %d %s", r.code, r.body)
	}
	if last := h.schedule("drift").LastCheck; last == nil || last.Drifted || last.DeploymentID != c.DeploymentID {
		t.Fatalf("schedule's last check after a clean one: %+v", last)
	}
	if got := h.metric(`outpost_orchestrator_drifted_states{org="acme"}`); got != 0 {
		t.Fatalf("outpost_orchestrator_drifted_states{org=acme} = %v after a clean check, want 0", got)
	}

	// An ordinary plan cannot mark drift.
	d := h.deploy(api.OperationPlan)
	pc := a.claim(d.ID, 1, "pod-2")
	if r := h.job(pc.JobToken, http.MethodPut, "/api/v1/job/drift", "application/json", jsonBytes(t, api.DriftReport{Drifted: true})); r.code != http.StatusConflict {
		t.Fatalf("drift report of an ordinary plan: HTTP %d %s, want 409", r.code, r.body)
	}
}

// TestScheduleSurvivesRestart: the next fire time is stored, so a schedule fires after a
// restart; the periods missed while the orchestrator was down fire once.
func TestScheduleSurvivesRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setupRunner("acme", "r1", 1)
	var sch api.Schedule
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/schedules", scheduleInput("hourly", "@hourly"), http.StatusCreated, &sch)
	h.close()
	h.clock.Advance(5 * time.Hour) // five periods pass while no orchestrator runs
	h.open()
	h.sweep()
	h.sweep()
	got := checksOf(h, "hourly")
	if len(got) != 1 || !got[0].DriftCheck {
		t.Fatalf("after a restart past five periods: %d checks %+v, want one", len(got), got)
	}
	if next := h.schedule("hourly").NextFireAt; !next.After(h.clock.Now()) || next.Minute() != 0 {
		t.Errorf("next fire %s after now %s, want the next full hour", next, h.clock.Now())
	}
}

// TestReplicasFireEachPeriodOnce: three orchestrator replicas over one PostgreSQL database sweep
// at the same moment, period after period, over ten schedules: each schedule queues exactly
// one check per period. The replica that loses the race finds the next-fire time already moved
// (SERIALIZABLE transactions, retried), not a second check to queue.
func TestReplicasFireEachPeriodOnce(t *testing.T) {
	t.Parallel()
	rs := replicas(t, 3)
	rs[0].setupRunner("acme", "r1", 1)
	const schedules, periods = 10, 5
	for i := range schedules {
		in := scheduleInput("s"+string(rune('a'+i)), "* * * * * *")
		rs[i%3].mustAdmin(http.MethodPost, orgPath("acme")+"/schedules", in, http.StatusCreated, nil)
	}
	for p := range periods {
		rs[0].clock.Advance(time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, len(rs))
		for _, h := range rs {
			wg.Go(func() { errs <- h.srv.Sweep(t.Context()) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("period %d: sweep: %v", p, err)
			}
		}
		for i := range schedules {
			id := "s" + string(rune('a'+i))
			got := checksOf(rs[p%3], id)
			if len(got) != p+1 {
				t.Fatalf("period %d: schedule %s has %d checks, want %d (one per period)", p, id, len(got), p+1)
			}
			// A replica that fired a second time would have found this period's check queued
			// and said so; the losers must have found nothing due.
			if m := rs[i%3].schedule(id).LastMessage; m != "" {
				t.Fatalf("period %d: schedule %s: %q; a losing replica fired it again", p, id, m)
			}
			rs[i%3].cancel(got[p].ID) // ended, so the next period fires
		}
	}
}

// TestScheduleFiresNothingBeyondTheQueueQuota: a schedule that fires while its organisation's
// queue is full queues no check, says why, and fires again the next period.
func TestScheduleFiresNothingBeyondTheQueueQuota(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *testConfig) { c.Quotas = store.Quotas{QueuedDeployments: 1} })
	h.setupRunner("acme", "r1", 1)
	d := h.deploy(api.OperationPlan) // the queue is full
	var sch api.Schedule
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/schedules", scheduleInput("full", "* * * * * *"), http.StatusCreated, &sch)
	h.clock.Advance(time.Second)
	h.sweep()
	if n := len(checksOf(h, "full")); n != 0 {
		t.Fatalf("%d checks queued beyond the queue quota", n)
	}
	if m := h.schedule("full").LastMessage; !strings.Contains(m, "--max-queued-deployments-per-org") {
		t.Fatalf("last_message %q, want the quota named", m)
	}
	h.cancel(d.ID)
	h.clock.Advance(time.Second)
	h.sweep()
	if n := len(checksOf(h, "full")); n != 1 {
		t.Fatalf("%d checks once the queue had room, want 1", n)
	}
}
