package store

import (
	"context"
	"fmt"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Saved plans: the summary a plan deployment's job runner uploads, its review (approve,
// discard), and the apply of it, which is a new apply deployment with the plan's source and
// variables that the agent runs as `apply <planfile>`. The plan file itself never reaches the
// orchestrator; it stays with the state in the cluster.

// planView is the saved plan as the API shows it: its stored record with the status the
// deployment and the clock give it (pending until the plan deployment succeeded with its
// summary, expired once its time is up unless applied or discarded).
func planView(p api.SavedPlan, rec *DeploymentRecord, now time.Time) api.SavedPlan {
	switch {
	case p.Status == api.PlanApplied || p.Status == api.PlanDiscarded:
	case p.Summary == nil || rec.D.Status != api.StatusSucceeded:
		p.Status = api.PlanPending
	case p.ExpiresAt != nil && !now.Before(*p.ExpiresAt):
		p.Status = api.PlanExpired
	case p.ApprovedAt != nil:
		p.Status = api.PlanApproved
	default:
		p.Status = api.PlanReady
	}
	return p
}

// loadPlan loads the saved plan of a plan deployment, refusing a deployment that has none.
func loadPlan(tx Tx, org, id string) (*DeploymentRecord, *api.SavedPlan, error) {
	rec, err := loadDeployment(tx, org, id)
	if err != nil {
		return nil, nil, err
	}
	var p api.SavedPlan
	ok, err := tx.GetDoc(KindPlan, org, id, &p)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, nil, NotFound("deployment %q has no saved plan: it is a %s deployment without save_plan; queue a plan with save_plan: true to review and apply it", id, rec.D.Operation)
	}
	return rec, &p, nil
}

// reviewEvent records a review step of a saved plan on its plan deployment's last attempt, with
// who asked. Review events are numbered from api.SeqReview on.
func reviewEvent(tx Tx, rec *DeploymentRecord, ev api.Event) error {
	n, err := tx.CountEvents(rec.Org, rec.D.ID, rec.D.Attempt, 1<<20)
	if err != nil {
		return err
	}
	ev.Attempt, ev.Type = rec.D.Attempt, api.EventProgress
	ev.Seq = api.SeqReview + int64(n)
	return tx.PutEvent(rec.Org, rec.D.ID, rec.D.Attempt, ev.Seq, ev)
}

// GetPlan returns the saved plan of a plan deployment.
func (s *Store) GetPlan(ctx context.Context, org, id string) (*api.SavedPlan, error) {
	return viewOne(ctx, s, func(tx Tx) (*api.SavedPlan, error) {
		rec, p, err := loadPlan(tx, org, id)
		if err != nil {
			return nil, err
		}
		v := planView(*p, rec, s.TimeNow())
		return &v, nil
	})
}

// ApprovePlan records that by approved the saved plan of deployment id: only a plan ready for
// review (its deployment succeeded with a summary, not expired, applied or discarded). Approving
// an approved plan again changes nothing.
func (s *Store) ApprovePlan(ctx context.Context, org, id, by string) (*api.SavedPlan, error) {
	return s.reviewPlan(ctx, org, id, api.StepApproved, by, "plan approved",
		func(rec *DeploymentRecord, p *api.SavedPlan, now time.Time) (bool, error) {
			switch v := planView(*p, rec, now); v.Status {
			case api.PlanApproved:
				return true, nil
			case api.PlanPending:
				return false, Refuse(api.CodePlanNotReady, "the plan of deployment %q is not ready for review: the deployment is %s%s; approve it once it succeeded",
					id, rec.D.Status, map[bool]string{true: " and its job runner has not uploaded the summary", false: ""}[p.Summary == nil])
			case api.PlanExpired, api.PlanApplied, api.PlanDiscarded:
				return false, planRefusal(v, id)
			}
			p.ApprovedBy, p.ApprovedAt, p.Status = by, &now, api.PlanApproved
			return false, nil
		})
}

// DiscardPlan records that by discarded the saved plan of deployment id: it is never applied. An
// applied plan cannot be discarded; discarding a discarded one changes nothing. The plan file
// in the cluster is deleted by the agent when its time is up.
func (s *Store) DiscardPlan(ctx context.Context, org, id, by string) (*api.SavedPlan, error) {
	return s.reviewPlan(ctx, org, id, api.StepDiscarded, by, "plan discarded",
		func(_ *DeploymentRecord, p *api.SavedPlan, now time.Time) (bool, error) {
			switch p.Status {
			case api.PlanDiscarded:
				return true, nil
			case api.PlanApplied:
				return false, planRefusal(*p, id)
			}
			p.DiscardedBy, p.DiscardedAt, p.Status = by, &now, api.PlanDiscarded
			return false, nil
		})
}

// reviewPlan is one review of the saved plan of deployment id, in one transaction: decide
// refuses, says the plan already is where the review would put it (nothing is written), or sets
// the plan's fields; then the plan and the review's event (step, by, message) are written.
func (s *Store) reviewPlan(ctx context.Context, org, id string, step api.Step, by, message string,
	decide func(rec *DeploymentRecord, p *api.SavedPlan, now time.Time) (already bool, err error)) (*api.SavedPlan, error) {
	var out api.SavedPlan
	err := s.Update(ctx, func(tx Tx) error {
		rec, p, err := loadPlan(tx, org, id)
		if err != nil {
			return err
		}
		now := s.TimeNow()
		already, err := decide(rec, p, now)
		if err != nil {
			return err
		}
		if !already {
			if err := tx.PutDoc(KindPlan, org, id, p); err != nil {
				return err
			}
			if err := reviewEvent(tx, rec, api.Event{Step: step, By: by, Message: message, Time: now}); err != nil {
				return err
			}
		}
		out = planView(*p, rec, now)
		return nil
	})
	return &out, err
}

// planRefusal is why a saved plan in status v cannot be approved or applied.
func planRefusal(v api.SavedPlan, id string) *Refusal {
	switch v.Status {
	case api.PlanExpired:
		return Refuse(api.CodePlanExpired, "the saved plan of deployment %q expired at %s; queue a new plan", id, v.ExpiresAt.Format(time.RFC3339))
	case api.PlanApplied:
		return Refuse(api.CodePlanApplied, "the saved plan of deployment %q was applied already, by deployment %q; a plan is applied once: queue a new plan", id, v.AppliedBy)
	case api.PlanDiscarded:
		return Refuse(api.CodePlanDiscarded, "the saved plan of deployment %q was discarded by %s; queue a new plan", id, v.DiscardedBy)
	case api.PlanPending:
		return Refuse(api.CodePlanNotReady, "the plan of deployment %q is not ready: its deployment has not succeeded with a summary yet; wait for it, review it, approve it", id)
	case api.PlanReady:
		return Refuse(api.CodePlanNotApproved, "the saved plan of deployment %q is not approved; review it (outpost deployment plan %s) and approve it first", id, id)
	}
	return nil
}

// ApplyPlan queues the apply of the approved saved plan of deployment id: a new apply deployment
// on the plan's runner with its source, variables, state key and timeout, which runs exactly
// that plan. It is refused, and the refusal recorded on the plan deployment, when the plan is not
// approved, expired, was applied or discarded, its source was purged, or the state moved since
// the plan was made (as far as the state reports of the runner's agent tell; the agent checks
// again at the claim, against the state itself).
func (s *Store) ApplyPlan(ctx context.Context, org, id, by string) (*api.Deployment, error) {
	if err := s.checkQueueQuota(ctx, org, s.quotas.QueuedDeployments); err != nil {
		return nil, err
	}
	var out api.Deployment
	err := s.Update(ctx, func(tx Tx) error {
		rec, p, err := loadPlan(tx, org, id)
		if err != nil {
			return err
		}
		now := s.TimeNow()
		refuse := func(r *Refusal) error {
			if err := reviewEvent(tx, rec, api.Event{Step: api.StepApplyRefused, By: by, Message: r.Message, Detail: r.Code, Time: now}); err != nil {
				return err
			}
			return r
		}
		v := planView(*p, rec, now)
		if v.Status != api.PlanApproved {
			return refuse(planRefusal(v, id))
		}
		if rec.D.SourcePurgedAt != nil {
			return refuse(Refuse(api.CodePlanExpired, "the source and variables of deployment %q were purged by retention; queue a new plan", id))
		}
		runner, st, err := runnerAndStorage(tx, rec)
		if err != nil {
			return err
		}
		if moved, err := stateMoved(tx, org, st.ID, rec.D.StateKey, p.Summary); err != nil {
			return err
		} else if moved != "" {
			return refuse(Refuse(api.CodeStalePlan, "the state %q moved since the plan of deployment %q was made (%s); queue a new plan", rec.D.StateKey, id, moved))
		}
		src, err := loadSource(tx, org, id)
		if err != nil {
			return err
		}
		nrec, err := s.insertDeployment(ctx, tx, org, api.Deployment{
			RunnerID: runner.ID, Operation: api.OperationApply, Variables: rec.D.Variables, StateKey: rec.D.StateKey,
			TimeoutSeconds: rec.D.TimeoutSeconds, PlanOf: id,
		}, src)
		if err != nil {
			return err
		}
		p.AppliedBy, p.AppliedAt, p.Status = nrec.D.ID, &now, api.PlanApplied
		if err := tx.PutDoc(KindPlan, org, id, p); err != nil {
			return err
		}
		if err := reviewEvent(tx, rec, api.Event{Step: api.StepApplyQueued, By: by, Message: "apply queued as deployment " + nrec.D.ID, Time: now}); err != nil {
			return err
		}
		out = nrec.D
		out.Source = src
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// stateMoved says how the state's current version as its agent last reported it differs from
// the one the plan was made against, or "" when it does not (or nothing was reported: the agent
// checks at the claim).
func stateMoved(tx Tx, org, storage, key string, plan *api.PlanSummary) (string, error) {
	var st api.State
	ok, err := tx.GetDoc(KindState, org, stateDocID(storage, key), &st)
	if err != nil || !ok || len(st.Versions) == 0 {
		return "", err
	}
	cur := st.Versions[0]
	switch {
	case plan.Lineage == "":
		return fmt.Sprintf("the plan was made before the state existed; it is at serial %d now", cur.Serial), nil
	case cur.Lineage != plan.Lineage:
		return fmt.Sprintf("its lineage is %q, the plan's %q", cur.Lineage, plan.Lineage), nil
	case cur.Serial != plan.Serial:
		return fmt.Sprintf("its serial is %d, the plan's %d", cur.Serial, plan.Serial), nil
	}
	return "", nil
}

// PutPlanSummary keeps the summary the job runner of a save_plan deployment uploads; the plan
// expires the deployment's plan_ttl_seconds after.
func (s *Store) PutPlanSummary(ctx context.Context, c JobTokenPayload, sum api.PlanSummary, grace time.Duration) error {
	return s.Update(ctx, func(tx Tx) error {
		rec, err := s.grantedDeployment(tx, c, grace)
		if err != nil {
			return err
		}
		if !rec.D.SavePlan {
			return conflict("deployment %q does not save its plan (save_plan is false); there is no summary to keep", rec.D.ID)
		}
		_, p, err := loadPlan(tx, c.Org, c.Deployment)
		if err != nil {
			return err
		}
		now := s.TimeNow()
		exp := now.Add(time.Duration(rec.D.PlanTTLSeconds) * time.Second)
		p.Summary, p.SavedAt, p.ExpiresAt = &sum, &now, &exp
		return tx.PutDoc(KindPlan, c.Org, c.Deployment, p)
	})
}

// planRef is what the agent needs to check the saved plan an apply runs: the plan deployment and
// the state the plan was made against.
func planRef(tx Tx, rec *DeploymentRecord) (*api.PlanRef, error) {
	if rec.D.PlanOf == "" {
		return nil, nil
	}
	var p api.SavedPlan
	ok, err := tx.GetDoc(KindPlan, rec.Org, rec.D.PlanOf, &p)
	if err != nil {
		return nil, err
	}
	ref := &api.PlanRef{DeploymentID: rec.D.PlanOf}
	if ok && p.Summary != nil {
		ref.Lineage, ref.Serial = p.Summary.Lineage, p.Summary.Serial
	}
	return ref, nil
}

// needsSavedPlans reports whether running the deployment needs an agent that knows saved plans
// (api.ProtocolSavedPlans): an older one would run it as a plain plan or, worse, a plain apply.
func needsSavedPlans(d *api.Deployment) bool { return d.SavePlan || d.PlanOf != "" }
