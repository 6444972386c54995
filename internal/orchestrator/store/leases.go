package store

import (
	"context"
	"fmt"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// settleLease applies the job lease rules to a deployment whose job lease has run out:
//
//   - a running apply or destroy becomes lost: it may have changed infrastructure half-way, so
//     re-running it without a person looking is not safe;
//   - a deployment whose cancel was requested, or whose runner was deleted, ends canceled;
//   - anything else (claimed, or a running plan) returns to the queue with the next attempt.
//
// Every transaction that acts on a deployment settles it first, so the outcome never depends on
// when the sweeper last ran. It reports whether rec changed (and was saved).
func settleLease(tx Tx, rec *DeploymentRecord, now time.Time) (bool, error) {
	if rec.Lease == nil || now.Before(rec.Lease.ExpiresAt) {
		return false, nil
	}
	l := rec.Lease
	runnerExists, err := tx.HasDoc(KindRunner, rec.Org, rec.D.RunnerID)
	if err != nil {
		return false, err
	}
	switch {
	case rec.D.Status == api.StatusRunning && rec.D.Operation != api.OperationPlan:
		return true, finishDeployment(tx, rec, api.StatusLost, api.ReasonLeaseExpired, fmt.Sprintf(
			"the agent's job lease on attempt %d (instance %q) expired at %s while the %s was running; "+
				"it is not re-run automatically because it may have changed infrastructure half-way; "+
				"check the state and start a new deployment",
			rec.D.Attempt, l.Instance, l.ExpiresAt.Format(time.RFC3339), rec.D.Operation), now)
	case rec.D.CancelRequested:
		return true, finishDeployment(tx, rec, api.StatusCanceled, api.ReasonCanceled,
			fmt.Sprintf("cancel was requested and the agent's job lease expired at %s", l.ExpiresAt.Format(time.RFC3339)), now)
	case !runnerExists:
		return true, finishDeployment(tx, rec, api.StatusCanceled, api.ReasonRunnerDeleted,
			fmt.Sprintf("runner %q was deleted and its agent's job lease expired", rec.D.RunnerID), now)
	}
	prev := rec.D.Attempt
	rec.D.Status = api.StatusQueued
	rec.D.Attempt++
	rec.D.ClaimedAt, rec.D.StartedAt = nil, nil
	rec.D.Reason, rec.D.Detail = api.ReasonLeaseExpired, ""
	rec.D.Message = fmt.Sprintf("the agent's job lease on attempt %d (instance %q) expired at %s before it finished; queued again as attempt %d",
		prev, l.Instance, l.ExpiresAt.Format(time.RFC3339), rec.D.Attempt)
	rec.Lease = nil
	return true, tx.SaveDeployment(rec)
}

// ExpireLeases settles every lease that has run out and returns the runners ("org/runner")
// whose deployments changed, so their long polls can be woken.
func (s *Store) ExpireLeases(ctx context.Context) ([]string, error) {
	now := s.TimeNow()
	var due []LeaseRef
	// A read pass first: most sweeps find nothing and then cost no write transaction.
	err := s.view(ctx, func(tx Tx) error {
		var err error
		due, err = tx.ExpiredLeases(now)
		return err
	})
	if err != nil || len(due) == 0 {
		return nil, err
	}
	touched := map[string]bool{}
	err = s.Update(ctx, func(tx Tx) error {
		// Read again under the write lock: another replica may have settled some meanwhile.
		due, err := tx.ExpiredLeases(now)
		if err != nil {
			return err
		}
		for _, ref := range due {
			rec, found, err := tx.LoadDeployment(ref.Org, ref.Deployment)
			if err != nil {
				return err
			}
			if !found {
				continue
			}
			changed, err := settleLease(tx, rec, now)
			if err != nil {
				return err
			}
			if changed {
				touched[ref.Org+"/"+ref.Runner] = true
			}
		}
		return nil
	})
	out := make([]string, 0, len(touched))
	for k := range touched {
		out = append(out, k)
	}
	return out, err
}
