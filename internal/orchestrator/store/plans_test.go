package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/storetest"
)

// TestSavedPlans, on both engines: a save_plan plan is offered only to an agent of protocol 4; its
// summary arrives with the job token; approve records who; the apply of the plan is a new apply
// deployment with the plan's source and variables and the plan's state in its placement; a
// second apply, an unapproved, a discarded, an expired and a stale plan are refused with their
// codes and the refusals recorded as events; a runner with require_approval refuses plain applies
// and destroys; save_plan on a runner without a kubernetes state storage is refused.
func TestSavedPlans(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, eng store.Engine) {
		s, clk := newStore(t, eng)
		ctx := t.Context()
		src := api.Source{Inline: &api.InlineSource{ArchiveTarGz: []byte{0x1f, 0x8b, 0x08, 0x00}}}
		plan := func(ttl int) *api.Deployment {
			t.Helper()
			d, err := s.CreateDeployment(ctx, "acme", api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan, StateKey: "stacks/r1",
				Source: src, SavePlan: true, PlanTTLSeconds: ttl})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		// run claims and finishes a plan with its summary made against lineage L, serial 4.
		run := func(d *api.Deployment) {
			t.Helper()
			c, err := s.Claim(ctx, runnerOf, d.ID, api.ClaimRequest{Attempt: 1, Instance: "a"}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if !c.Placement.SavePlan || c.Placement.PlanTTLSeconds == 0 {
				t.Fatalf("placement of a save_plan plan: %+v", c.Placement)
			}
			tok, err := s.ParseJobToken(c.JobToken)
			if err != nil {
				t.Fatal(err)
			}
			sum := api.PlanSummary{Lineage: "L", Serial: 4, Counts: api.PlanCounts{Create: 1},
				ResourceChanges: []api.ResourceChange{{Address: "terraform_data.a", Action: api.PlanCreate}}}
			if err := s.PutPlanSummary(ctx, tok, sum, time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.RecordEvent(ctx, runnerOf, d.ID, api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: api.SeqFinished,
				Type: api.EventFinished, Result: api.StatusSucceeded, Time: clk.Now()}}, time.Minute); err != nil {
				t.Fatal(err)
			}
		}

		p1 := plan(0)
		poll := func(newest int) []api.Offer {
			a, err := s.Offers(ctx, runnerOf, &api.PollRequest{CapacityFree: 3, Protocol: api.ProtocolRange{Min: 1, Max: newest}}, newest)
			if err != nil {
				t.Fatal(err)
			}
			return a.Offers
		}
		if offers := poll(3); len(offers) != 0 {
			t.Errorf("an agent of protocol 3 was offered a save_plan plan: %+v", offers)
		}
		if offers := poll(4); len(offers) != 1 || offers[0].DeploymentID != p1.ID {
			t.Errorf("an agent of protocol 4 was offered %+v, want %s", offers, p1.ID)
		}
		if _, err := s.ApprovePlan(ctx, "acme", p1.ID, "alice"); !refused(err, api.CodePlanNotReady) {
			t.Errorf("approve before the plan ran: %v, want plan_not_ready", err)
		}
		run(p1)
		if p, err := s.GetPlan(ctx, "acme", p1.ID); err != nil || p.Status != api.PlanReady || p.Summary.Serial != 4 {
			t.Fatalf("plan after its run: %+v, %v", p, err)
		}
		if _, err := s.ApplyPlan(ctx, "acme", p1.ID, "bob"); !refused(err, api.CodePlanNotApproved) {
			t.Errorf("apply of an unapproved plan: %v, want plan_not_approved", err)
		}
		p, err := s.ApprovePlan(ctx, "acme", p1.ID, "alice")
		if err != nil || p.Status != api.PlanApproved || p.ApprovedBy != "alice" || p.ApprovedAt == nil {
			t.Fatalf("approve: %+v, %v", p, err)
		}
		a, err := s.ApplyPlan(ctx, "acme", p1.ID, "bob")
		if err != nil {
			t.Fatal(err)
		}
		if a.Operation != api.OperationApply || a.PlanOf != p1.ID || a.StateKey != "stacks/r1" || a.Source.Inline == nil {
			t.Fatalf("apply of the plan: %+v", a)
		}
		if offers := poll(3); len(offers) != 0 {
			t.Errorf("an agent of protocol 3 was offered the apply of a saved plan: %+v", offers)
		}
		c, err := s.Claim(ctx, runnerOf, a.ID, api.ClaimRequest{Attempt: 1, Instance: "a"}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if ref := c.Placement.ApplyPlan; ref == nil || ref.DeploymentID != p1.ID || ref.Serial != 4 || ref.Lineage != "L" {
			t.Errorf("placement of the apply: %+v", c.Placement.ApplyPlan)
		}
		tok, _ := s.ParseJobToken(c.JobToken)
		if spec, err := s.JobSpec(ctx, tok, time.Minute); err != nil || spec.ApplyPlan != p1.ID {
			t.Errorf("job spec of the apply: %+v, %v", spec, err)
		}
		if _, err := s.ApplyPlan(ctx, "acme", p1.ID, "bob"); !refused(err, api.CodePlanApplied) {
			t.Errorf("second apply: %v, want plan_applied", err)
		}
		if _, err := s.DiscardPlan(ctx, "acme", p1.ID, "carol"); !refused(err, api.CodePlanApplied) {
			t.Errorf("discard of an applied plan: %v, want plan_applied", err)
		}

		// Stale: the agent reported the state at serial 5 since.
		p2 := plan(0)
		run(p2)
		if _, err := s.ApprovePlan(ctx, "acme", p2.ID, "alice"); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordStates(ctx, runnerOf, api.StateReport{Namespace: "outpost-state", States: []api.ReportedState{
			{StateKey: "stacks/r1", Versions: []api.StateVersion{{Generation: 2, Serial: 5, Lineage: "L", WrittenAt: clk.Now()}}}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ApplyPlan(ctx, "acme", p2.ID, "bob"); !refused(err, api.CodeStalePlan) {
			t.Errorf("apply of a stale plan: %v, want stale_plan", err)
		}
		if _, err := s.DiscardPlan(ctx, "acme", p2.ID, "carol"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ApplyPlan(ctx, "acme", p2.ID, "bob"); !refused(err, api.CodePlanDiscarded) {
			t.Errorf("apply of a discarded plan: %v, want plan_discarded", err)
		}
		evs, err := s.ListEvents(ctx, "acme", p2.ID)
		if err != nil {
			t.Fatal(err)
		}
		var review []string
		for _, ev := range evs {
			if ev.Seq >= api.SeqReview {
				review = append(review, string(ev.Step)+" by "+ev.By+" "+ev.Detail)
			}
		}
		if want := []string{"approved by alice ", "apply_refused by bob stale_plan", "discarded by carol ", "apply_refused by bob plan_discarded"}; !slices.Equal(review, want) {
			t.Errorf("review events %q, want %q", review, want)
		}

		// Expired.
		p3 := plan(api.MinPlanTTLSeconds)
		run(p3)
		if _, err := s.ApprovePlan(ctx, "acme", p3.ID, "alice"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Duration(api.MinPlanTTLSeconds) * time.Second)
		if _, err := s.ApplyPlan(ctx, "acme", p3.ID, "bob"); !refused(err, api.CodePlanExpired) {
			t.Errorf("apply of an expired plan: %v, want plan_expired", err)
		}

		// require_approval refuses plain applies and destroys, not plans.
		if _, err := s.UpdateRunner(ctx, "acme", api.RunnerInput{ID: "r1", StateStorageID: "state", MaxConcurrency: 3, RequireApproval: true,
			Job: api.RunnerJob{Namespace: "outpost-jobs", ServiceAccount: "outpost-job"}}); err != nil {
			t.Fatal(err)
		}
		for _, op := range []api.Operation{api.OperationApply, api.OperationDestroy} {
			_, err := s.CreateDeployment(ctx, "acme", api.DeploymentInput{RunnerID: "r1", Operation: op, StateKey: "stacks/r1", Source: src})
			if !refused(err, api.CodeApprovalRequired) {
				t.Errorf("%s on a runner that requires approval: %v, want approval_required", op, err)
			}
		}
		plan(0)

		// save_plan needs a kubernetes state storage.
		if _, err := s.CreateStorage(ctx, "acme", api.StateStorageInput{ID: "s3", Type: api.StateStorageS3, S3: &api.S3StateSpec{Bucket: "b", Region: "r"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateRunner(ctx, "acme", api.RunnerInput{ID: "r2", StateStorageID: "s3", Job: api.RunnerJob{Namespace: "outpost-jobs", ServiceAccount: "outpost-job"}}); err != nil {
			t.Fatal(err)
		}
		_, err = s.CreateDeployment(ctx, "acme", api.DeploymentInput{RunnerID: "r2", Operation: api.OperationPlan, StateKey: "k", Source: src, SavePlan: true})
		if !refused(err, api.CodeInvalid) {
			t.Errorf("save_plan on an s3 state storage: %v, want invalid", err)
		}
	})
}
