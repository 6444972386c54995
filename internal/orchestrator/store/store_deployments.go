package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"slices"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
)

// DeploymentRecord is a deployment as stored: the public view plus the job lease bookkeeping the
// API does not show. The source lives in its own bucket.
type DeploymentRecord struct {
	Org string `json:"org"`
	// Seq orders deployments by creation; it keys the list and queue indexes.
	Seq uint64         `json:"seq"`
	D   api.Deployment `json:"deployment"`
	// Fencing is the last fencing number granted for this deployment; it only grows.
	Fencing int64 `json:"fencing"`
	// Lease is the job lease currently held; nil when none is.
	Lease *leaseRecord `json:"lease,omitempty"`
	// LogCommitted is the log offset of the current grant as the writer counts it: bytes
	// dropped beyond the cap are counted, so the writer never has to know about the cap.
	LogCommitted int64 `json:"log_committed"`
	// Traceparent is the W3C traceparent of the enqueue span, handed to the agent with every
	// claim (api.Placement.Traceparent); empty when the enqueue was not traced.
	Traceparent string `json:"traceparent,omitempty"`

	// What the record looked like when loaded, so saveDeployment can keep indexes and counters
	// right.
	savedStatus api.Status
	savedLeased bool
}

// MarkSaved notes the record as the engine now holds it; an engine calls it after it loaded or
// wrote the record.
func (r *DeploymentRecord) MarkSaved() { r.savedStatus, r.savedLeased = r.D.Status, r.Lease != nil }

// Saved is the status and whether a job lease was held when the record was last loaded or
// written, so an engine can tell which of its indexes and counters a write changes.
func (r *DeploymentRecord) Saved() (status api.Status, leased bool) {
	return r.savedStatus, r.savedLeased
}

// leaseRecord is a granted job lease.
type leaseRecord struct {
	Fencing   int64     `json:"fencing"`
	ExpiresAt time.Time `json:"expires_at"`
	Instance  string    `json:"instance"`
}

var IDEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newDeploymentID returns a random id that is a DNS-1123 label, since agents put it into
// Kubernetes Job names.
func newDeploymentID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate deployment id: %w", err)
	}
	return "dep-" + IDEncoding.EncodeToString(b), nil
}

func loadDeployment(tx Tx, org, id string) (*DeploymentRecord, error) {
	rec, ok, err := tx.LoadDeployment(org, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, NotFound("deployment %q does not exist in organisation %q", id, org)
	}
	return rec, nil
}

// loadIndexedDeployment loads a deployment an index points at. A missing one there is corruption,
// not the caller's fault, so it is an internal error (and never a refusal that would commit).
func loadIndexedDeployment(tx Tx, org, id string) (*DeploymentRecord, error) {
	rec, err := loadDeployment(tx, org, id)
	if _, refused := AsRefusal(err); refused {
		return nil, fmt.Errorf("index entry for missing deployment %s/%s", org, id)
	}
	return rec, err
}

// finishDeployment ends a deployment in a terminal status and releases its job lease; from its
// end on, retention counts.
func finishDeployment(tx Tx, rec *DeploymentRecord, status api.Status, reason api.Reason, message string, now time.Time) error {
	rec.D.Status = status
	rec.D.Reason, rec.D.Message, rec.D.Detail = reason, message, ""
	rec.D.FinishedAt = &now
	rec.Lease = nil
	return tx.SaveDeployment(rec)
}

// CreateDeployment queues a deployment on a runner of the organisation. A runner that requires
// approval takes no apply or destroy this way (only the apply of an approved saved plan,
// ApplyPlan); a saved plan needs a kubernetes state storage, since its plan file is kept with
// the state in the cluster.
func (s *Store) CreateDeployment(ctx context.Context, org string, in api.DeploymentInput) (*api.Deployment, error) {
	if err := s.checkQueueQuota(ctx, org, s.quotas.QueuedDeployments); err != nil {
		return nil, err
	}
	if err := s.checkLogQuota(ctx, org, s.quotas.LogBytes); err != nil {
		return nil, err
	}
	var out api.Deployment
	err := s.Update(ctx, func(tx Tx) error {
		var runner api.Runner
		ok, err := tx.GetDoc(KindRunner, org, in.RunnerID, &runner)
		if err != nil {
			return err
		}
		if !ok {
			return Invalid("runner_id", "runner %q does not exist in organisation %q", in.RunnerID, org)
		}
		if runner.RequireApproval && in.Operation != api.OperationPlan {
			return Refuse(api.CodeApprovalRequired, "runner %q requires approval: an %s runs only as the apply of an approved saved plan. "+
				"Queue a plan with save_plan: true (plan_destroy: true for a destroy), approve it, then apply it (POST .../deployments/{id}/apply; outpost deployment apply-plan)",
				in.RunnerID, in.Operation)
		}
		if in.SavePlan {
			st, err := getStorageTx(tx, org, runner.StateStorageID)
			if err != nil {
				return err
			}
			if st.Type != api.StateStorageKubernetes {
				return Invalid("save_plan", "runner %q keeps state in a %s state storage (%q); a saved plan is kept next to the state in the cluster, "+
					"which only a kubernetes state storage has. Plan without save_plan, or use a runner whose state storage is of type kubernetes", in.RunnerID, st.Type, st.ID)
			}
		}
		timeout := in.TimeoutSeconds
		if timeout == 0 {
			timeout = runner.JobTimeoutSeconds
		}
		d := api.Deployment{
			RunnerID: in.RunnerID, Operation: in.Operation, Variables: in.Variables,
			StateKey: in.StateKey, TimeoutSeconds: timeout, SavePlan: in.SavePlan, PlanDestroy: in.PlanDestroy,
		}
		if in.SavePlan {
			d.PlanTTLSeconds = cmp.Or(in.PlanTTLSeconds, api.DefaultPlanTTLSeconds)
		}
		rec, err := s.insertDeployment(ctx, tx, org, d, in.Source)
		if err != nil {
			return err
		}
		if in.SavePlan {
			if err := tx.PutDoc(KindPlan, org, rec.D.ID, api.SavedPlan{DeploymentID: rec.D.ID, Status: api.PlanPending}); err != nil {
				return err
			}
		}
		out = rec.D
		out.Source = in.Source
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// insertDeployment queues d, given its runner, operation, variables, state key and timeout,
// with src as its source, under a new id. The enqueue's span in ctx, when traced, is the parent
// of everything the deployment does.
func (s *Store) insertDeployment(ctx context.Context, tx Tx, org string, d api.Deployment, src api.Source) (*DeploymentRecord, error) {
	id, err := newDeploymentID()
	if err != nil {
		return nil, err
	}
	if _, taken, err := tx.LoadDeployment(org, id); err != nil || taken {
		return nil, cmp.Or(err, fmt.Errorf("deployment id %s collided; retry", id))
	}
	now := s.TimeNow()
	d.ID, d.Status, d.Attempt, d.CreatedAt = id, api.StatusQueued, 1, now
	rec := &DeploymentRecord{Org: org, D: d}
	if tp := tracing.Traceparent(ctx); tp != "" {
		rec.Traceparent, rec.D.TraceID = tp, tracing.TraceID(tp)
	}
	if err := tx.EnsureOrg(org, now); err != nil {
		return nil, err
	}
	if err := tx.PutDoc(KindSource, org, id, src); err != nil {
		return nil, err
	}
	return rec, tx.InsertDeployment(rec)
}

func loadSource(tx Tx, org, id string) (api.Source, error) {
	var src api.Source
	_, err := tx.GetDoc(KindSource, org, id, &src)
	return src, err
}

// deploymentView is the API's view of a stored deployment: its record with the source.
func deploymentView(tx Tx, rec *DeploymentRecord) (*api.Deployment, error) {
	out := rec.D
	var err error
	out.Source, err = loadSource(tx, rec.Org, rec.D.ID)
	return &out, err
}

// GetDeployment returns a deployment with its source.
func (s *Store) GetDeployment(ctx context.Context, org, id string) (*api.Deployment, error) {
	return viewOne(ctx, s, func(tx Tx) (*api.Deployment, error) {
		rec, err := loadDeployment(tx, org, id)
		if err != nil {
			return nil, err
		}
		return deploymentView(tx, rec)
	})
}

// ListDeployments lists newest first, without sources (they can be megabytes each).
func (s *Store) ListDeployments(ctx context.Context, org, runnerID string, status api.Status) ([]api.Deployment, error) {
	out := []api.Deployment{}
	err := s.view(ctx, func(tx Tx) error {
		out = out[:0]
		return tx.ListDeployments(org, runnerID, status, func(rec *DeploymentRecord) (bool, error) {
			out = append(out, rec.D)
			return true, nil
		})
	})
	return out, err
}

// PageDeployments returns one page of org's deployments, newest first: of those that match
// runnerID and status (either empty for any) and that keep accepts, the limit after the first
// skip; more says whether another follows. It reads no further than the page, so the first
// pages of a long history cost what a short one does.
func (s *Store) PageDeployments(ctx context.Context, org, runnerID string, status api.Status, keep func(*api.Deployment) bool, skip, limit int) (page []api.Deployment, more bool, err error) {
	err = s.view(ctx, func(tx Tx) error {
		page, more = page[:0], false
		seen := 0
		return tx.ListDeployments(org, runnerID, status, func(rec *DeploymentRecord) (bool, error) {
			if !keep(&rec.D) {
				return true, nil
			}
			seen++
			switch {
			case seen <= skip:
				return true, nil
			case len(page) == limit:
				more = true
				return false, nil
			}
			page = append(page, rec.D)
			return true, nil
		})
	})
	return page, more, err
}

// CancelDeployment ends a queued deployment at once and asks the agent to stop a claimed or
// running one (the agent sees a cancel directive in its next poll).
func (s *Store) CancelDeployment(ctx context.Context, org, id string) (*api.Deployment, error) {
	var out *api.Deployment
	err := s.Update(ctx, func(tx Tx) error {
		rec, err := loadDeployment(tx, org, id)
		if err != nil {
			return err
		}
		now := s.TimeNow()
		if _, err := settleLease(tx, rec, now); err != nil {
			return err
		}
		switch st := rec.D.Status; {
		case st.Terminal():
			return conflict("deployment %q already ended with status %s; nothing to cancel", id, st)
		case st == api.StatusQueued:
			if err := finishDeployment(tx, rec, api.StatusCanceled, api.ReasonCanceled, "canceled before it started", now); err != nil {
				return err
			}
			rec.D.CancelRequested = true
		default:
			rec.D.CancelRequested = true
		}
		if err := tx.SaveDeployment(rec); err != nil {
			return err
		}
		out, err = deploymentView(tx, rec)
		return err
	})
	return out, err
}

// QueueDepths counts the queued deployments of every runner that has any.
func (s *Store) QueueDepths(ctx context.Context) ([]QueueDepth, error) {
	var out []QueueDepth
	err := s.view(ctx, func(tx Tx) error {
		var err error
		out, err = tx.QueueDepths()
		return err
	})
	return out, err
}

// ListEvents returns the deployment's events in timeline order: by attempt, then time to the
// second (the cluster's timestamps have no finer grain), then step, then sequence number. Each
// has its step, also those of agents that send none (api.Event.StepOf).
func (s *Store) ListEvents(ctx context.Context, org, id string) ([]api.Event, error) {
	var out []api.Event
	err := s.view(ctx, func(tx Tx) error {
		if _, err := loadDeployment(tx, org, id); err != nil {
			return err
		}
		var err error
		out, err = tx.ListEvents(org, id)
		return err
	})
	for i := range out {
		out[i].Step = out[i].StepOf()
	}
	slices.SortStableFunc(out, func(a, b api.Event) int {
		return cmp.Or(cmp.Compare(a.Attempt, b.Attempt), a.Time.Truncate(time.Second).Compare(b.Time.Truncate(time.Second)),
			cmp.Compare(a.Step.Rank(), b.Step.Rank()), cmp.Compare(a.Seq, b.Seq))
	})
	return out, err
}

// GetOutputs returns a deployment's outputs.
func (s *Store) GetOutputs(ctx context.Context, org, id string) (api.Outputs, error) {
	out := api.Outputs{}
	err := s.view(ctx, func(tx Tx) error {
		if _, err := loadDeployment(tx, org, id); err != nil {
			return err
		}
		_, err := tx.GetDoc(KindOutputs, org, id, &out)
		return err
	})
	return out, err
}

// StatusCounts returns the number of deployments per status, for the metrics gauge.
func (s *Store) StatusCounts(ctx context.Context) (map[api.Status]int64, error) {
	var out map[api.Status]int64
	err := s.view(ctx, func(tx Tx) error {
		var err error
		out, err = tx.StatusCounts()
		return err
	})
	return out, err
}
