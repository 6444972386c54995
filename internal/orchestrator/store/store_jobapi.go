package store

import (
	"context"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// The store side of the job API: what the job runner of an attempt may read and write with its
// job token (log appends are in store_logs.go).

// grantedDeployment loads the deployment a job token speaks for and checks the token is for its
// current grant (settling an expired job lease first, so a superseded attempt learns it at once).
func (s *Store) grantedDeployment(tx Tx, c JobTokenPayload, grace time.Duration) (*DeploymentRecord, error) {
	rec, err := loadDeployment(tx, c.Org, c.Deployment)
	if err != nil {
		return nil, &Refusal{Code: api.CodeUnauthorized, AuthReason: AuthReasonJobToken,
			Message: "job token refused: its deployment no longer exists"}
	}
	now := s.TimeNow()
	if tx.Writable() {
		if _, err := settleLease(tx, rec, now); err != nil {
			return nil, err
		}
	}
	return rec, checkJobToken(rec, c, now, grace)
}

// CheckJobGrant tells, in a read transaction and before the body is read, whether a genuine
// token still speaks for its deployment; the write that follows checks again.
func (s *Store) CheckJobGrant(ctx context.Context, c JobTokenPayload, grace time.Duration) error {
	return s.view(ctx, func(tx Tx) error {
		_, err := s.grantedDeployment(tx, c, grace)
		return err
	})
}

// PutOutputs replaces a deployment's outputs, and the count of those left out of them.
func (s *Store) PutOutputs(ctx context.Context, c JobTokenPayload, outputs api.Outputs, omitted int, grace time.Duration) error {
	return s.Update(ctx, func(tx Tx) error {
		rec, err := s.grantedDeployment(tx, c, grace)
		if err != nil {
			return err
		}
		if rec.D.OutputsOmitted != omitted {
			rec.D.OutputsOmitted = omitted
			if err := tx.SaveDeployment(rec); err != nil {
				return err
			}
		}
		return tx.PutDoc(KindOutputs, c.Org, c.Deployment, outputs)
	})
}

// JobSpec returns the job spec of the attempt a job token speaks for.
func (s *Store) JobSpec(ctx context.Context, c JobTokenPayload, grace time.Duration) (*api.JobSpec, error) {
	var out *api.JobSpec
	err := s.view(ctx, func(tx Tx) error {
		rec, err := s.grantedDeployment(tx, c, grace)
		if err != nil {
			return err
		}
		out, err = jobSpecOf(tx, rec)
		return err
	})
	return out, err
}

// jobSpecOf is what the job runner of the current attempt needs: the deployment with its source,
// and the state storage as it is now.
func jobSpecOf(tx Tx, rec *DeploymentRecord) (*api.JobSpec, error) {
	_, st, err := runnerAndStorage(tx, rec)
	if err != nil {
		return nil, err
	}
	src, err := loadSource(tx, rec.Org, rec.D.ID)
	if err != nil {
		return nil, err
	}
	return &api.JobSpec{
		DeploymentID: rec.D.ID, Attempt: rec.D.Attempt, RunnerID: rec.D.RunnerID, Operation: rec.D.Operation,
		Source: src, Variables: rec.D.Variables, StateKey: rec.D.StateKey, StateStorage: *st, DriftCheck: rec.D.DriftCheck,
		SavePlan: rec.D.SavePlan, PlanDestroy: rec.D.PlanDestroy, ApplyPlan: rec.D.PlanOf,
	}, nil
}
