package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/storetest"
)

// TestDriftQueuesASavedPlanForApproval, on both engines: a schedule with on_drift queue_apply
// queues its checks as saved plans; a check that finds drift leaves its plan ready for review,
// the schedule says to approve and apply it, and once approved its apply is queued like any
// saved plan's; a check that finds nothing discards its plan; on a runner whose state storage is
// not kubernetes the schedule says why it queued no check.
func TestDriftQueuesASavedPlanForApproval(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, eng store.Engine) {
		s, clk := newStore(t, eng)
		ctx := t.Context()
		src := api.Source{Inline: &api.InlineSource{ArchiveTarGz: []byte{0x1f, 0x8b, 0x08, 0x00}}}
		if _, err := s.CreateSchedule(ctx, "acme", api.ScheduleInput{ID: "nightly", RunnerID: "r1", StateKey: "stacks/r1", Cron: "* * * * * *",
			Source: src, OnDrift: api.OnDriftQueueApply}); err != nil {
			t.Fatal(err)
		}
		// check fires the schedule once and runs its check to the end, reporting drifted.
		check := func(drifted bool) *api.Deployment {
			t.Helper()
			clk.Advance(time.Second)
			fired, err := s.FireDueSchedules(ctx)
			if err != nil || len(fired) != 1 {
				t.Fatalf("fired %+v, %v; want one check", fired, err)
			}
			c, err := s.Claim(ctx, runnerOf, fired[0].DeploymentID, api.ClaimRequest{Attempt: 1, Instance: "a"}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if !c.Placement.SavePlan {
				t.Fatalf("the check of an on_drift queue_apply schedule is not a saved plan: %+v", c.Placement)
			}
			tok, err := s.ParseJobToken(c.JobToken)
			if err != nil {
				t.Fatal(err)
			}
			rep := api.DriftReport{Drifted: drifted}
			if drifted {
				rep.Summary = &api.PlanSummary{Lineage: "L", Serial: 3, Counts: api.PlanCounts{Create: 1},
					ResourceChanges: []api.ResourceChange{{Address: "local_file.f", Action: api.PlanCreate}}}
			}
			if err := s.RecordDrift(ctx, tok, rep, time.Minute); err != nil {
				t.Fatal(err)
			}
			if drifted { // the job runner keeps the plan file and uploads its summary
				if err := s.PutPlanSummary(ctx, tok, *rep.Summary, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			if _, _, err := s.RecordEvent(ctx, runnerOf, c.DeploymentID, api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1,
				Seq: api.SeqFinished, Type: api.EventFinished, Result: api.StatusSucceeded, Time: clk.Now()}}, time.Minute); err != nil {
				t.Fatal(err)
			}
			d, err := s.GetDeployment(ctx, "acme", c.DeploymentID)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}

		found := check(true)
		p, err := s.GetPlan(ctx, "acme", found.ID)
		if err != nil || p.Status != api.PlanReady || p.Summary == nil || p.Summary.ResourceChanges[0].Address != "local_file.f" {
			t.Fatalf("the plan of a check that found drift: %+v, %v; want it ready for review with its summary", p, err)
		}
		sch, err := s.GetSchedule(ctx, "acme", "nightly")
		if err != nil || !strings.Contains(sch.LastMessage, "outpost deployment approve "+found.ID) {
			t.Fatalf("the schedule after drift says %q (%v); want how to approve and apply the plan", sch.LastMessage, err)
		}
		if _, err := s.ApprovePlan(ctx, "acme", found.ID, "alice"); err != nil {
			t.Fatal(err)
		}
		apply, err := s.ApplyPlan(ctx, "acme", found.ID, "bob")
		if err != nil || apply.Operation != api.OperationApply || apply.PlanOf != found.ID {
			t.Fatalf("the apply of the approved drift plan: %+v, %v", apply, err)
		}

		clean := check(false)
		if p, err := s.GetPlan(ctx, "acme", clean.ID); err != nil || p.Status != api.PlanDiscarded {
			t.Fatalf("the plan of a check that found nothing: %+v, %v; want discarded", p, err)
		}

		// A runner whose states are not kept in the cluster has nowhere to keep the plan.
		if _, err := s.CreateStorage(ctx, "acme", api.StateStorageInput{ID: "bucket", Type: api.StateStorageS3,
			S3: &api.S3StateSpec{Bucket: "b", Region: "eu-west-1"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateRunner(ctx, "acme", api.RunnerInput{ID: "r2", StateStorageID: "bucket",
			Job: api.RunnerJob{Namespace: "jobs", ServiceAccount: "sa"}}); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteSchedule(ctx, "acme", "nightly"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateSchedule(ctx, "acme", api.ScheduleInput{ID: "s3", RunnerID: "r2", StateKey: "k", Cron: "* * * * * *",
			Source: src, OnDrift: api.OnDriftQueueApply}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		if fired, err := s.FireDueSchedules(ctx); err != nil || len(fired) != 0 {
			t.Fatalf("fired %+v, %v on a runner with an s3 state storage; want none", fired, err)
		}
		if sch, _ := s.GetSchedule(ctx, "acme", "s3"); !strings.Contains(sch.LastMessage, "only a kubernetes state storage has") {
			t.Fatalf("the schedule says %q; want why no check was queued", sch.LastMessage)
		}
	})
}
