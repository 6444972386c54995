package store_test

import (
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/storetest"
)

// TestTimelineAndReasons, on both engines: the claim is recorded as the timeline's first step; a
// waiting event sets the deployment's reason and the cluster's words while it waits, a later step
// clears them; events list in timeline order whatever their seqs; each reason counts once per
// attempt (a resend, or a finished event with the reason the attempt waited for, counts none);
// the queue depth is per runner.
func TestTimelineAndReasons(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, eng store.Engine) {
		s, clk := newStore(t, eng)
		ctx := t.Context()
		if _, err := s.CreateRunner(ctx, "acme", api.RunnerInput{
			ID: "r2", StateStorageID: "state", MaxConcurrency: 1, Job: api.RunnerJob{Namespace: "outpost-jobs", ServiceAccount: "outpost-job"},
		}); err != nil {
			t.Fatal(err)
		}
		d := deploy(t, s, api.OperationApply)
		for range 2 {
			deploy(t, s, api.OperationPlan)
		}
		if _, err := s.CreateDeployment(ctx, "acme", api.DeploymentInput{RunnerID: "r2", Operation: api.OperationPlan, StateKey: "k",
			Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: []byte{0x1f, 0x8b, 0x08, 0x00}}}}); err != nil {
			t.Fatal(err)
		}
		depths, err := s.QueueDepths(ctx)
		want := []store.QueueDepth{{Org: "acme", Runner: "r1", Queued: 3}, {Org: "acme", Runner: "r2", Queued: 1}}
		if err != nil || len(depths) != 2 || depths[0] != want[0] || depths[1] != want[1] {
			t.Fatalf("queue depths %+v (%v), want %+v", depths, err, want)
		}

		c := claim(t, s, d)
		at := clk.Now().Truncate(time.Second)
		ev := func(seq int64, typ api.EventType, step api.Step, reason api.Reason, detail string, when time.Time) api.EventRequest {
			return api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: seq, Type: typ, Step: step, Reason: reason,
				Message: "msg " + string(reason), Detail: detail, Time: when}}
		}
		send := func(req api.EventRequest, wantCounted api.Reason) {
			t.Helper()
			if req.Type == api.EventFinished {
				req.Result = api.StatusFailed
			}
			_, counted, err := s.RecordEvent(ctx, runnerOf, d.ID, req, lease)
			if err != nil || counted != wantCounted {
				t.Fatalf("event %d (%s %s): counted %q (%v), want %q", req.Seq, req.Step, req.Reason, counted, err, wantCounted)
			}
		}
		unschedulable, _ := api.WaitingSeq(api.ReasonUnschedulable)
		pull, _ := api.WaitingSeq(api.ReasonImagePull)
		scheduler := "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
		send(ev(api.SeqJobCreated, api.EventProgress, api.StepJobCreated, "", "", at), "")
		send(ev(unschedulable, api.EventProgress, api.StepWaiting, api.ReasonUnschedulable, scheduler, at), api.ReasonUnschedulable)
		send(ev(unschedulable, api.EventProgress, api.StepWaiting, api.ReasonUnschedulable, scheduler, at), "") // a resend
		if got := status(t, s, d.ID); got.Status != api.StatusClaimed || got.Reason != api.ReasonUnschedulable || got.Detail != scheduler {
			t.Fatalf("waiting deployment: %s, reason %q, detail %q; want claimed, unschedulable with the scheduler's words", got.Status, got.Reason, got.Detail)
		}
		send(ev(api.SeqPodScheduled, api.EventProgress, api.StepPodScheduled, "", "", at.Add(time.Second)), "")
		if got := status(t, s, d.ID); got.Reason != "" || got.Detail != "" {
			t.Fatalf("after the pod was scheduled: reason %q, detail %q; want none", got.Reason, got.Detail)
		}
		send(ev(pull, api.EventProgress, api.StepWaiting, api.ReasonImagePull, "ErrImagePull: 401 Unauthorized", at.Add(2*time.Second)), api.ReasonImagePull)
		send(ev(api.SeqFinished, api.EventFinished, api.StepFinished, api.ReasonImagePull, "ErrImagePull: 401 Unauthorized", at.Add(3*time.Second)), "")
		got := status(t, s, d.ID)
		if got.Status != api.StatusFailed || got.Reason != api.ReasonImagePull || got.Detail != "ErrImagePull: 401 Unauthorized" {
			t.Fatalf("failed deployment: %s, reason %q, detail %q", got.Status, got.Reason, got.Detail)
		}
		evs, err := s.ListEvents(ctx, "acme", d.ID)
		if err != nil {
			t.Fatal(err)
		}
		var steps []api.Step
		for _, e := range evs {
			steps = append(steps, e.Step)
		}
		wantSteps := []api.Step{api.StepClaimed, api.StepJobCreated, api.StepWaiting, api.StepPodScheduled, api.StepWaiting, api.StepFinished}
		if len(steps) != len(wantSteps) {
			t.Fatalf("steps %v, want %v", steps, wantSteps)
		}
		for i := range steps {
			if steps[i] != wantSteps[i] {
				t.Fatalf("steps %v, want %v", steps, wantSteps)
			}
		}
		if evs[2].Reason != api.ReasonUnschedulable || evs[2].Detail != scheduler {
			t.Errorf("waiting event %+v, want unschedulable with the scheduler's words", evs[2])
		}

		// A finished event with a reason the attempt did not wait for counts; one of an
		// agent without steps gets its step from its type.
		d2 := deploy(t, s, api.OperationPlan)
		for _, q := range []*api.Deployment{d2} {
			c = claim(t, s, q)
			d = q
		}
		send(api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: api.SeqStarted, Type: api.EventStarted}}, "")
		send(ev(api.SeqFinished, api.EventFinished, "", api.ReasonOOMKilled, "OOMKilled: exit code 137, memory limit 32Mi", time.Time{}), api.ReasonOOMKilled)
		evs, err = s.ListEvents(ctx, "acme", d2.ID)
		if err != nil || len(evs) != 3 || evs[1].Step != api.StepCLIStarted || evs[2].Step != api.StepFinished {
			t.Fatalf("events of an agent without steps: %+v (%v)", evs, err)
		}
	})
}
