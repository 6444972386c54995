package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Schedules and drift. A schedule queues a drift check of one state key at its cron times (UTC).
// Firing is a rule like any other: one transaction reads the schedule, moves its next-fire time
// on and queues the check, so across replicas over one PostgreSQL database each period fires
// once (the replica that loses the race retries, sees the time already moved and queues
// nothing), and the time survives restarts because it is stored. The next-fire time is the cron
// time after now, not after the missed one: periods missed while no orchestrator ran fire once.
// The check's job runner reports whether the plan found changes (RecordDrift), which marks the
// state key drifted or clears the mark.

// FiredSchedule is a schedule a sweep fired: the runner to wake, the check it queued.
type FiredSchedule struct {
	Org, ScheduleID, RunnerID, DeploymentID string
}

// CreateSchedule stores a schedule of org, refusing one beyond the schedules quota.
func (s *Store) CreateSchedule(ctx context.Context, org string, in api.ScheduleInput) (*api.Schedule, error) {
	overQuota, err := s.objectQuota(ctx, KindSchedule, org, "schedule", "--max-schedules-per-org", s.quotas.Schedules)
	if err != nil {
		return nil, err
	}
	return createOrgObject(ctx, s, KindSchedule, org, in.ID, "schedule", func(tx Tx, now time.Time) (api.Schedule, error) {
		if overQuota != nil {
			return api.Schedule{}, overQuota
		}
		sch := api.Schedule{CreatedAt: now}
		return sch, applyScheduleInput(tx, org, &sch, in, now)
	})
}

// applyScheduleInput sets a schedule's input, the runner's state storage, and, when the cron
// expression is new, the next fire time after now.
func applyScheduleInput(tx Tx, org string, sch *api.Schedule, in api.ScheduleInput, now time.Time) error {
	runner, err := getRunnerTx(tx, org, in.RunnerID)
	if err != nil {
		return Invalid("runner_id", "runner %q does not exist in organisation %q", in.RunnerID, org)
	}
	c, err := api.ParseCron(in.Cron)
	if err != nil {
		return Invalid("cron", "%v", err)
	}
	enabled := in.IsEnabled()
	in.Enabled = &enabled
	in.OnDrift = cmp.Or(in.OnDrift, api.OnDriftNone)
	if in.Cron != sch.Cron || sch.NextFireAt.IsZero() {
		sch.NextFireAt = c.Next(now)
	}
	sch.ScheduleInput, sch.StateStorageID, sch.UpdatedAt = in, runner.StateStorageID, now
	return nil
}

// GetSchedule returns a schedule of org.
func (s *Store) GetSchedule(ctx context.Context, org, id string) (*api.Schedule, error) {
	return viewOrgObject[api.Schedule](ctx, s, KindSchedule, org, id, "schedule")
}

// ListSchedules returns the schedules of org in id order, without their inline archives (they
// can be megabytes each; GetSchedule has them).
func (s *Store) ListSchedules(ctx context.Context, org string) ([]api.Schedule, error) {
	list, err := listOrgObjects[api.Schedule](ctx, s, KindSchedule, org)
	for i := range list {
		list[i].Source.Inline = nil // as deployment lists leave sources out
	}
	return list, err
}

// UpdateSchedule replaces a schedule's settings; a new cron expression starts over from now.
func (s *Store) UpdateSchedule(ctx context.Context, org string, in api.ScheduleInput) (*api.Schedule, error) {
	return updateOrgObject(ctx, s, KindSchedule, org, in.ID, "schedule", func(tx Tx, sch *api.Schedule, now time.Time) error {
		return applyScheduleInput(tx, org, sch, in, now)
	})
}

// DeleteSchedule removes a schedule; its checks already queued run, and the drift marks stay
// until a check clears them.
func (s *Store) DeleteSchedule(ctx context.Context, org, id string) error {
	return s.Update(ctx, func(tx Tx) error {
		if _, err := getOrgObject[api.Schedule](tx, KindSchedule, org, id, "schedule"); err != nil {
			return err
		}
		return tx.DeleteDoc(KindSchedule, org, id)
	})
}

// FireDueSchedules fires every enabled schedule whose next-fire time has come: it finds them in
// a snapshot, then fires each in a transaction of its own that checks again, so a replica that
// fired it meanwhile wins and this one does nothing.
func (s *Store) FireDueSchedules(ctx context.Context) ([]FiredSchedule, error) {
	now := s.TimeNow()
	type ref struct{ org, id string }
	var due []ref
	err := s.view(ctx, func(tx Tx) error {
		due = due[:0]
		return tx.ListAllDocs(KindSchedule, func(org string, data []byte) (bool, error) {
			var sch api.Schedule
			if err := Unmarshal(data, &sch); err != nil {
				return false, err
			}
			if sch.IsEnabled() && !sch.NextFireAt.After(now) {
				due = append(due, ref{org, sch.ID})
			}
			return true, nil
		})
	})
	if err != nil {
		return nil, err
	}
	var fired []FiredSchedule
	var errs []error
	for _, d := range due {
		f, err := s.fireSchedule(ctx, d.org, d.id)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("fire schedule %s/%s: %w", d.org, d.id, err))
		case f != nil:
			fired = append(fired, *f)
		}
	}
	return fired, errors.Join(errs...)
}

// fireSchedule fires one schedule if it is still due: moves its next-fire time to the cron
// time after now and queues a drift check, unless the previous check has not ended (checks of
// one schedule never pile up) or the organisation's queue is full; either is noted on the
// schedule.
func (s *Store) fireSchedule(ctx context.Context, org, id string) (*FiredSchedule, error) {
	quotaErr := cmp.Or(s.checkQueueQuota(ctx, org, s.quotas.QueuedDeployments), s.checkLogQuota(ctx, org, s.quotas.LogBytes))
	if _, refused := AsRefusal(quotaErr); quotaErr != nil && !refused {
		return nil, quotaErr
	}
	var fired *FiredSchedule
	err := s.Update(ctx, func(tx Tx) error {
		fired = nil
		var sch api.Schedule
		ok, err := tx.GetDoc(KindSchedule, org, id, &sch)
		now := s.TimeNow()
		if err != nil || !ok || !sch.IsEnabled() || sch.NextFireAt.After(now) {
			return err // deleted, disabled or fired by another replica meanwhile
		}
		c, err := api.ParseCron(sch.Cron)
		if err != nil {
			return fmt.Errorf("stored cron expression: %w", err)
		}
		sch.NextFireAt = c.Next(now)
		sch.LastFiredAt = &now
		sch.LastMessage = ""
		if busy, err := checkRunning(tx, org, sch.LastDeploymentID); err != nil {
			return err
		} else if busy {
			sch.LastMessage = fmt.Sprintf("fired at %s without a check: the previous check %s has not ended", now.Format(time.RFC3339), sch.LastDeploymentID)
			return tx.PutDoc(KindSchedule, org, id, sch)
		}
		if quotaErr != nil {
			sch.LastMessage = fmt.Sprintf("fired at %s without a check: %v", now.Format(time.RFC3339), quotaErr)
			return tx.PutDoc(KindSchedule, org, id, sch)
		}
		rec, err := s.queueDriftCheck(ctx, tx, org, id, &sch)
		if _, refused := AsRefusal(err); refused {
			sch.LastMessage = fmt.Sprintf("fired at %s without a check: %v", now.Format(time.RFC3339), err)
			return tx.PutDoc(KindSchedule, org, id, sch)
		}
		if err != nil {
			return err
		}
		sch.LastDeploymentID = rec.D.ID
		fired = &FiredSchedule{Org: org, ScheduleID: id, RunnerID: sch.RunnerID, DeploymentID: rec.D.ID}
		return tx.PutDoc(KindSchedule, org, id, sch)
	})
	return fired, err
}

// checkRunning reports whether deployment id of org exists and has not ended.
func checkRunning(tx Tx, org, id string) (bool, error) {
	if id == "" {
		return false, nil
	}
	rec, ok, err := tx.LoadDeployment(org, id)
	if err != nil || !ok {
		return false, err
	}
	return !rec.D.Status.Terminal(), nil
}

// RecordDrift keeps the result of a drift check its job runner reports: a plan with changes
// marks the state key drifted with the summary, one without clears the mark; the schedule that
// queued the check shows it as its last check. A re-sent report writes the same again.
func (s *Store) RecordDrift(ctx context.Context, c JobTokenPayload, rep api.DriftReport, grace time.Duration) error {
	return s.Update(ctx, func(tx Tx) error {
		rec, err := s.grantedDeployment(tx, c, grace)
		if err != nil {
			return err
		}
		if !rec.D.DriftCheck {
			return conflict("deployment %q is not a drift check; only the plans a schedule queues report drift", rec.D.ID)
		}
		_, st, err := runnerAndStorage(tx, rec)
		if err != nil {
			return err
		}
		d := api.Drift{StateStorageID: st.ID, StateKey: rec.D.StateKey, Drifted: rep.Drifted, DeploymentID: rec.D.ID,
			ScheduleID: rec.D.ScheduleID, CheckedAt: s.TimeNow()}
		if rep.Drifted {
			d.Summary = rep.Summary
			err = tx.PutDoc(KindDrift, c.Org, stateDocID(st.ID, rec.D.StateKey), d)
		} else {
			err = tx.DeleteDoc(KindDrift, c.Org, stateDocID(st.ID, rec.D.StateKey))
		}
		if err != nil {
			return err
		}
		if rec.D.SavePlan {
			if err := settleDriftPlan(tx, c.Org, rec, rep.Drifted, s.TimeNow()); err != nil {
				return err
			}
		}
		if rec.D.ScheduleID == "" {
			return nil
		}
		var sch api.Schedule
		if ok, err := tx.GetDoc(KindSchedule, c.Org, rec.D.ScheduleID, &sch); err != nil || !ok {
			return err
		}
		sch.LastCheck = &d
		if rec.D.SavePlan && rep.Drifted {
			sch.LastMessage = fmt.Sprintf("drift found; the check's plan %s is kept for review: approve it, then apply it "+
				"(outpost deployment approve %s; outpost deployment apply-plan %s)", rec.D.ID, rec.D.ID, rec.D.ID)
		}
		return tx.PutDoc(KindSchedule, c.Org, rec.D.ScheduleID, sch)
	})
}

// driftsOf returns org's drift marks of the states of a state storage, by state key.
func driftsOf(tx Tx, org, storage string) (map[string]*api.Drift, error) {
	out := map[string]*api.Drift{}
	err := tx.ListDocs(KindDrift, org, func(data []byte) (bool, error) {
		var d api.Drift
		if err := Unmarshal(data, &d); err != nil {
			return false, err
		}
		if d.StateStorageID == storage {
			out[d.StateKey] = &d
		}
		return true, nil
	})
	return out, err
}

// withDrifts adds the drift marks to the states of a storage; a drifted state key no agent
// reported (one in an s3, gcs or azurerm storage) is listed with its drift only.
func withDrifts(states []api.State, drifts map[string]*api.Drift, storage string) []api.State {
	for i := range states {
		if d, ok := drifts[states[i].StateKey]; ok {
			states[i].Drift = d
			delete(drifts, states[i].StateKey)
		}
	}
	if len(drifts) == 0 {
		return states
	}
	for key, d := range drifts {
		states = append(states, api.State{StateStorageID: storage, ReportedState: api.ReportedState{StateKey: key, Versions: []api.StateVersion{}}, Drift: d})
	}
	slices.SortFunc(states, func(a, b api.State) int { return cmp.Compare(a.StateKey, b.StateKey) })
	return states
}

// DriftedStates counts the drifted state keys of each organisation, for the metrics gauge.
func (s *Store) DriftedStates(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	err := s.view(ctx, func(tx Tx) error {
		clear(out)
		return tx.ListAllDocs(KindDrift, func(org string, _ []byte) (bool, error) {
			out[org]++
			return true, nil
		})
	})
	return out, err
}

// queueDriftCheck queues the schedule's plan, marked as its drift check, on its runner. A runner
// that is gone is a refusal the schedule notes (LastMessage), not an error of the sweep.
func (s *Store) queueDriftCheck(ctx context.Context, tx Tx, org, id string, sch *api.Schedule) (*DeploymentRecord, error) {
	var runner api.Runner
	ok, err := tx.GetDoc(KindRunner, org, sch.RunnerID, &runner)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, Invalid("runner_id", "runner %q does not exist in organisation %q", sch.RunnerID, org)
	}
	d := api.Deployment{RunnerID: sch.RunnerID, Operation: api.OperationPlan, Variables: sch.Variables, StateKey: sch.StateKey,
		TimeoutSeconds: cmp.Or(sch.TimeoutSeconds, runner.JobTimeoutSeconds), DriftCheck: true, ScheduleID: id}
	if sch.OnDrift == api.OnDriftQueueApply {
		// The apply that drift queues is the check's own plan, saved for review: approved, it is
		// applied exactly (POST …/deployments/{id}/apply), as every saved plan is.
		st, err := getStorageTx(tx, org, runner.StateStorageID)
		if err != nil {
			return nil, err
		}
		if st.Type != api.StateStorageKubernetes {
			return nil, Invalid("on_drift", "queue_apply keeps the drift check's plan for approval next to the state in the cluster, which only a kubernetes "+
				"state storage has; runner %q keeps state in a %s state storage (%q): set on_drift to none, or use a runner with a kubernetes state storage",
				sch.RunnerID, st.Type, st.ID)
		}
		d.SavePlan, d.PlanTTLSeconds = true, api.DefaultPlanTTLSeconds
	}
	rec, err := s.insertDeployment(ctx, tx, org, d, sch.Source)
	if err != nil || !d.SavePlan {
		return rec, err
	}
	return rec, tx.PutDoc(KindPlan, org, rec.D.ID, api.SavedPlan{DeploymentID: rec.D.ID, Status: api.PlanPending})
}

// settleDriftPlan ends the saved plan of a drift check that found nothing: there is nothing to
// review or apply, and the job runner kept no plan file.
func settleDriftPlan(tx Tx, org string, rec *DeploymentRecord, drifted bool, now time.Time) error {
	if drifted {
		return nil
	}
	var p api.SavedPlan
	if ok, err := tx.GetDoc(KindPlan, org, rec.D.ID, &p); err != nil || !ok {
		return err
	}
	p.Status, p.DiscardedBy, p.DiscardedAt = api.PlanDiscarded, "the drift check (no changes)", &now
	return tx.PutDoc(KindPlan, org, rec.D.ID, p)
}
