package client

import (
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

func (c *AdminClient) send(ctx context.Context, method, path string, in, out any, retryable retry.Decision) error {
	var body []byte
	if in != nil {
		b, err := jsonBody(in)
		if err != nil {
			return err
		}
		body = b
	}
	return c.t.do(ctx, call{method: method, path: path, body: body, retryable: retryable, out: out})
}

// CreateRunner registers a runner. api.ErrConflict when the id is taken.
func (c *AdminClient) CreateRunner(ctx context.Context, in api.RunnerInput) (*api.Runner, error) {
	var out api.Runner
	if err := c.send(ctx, http.MethodPost, c.path("runners"), in, &out, retry.Unapplied); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetRunner reads a runner. api.ErrNotFound when it does not exist.
func (c *AdminClient) GetRunner(ctx context.Context, id string) (*api.Runner, error) {
	var out api.Runner
	if err := c.send(ctx, http.MethodGet, c.path("runners", id), nil, &out, retry.Idempotent); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListRunners lists the organisation's runners.
func (c *AdminClient) ListRunners(ctx context.Context) ([]api.Runner, error) {
	var out api.List[api.Runner]
	if err := c.send(ctx, http.MethodGet, c.path("runners"), nil, &out, retry.Idempotent); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// UpdateRunner replaces a runner's mutable fields.
func (c *AdminClient) UpdateRunner(ctx context.Context, in api.RunnerInput) (*api.Runner, error) {
	var out api.Runner
	if err := c.send(ctx, http.MethodPut, c.path("runners", in.ID), in, &out, retry.Idempotent); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteRunner removes a runner; its queued deployments are canceled.
func (c *AdminClient) DeleteRunner(ctx context.Context, id string) error {
	return c.send(ctx, http.MethodDelete, c.path("runners", id), nil, nil, retry.Idempotent)
}

// CreateStateStorage registers a state storage. api.ErrConflict when the id is taken.
func (c *AdminClient) CreateStateStorage(ctx context.Context, in api.StateStorageInput) (*api.StateStorage, error) {
	var out api.StateStorage
	if err := c.send(ctx, http.MethodPost, c.path("state-storages"), in, &out, retry.Unapplied); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetStateStorage reads a state storage. api.ErrNotFound when it does not exist.
func (c *AdminClient) GetStateStorage(ctx context.Context, id string) (*api.StateStorage, error) {
	var out api.StateStorage
	if err := c.send(ctx, http.MethodGet, c.path("state-storages", id), nil, &out, retry.Idempotent); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListStateStorages lists the organisation's state storages.
func (c *AdminClient) ListStateStorages(ctx context.Context) ([]api.StateStorage, error) {
	var out api.List[api.StateStorage]
	if err := c.send(ctx, http.MethodGet, c.path("state-storages"), nil, &out, retry.Idempotent); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// UpdateStateStorage replaces a state storage's fields.
func (c *AdminClient) UpdateStateStorage(ctx context.Context, in api.StateStorageInput) (*api.StateStorage, error) {
	var out api.StateStorage
	if err := c.send(ctx, http.MethodPut, c.path("state-storages", in.ID), in, &out, retry.Idempotent); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteStateStorage removes a state storage. api.ErrConflict while a runner uses it.
func (c *AdminClient) DeleteStateStorage(ctx context.Context, id string) error {
	return c.send(ctx, http.MethodDelete, c.path("state-storages", id), nil, nil, retry.Idempotent)
}

// CreateDeployment queues a deployment on a runner.
func (c *AdminClient) CreateDeployment(ctx context.Context, in api.DeploymentInput) (*api.Deployment, error) {
	var out api.Deployment
	if err := c.send(ctx, http.MethodPost, c.path("deployments"), in, &out, retry.Unapplied); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetDeployment reads a deployment.
func (c *AdminClient) GetDeployment(ctx context.Context, id string) (*api.Deployment, error) {
	var out api.Deployment
	if err := c.send(ctx, http.MethodGet, c.path("deployments", id), nil, &out, retry.Idempotent); err != nil {
		return nil, err
	}
	return &out, nil
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
	var out api.List[api.Deployment]
	if err := c.t.do(ctx, call{method: http.MethodGet, path: c.path("deployments"), query: q, retryable: retry.Idempotent, out: &out}); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// GetLogs reads a deployment's log from offset; limit 0 lets the server choose.
func (c *AdminClient) GetLogs(ctx context.Context, id string, offset, limit int64) (*api.LogChunk, error) {
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.FormatInt(limit, 10))
	}
	var out api.LogChunk
	if err := c.t.do(ctx, call{method: http.MethodGet, path: c.path("deployments", id, "logs"), query: q, retryable: retry.Idempotent, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetOutputs reads a deployment's Terraform outputs.
func (c *AdminClient) GetOutputs(ctx context.Context, id string) (api.Outputs, error) {
	out := api.Outputs{}
	if err := c.send(ctx, http.MethodGet, c.path("deployments", id, "outputs"), nil, &out, retry.Idempotent); err != nil {
		return nil, err
	}
	return out, nil
}

// ListEvents lists the events of a deployment's attempts.
func (c *AdminClient) ListEvents(ctx context.Context, id string) ([]api.Event, error) {
	var out api.List[api.Event]
	if err := c.send(ctx, http.MethodGet, c.path("deployments", id, "events"), nil, &out, retry.Idempotent); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// CancelDeployment cancels a deployment. Queued ones end at once; running ones are stopped by
// the agent. api.ErrConflict when it already ended.
func (c *AdminClient) CancelDeployment(ctx context.Context, id string) (*api.Deployment, error) {
	var out api.Deployment
	if err := c.send(ctx, http.MethodPost, c.path("deployments", id, "cancel"), nil, &out, retry.Idempotent); err != nil {
		return nil, err
	}
	return &out, nil
}

// FollowLogs copies a deployment's log to w as it grows, until the deployment ends, and returns
// the final deployment. It polls every interval.
func (c *AdminClient) FollowLogs(ctx context.Context, id string, w io.Writer, interval time.Duration) (*api.Deployment, error) {
	var offset int64
	for {
		chunk, err := c.GetLogs(ctx, id, offset, 0)
		if err != nil {
			return nil, err
		}
		if len(chunk.Data) > 0 {
			if _, err := w.Write(chunk.Data); err != nil {
				return nil, fmt.Errorf("write log: %w", err)
			}
		}
		offset = chunk.NextOffset
		if chunk.Complete {
			return c.GetDeployment(ctx, id)
		}
		if len(chunk.Data) > 0 {
			continue
		}
		if err := retry.Sleep(ctx, interval); err != nil {
			return nil, err
		}
	}
}
