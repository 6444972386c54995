package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// AdminClient calls the admin side of the API for one organisation.
type AdminClient struct {
	t   *transport
	org string
}

// NewAdminClient returns a client for organisation org, authenticating with an admin token.
func NewAdminClient(baseURL, org, token string, opts ...Option) (*AdminClient, error) {
	if err := api.ValidateID("org_id", org); err != nil {
		return nil, err
	}
	if token == "" {
		return nil, errors.New("admin token is empty")
	}
	t, err := newTransport(baseURL, bearer(token), opts)
	if err != nil {
		return nil, err
	}
	return &AdminClient{t: t, org: org}, nil
}

// Org is the organisation the client works in.
func (c *AdminClient) Org() string { return c.org }

func (c *AdminClient) path(parts ...string) string {
	p := "/api/v1/orgs/" + url.PathEscape(c.org)
	for _, s := range parts {
		p += "/" + url.PathEscape(s)
	}
	return p
}

// CreateRunner registers a runner. api.ErrConflict when the id is taken.
func (c *AdminClient) CreateRunner(ctx context.Context, in api.RunnerInput) (*api.Runner, error) {
	return roundTrip[api.Runner](ctx, c.t, call{method: http.MethodPost, path: c.path("runners"), retryable: retry.Unapplied}, in)
}

// GetRunner reads a runner. api.ErrNotFound when it does not exist.
func (c *AdminClient) GetRunner(ctx context.Context, id string) (*api.Runner, error) {
	return roundTrip[api.Runner](ctx, c.t, call{method: http.MethodGet, path: c.path("runners", id), retryable: retry.Idempotent}, nil)
}

// ListRunners lists the organisation's runners.
func (c *AdminClient) ListRunners(ctx context.Context) ([]api.Runner, error) {
	return items(roundTrip[api.List[api.Runner]](ctx, c.t, call{method: http.MethodGet, path: c.path("runners"), retryable: retry.Idempotent}, nil))
}

// UpdateRunner replaces a runner's mutable fields.
func (c *AdminClient) UpdateRunner(ctx context.Context, in api.RunnerInput) (*api.Runner, error) {
	return roundTrip[api.Runner](ctx, c.t, call{method: http.MethodPut, path: c.path("runners", in.ID), retryable: retry.Idempotent}, in)
}

// DeleteRunner removes a runner; its queued deployments are canceled.
func (c *AdminClient) DeleteRunner(ctx context.Context, id string) error {
	return c.t.do(ctx, call{method: http.MethodDelete, path: c.path("runners", id), retryable: retry.Idempotent})
}

// CreateStateStorage registers a state storage. api.ErrConflict when the id is taken.
func (c *AdminClient) CreateStateStorage(ctx context.Context, in api.StateStorageInput) (*api.StateStorage, error) {
	return roundTrip[api.StateStorage](ctx, c.t, call{method: http.MethodPost, path: c.path("state-storages"), retryable: retry.Unapplied}, in)
}

// GetStateStorage reads a state storage. api.ErrNotFound when it does not exist.
func (c *AdminClient) GetStateStorage(ctx context.Context, id string) (*api.StateStorage, error) {
	return roundTrip[api.StateStorage](ctx, c.t, call{method: http.MethodGet, path: c.path("state-storages", id), retryable: retry.Idempotent}, nil)
}

// ListStateStorages lists the organisation's state storages.
func (c *AdminClient) ListStateStorages(ctx context.Context) ([]api.StateStorage, error) {
	return items(roundTrip[api.List[api.StateStorage]](ctx, c.t, call{method: http.MethodGet, path: c.path("state-storages"), retryable: retry.Idempotent}, nil))
}

// UpdateStateStorage replaces a state storage's fields.
func (c *AdminClient) UpdateStateStorage(ctx context.Context, in api.StateStorageInput) (*api.StateStorage, error) {
	return roundTrip[api.StateStorage](ctx, c.t, call{method: http.MethodPut, path: c.path("state-storages", in.ID), retryable: retry.Idempotent}, in)
}

// DeleteStateStorage removes a state storage. api.ErrConflict while a runner uses it.
func (c *AdminClient) DeleteStateStorage(ctx context.Context, id string) error {
	return c.t.do(ctx, call{method: http.MethodDelete, path: c.path("state-storages", id), retryable: retry.Idempotent})
}

// ListStates lists the states of a kubernetes state storage as its agent reported them: their
// versions' metadata and lock holders.
func (c *AdminClient) ListStates(ctx context.Context, storageID string) ([]api.State, error) {
	return items(roundTrip[api.List[api.State]](ctx, c.t, call{method: http.MethodGet, path: c.path("state-storages", storageID, "states"), retryable: retry.Idempotent}, nil))
}

// GetState reads one state of a state storage as its agent reported it. The key goes into the
// path as it is: a valid state key (api.ValidateStateKey) holds only characters a path keeps.
func (c *AdminClient) GetState(ctx context.Context, storageID, key string) (*api.State, error) {
	if err := api.ValidateStateKey("key", key); err != nil {
		return nil, err
	}
	return roundTrip[api.State](ctx, c.t, call{method: http.MethodGet, path: c.path("state-storages", storageID, "states") + "/" + key, retryable: retry.Idempotent}, nil)
}

// CreateStateOperation asks for a show, diff or rollback of a state of a kubernetes state
// storage. The agent that serves the storage runs it; GetStateOperation reads its outcome.
func (c *AdminClient) CreateStateOperation(ctx context.Context, storageID string, in api.StateOperationRequest) (*api.StateOperation, error) {
	return roundTrip[api.StateOperation](ctx, c.t, call{method: http.MethodPost, path: c.path("state-storages", storageID, "operations"), retryable: retry.Unapplied}, in)
}

// GetStateOperation reads a state operation: its status and, once ended, its result.
func (c *AdminClient) GetStateOperation(ctx context.Context, id string) (*api.StateOperation, error) {
	return roundTrip[api.StateOperation](ctx, c.t, call{method: http.MethodGet, path: c.path("state-operations", id), retryable: retry.Idempotent}, nil)
}

// ListStateOperations lists the operations on a state storage, newest first: of one state key
// and one kind when they are not empty.
func (c *AdminClient) ListStateOperations(ctx context.Context, storageID, key string, kind api.StateOperationKind) ([]api.StateOperation, error) {
	q := url.Values{}
	if key != "" {
		q.Set("state_key", key)
	}
	if kind != "" {
		q.Set("kind", string(kind))
	}
	return items(roundTrip[api.List[api.StateOperation]](ctx, c.t, call{method: http.MethodGet, path: c.path("state-storages", storageID, "operations"), query: q, retryable: retry.Idempotent}, nil))
}

// CreateDeployment queues a deployment on a runner.
func (c *AdminClient) CreateDeployment(ctx context.Context, in api.DeploymentInput) (*api.Deployment, error) {
	return roundTrip[api.Deployment](ctx, c.t, call{method: http.MethodPost, path: c.path("deployments"), retryable: retry.Unapplied}, in)
}

// GetDeployment reads a deployment.
func (c *AdminClient) GetDeployment(ctx context.Context, id string) (*api.Deployment, error) {
	return roundTrip[api.Deployment](ctx, c.t, call{method: http.MethodGet, path: c.path("deployments", id), retryable: retry.Idempotent}, nil)
}

// DeploymentFilter narrows ListDeployments; empty fields match everything.
type DeploymentFilter struct {
	RunnerID string
	Status   api.Status
}

// ListDeployments lists deployments, newest first.
func (c *AdminClient) ListDeployments(ctx context.Context, f DeploymentFilter) ([]api.Deployment, error) {
	q := url.Values{}
	if f.RunnerID != "" {
		q.Set("runner_id", f.RunnerID)
	}
	if f.Status != "" {
		q.Set("status", string(f.Status))
	}
	return items(roundTrip[api.List[api.Deployment]](ctx, c.t, call{method: http.MethodGet, path: c.path("deployments"), query: q, retryable: retry.Idempotent}, nil))
}

// GetLogs reads a deployment's log from offset; limit 0 lets the server choose.
func (c *AdminClient) GetLogs(ctx context.Context, id string, offset, limit int64) (*api.LogChunk, error) {
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.FormatInt(limit, 10))
	}
	return roundTrip[api.LogChunk](ctx, c.t, call{method: http.MethodGet, path: c.path("deployments", id, "logs"), query: q, retryable: retry.Idempotent}, nil)
}

// GetOutputs reads a deployment's Terraform outputs.
func (c *AdminClient) GetOutputs(ctx context.Context, id string) (api.Outputs, error) {
	out, err := roundTrip[api.Outputs](ctx, c.t, call{method: http.MethodGet, path: c.path("deployments", id, "outputs"), retryable: retry.Idempotent}, nil)
	if err != nil {
		return nil, err
	}
	return *out, nil
}

// ListEvents lists the events of a deployment's attempts.
func (c *AdminClient) ListEvents(ctx context.Context, id string) ([]api.Event, error) {
	return items(roundTrip[api.List[api.Event]](ctx, c.t, call{method: http.MethodGet, path: c.path("deployments", id, "events"), retryable: retry.Idempotent}, nil))
}

// CancelDeployment cancels a deployment. Queued ones end at once; running ones are stopped by
// the agent. api.ErrConflict when it already ended.
func (c *AdminClient) CancelDeployment(ctx context.Context, id string) (*api.Deployment, error) {
	return roundTrip[api.Deployment](ctx, c.t, call{method: http.MethodPost, path: c.path("deployments", id, "cancel"), retryable: retry.Idempotent}, nil)
}

// GetPlan reads the saved plan of a plan deployment: its summary and review. api.ErrNotFound when
// the deployment saved no plan.
func (c *AdminClient) GetPlan(ctx context.Context, id string) (*api.SavedPlan, error) {
	return roundTrip[api.SavedPlan](ctx, c.t, call{method: http.MethodGet, path: c.path("deployments", id, "plan"), retryable: retry.Idempotent}, nil)
}

// ApprovePlan approves the saved plan of a plan deployment (again: no change). Refused
// (api.ErrConflict, codes plan_not_ready, plan_expired, plan_applied, plan_discarded) when it is
// not ready for review.
func (c *AdminClient) ApprovePlan(ctx context.Context, id string) (*api.SavedPlan, error) {
	return roundTrip[api.SavedPlan](ctx, c.t, call{method: http.MethodPost, path: c.path("deployments", id, "approve"), retryable: retry.Idempotent}, nil)
}

// DiscardPlan discards the saved plan of a plan deployment, so it is never applied.
func (c *AdminClient) DiscardPlan(ctx context.Context, id string) (*api.SavedPlan, error) {
	return roundTrip[api.SavedPlan](ctx, c.t, call{method: http.MethodPost, path: c.path("deployments", id, "discard"), retryable: retry.Idempotent}, nil)
}

// ApplyPlan queues the apply of the approved saved plan of a plan deployment and returns the new
// apply deployment. Refused with api.ErrConflict (codes plan_not_approved, plan_expired,
// plan_applied, plan_discarded, plan_not_ready, stale_plan) when the plan cannot be applied.
// Not sent again blindly: a second apply of the same plan is refused as plan_applied.
func (c *AdminClient) ApplyPlan(ctx context.Context, id string) (*api.Deployment, error) {
	return roundTrip[api.Deployment](ctx, c.t, call{method: http.MethodPost, path: c.path("deployments", id, "apply"), retryable: retry.Unapplied}, nil)
}

// CreateToken creates an organisation token named name and returns it: the only time the token
// is shown. Only the bootstrap admin token may call it (api.ErrForbidden otherwise);
// api.ErrConflict when the name is taken.
func (c *AdminClient) CreateToken(ctx context.Context, name string) (*api.CreatedOrgToken, error) {
	return roundTrip[api.CreatedOrgToken](ctx, c.t, call{method: http.MethodPost, path: c.path("tokens"), retryable: retry.Unapplied}, api.OrgTokenInput{Name: name})
}

// ListTokens lists the organisation's tokens (never the tokens themselves), oldest first.
func (c *AdminClient) ListTokens(ctx context.Context) ([]api.OrgToken, error) {
	return items(roundTrip[api.List[api.OrgToken]](ctx, c.t, call{method: http.MethodGet, path: c.path("tokens"), retryable: retry.Idempotent}, nil))
}

// RevokeToken revokes an organisation token by id. api.ErrNotFound when there is no such token.
func (c *AdminClient) RevokeToken(ctx context.Context, id string) error {
	return c.t.do(ctx, call{method: http.MethodDelete, path: c.path("tokens", id), retryable: retry.Idempotent})
}

// FollowOptions says how FollowLogs follows a log.
type FollowOptions struct {
	// Offset is the byte offset to start at (0: the beginning of the log).
	Offset int64
	// Interval is the wait between reads while the log does not grow (default 500 ms).
	Interval time.Duration
	// OnRetry, when set, hears of every read that failed and is made again after wait.
	OnRetry func(err error, wait time.Duration)
	// MaxOutage is how long reads may keep failing in a row before FollowLogs gives up
	// (0: until ctx ends).
	MaxOutage time.Duration
	// OnWaiting, when set, hears of the deployment while its log is still empty, each time its
	// status or reason changed: claimed, then why it waits (an image that cannot be pulled, no
	// node for its pod), read every waitingEvery.
	OnWaiting func(d *api.Deployment)
}

// waitingEvery is how often FollowLogs reads the deployment for OnWaiting while its log is empty.
const waitingEvery = 2 * time.Second

// FollowLogs copies a deployment's log to w as it grows, until the deployment ends, and returns
// the final deployment. A read that fails for a reason a retry can cure (a network error, the
// orchestrator restarting, 5xx, 429) is made again at the same offset after the one backoff, so
// the log is neither cut nor repeated; a refusal (not found, a token refused) ends it. It also
// returns the offset reached, with an error too, so a caller that stopped it (by canceling ctx)
// can resume there.
func (c *AdminClient) FollowLogs(ctx context.Context, id string, w io.Writer, o FollowOptions) (int64, *api.Deployment, error) {
	interval := o.Interval
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	p := patience{o: o, back: retry.Backoff{Base: cmp.Or(c.t.retry.BaseDelay, DefaultRetryPolicy.BaseDelay),
		Max: cmp.Or(c.t.retry.MaxDelay, DefaultRetryPolicy.MaxDelay)}}
	offset := o.Offset
	var lastWait string
	var waitRead time.Time
	for {
		if o.OnWaiting != nil && offset == 0 && time.Since(waitRead) >= waitingEvery {
			// Optional: a failed read here is left to the log reads' own retries.
			waitRead = time.Now()
			if d, err := c.GetDeployment(ctx, id); err == nil && !d.Status.Terminal() {
				if key := string(d.Status) + "\x00" + string(d.Reason) + "\x00" + d.Message; key != lastWait {
					lastWait = key
					o.OnWaiting(d)
				}
			}
		}
		chunk, err := c.GetLogs(ctx, id, offset, 0)
		if err != nil {
			if err := p.wait(ctx, err); err != nil {
				return offset, nil, err
			}
			continue
		}
		p.reset()
		if len(chunk.Data) > 0 {
			if _, err := w.Write(chunk.Data); err != nil {
				return offset, nil, fmt.Errorf("write log: %w", err)
			}
		}
		offset = chunk.NextOffset
		if chunk.Complete {
			break
		}
		if len(chunk.Data) > 0 {
			continue
		}
		if err := retry.Sleep(ctx, interval); err != nil {
			return offset, nil, err
		}
	}
	for {
		d, err := c.GetDeployment(ctx, id)
		if err == nil {
			return offset, d, nil
		}
		if err := p.wait(ctx, err); err != nil {
			return offset, nil, err
		}
	}
}

// patience decides, for a follower, whether a failed read is waited out and tried again.
type patience struct {
	o     FollowOptions
	back  retry.Backoff
	since time.Time // first failure of the current run of failures
}

// wait sleeps before the next try of a read that failed with err, or returns the error that
// ends the follow.
func (p *patience) wait(ctx context.Context, err error) error {
	if ctx.Err() != nil || !retry.Idempotent(err) {
		return err
	}
	if p.since.IsZero() {
		p.since = time.Now()
	}
	if p.o.MaxOutage > 0 && time.Since(p.since) > p.o.MaxOutage {
		return fmt.Errorf("no answer for %s, giving up: %w", p.o.MaxOutage, err)
	}
	d := p.back.Next(api.RetryAfter(err))
	if p.o.OnRetry != nil {
		p.o.OnRetry(err, d)
	}
	if serr := retry.Sleep(ctx, d); serr != nil {
		return serr
	}
	return nil
}

func (p *patience) reset() {
	p.back.Reset()
	p.since = time.Time{}
}

// items unwraps a list answer.
func items[T any](l *api.List[T], err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}
