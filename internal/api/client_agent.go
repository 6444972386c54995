package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
)

// AgentClient calls the agent side of the API. Every attempt is signed afresh, because agent
// tokens are bound to one request and refused when replayed.
type AgentClient struct {
	t *transport
}

// NewAgentClient returns a client that signs requests with signer. The HTTP timeout must exceed
// the long-poll wait; the default client waits up to two minutes.
func NewAgentClient(baseURL string, signer *agentauth.Signer, opts ...Option) (*AgentClient, error) {
	t, err := newTransport(baseURL, func(r *http.Request, body []byte) error {
		return signer.Authorize(r, body)
	}, opts)
	if err != nil {
		return nil, err
	}
	return &AgentClient{t: t}, nil
}

// Poll long-polls for offers and directives, restating the agent's capacity and running jobs.
func (c *AgentClient) Poll(ctx context.Context, req PollRequest) (*PollResponse, error) {
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	var out PollResponse
	if err := c.t.do(ctx, call{method: http.MethodPost, path: "/api/v1/agent/poll", body: body, idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Heartbeat renews the leases of running jobs without waiting for offers.
func (c *AgentClient) Heartbeat(ctx context.Context, req PollRequest) error {
	body, err := jsonBody(req)
	if err != nil {
		return err
	}
	return c.t.do(ctx, call{method: http.MethodPost, path: "/api/v1/agent/heartbeat", body: body, idempotent: true})
}

// Claim claims an offered job attempt. It is idempotent for the same instance; another instance
// gets ErrConflict while the lease holds.
func (c *AgentClient) Claim(ctx context.Context, jobID string, req ClaimRequest) (*Claim, error) {
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	var out Claim
	if err := c.t.do(ctx, call{method: http.MethodPost, path: "/api/v1/agent/jobs/" + url.PathEscape(jobID) + "/claim", body: body, idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Event reports a job event; events are idempotent by (job, attempt, seq).
func (c *AgentClient) Event(ctx context.Context, jobID string, req EventRequest) (*EventResponse, error) {
	if req.Time.IsZero() {
		req.Time = time.Now().UTC()
	}
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	var out EventResponse
	if err := c.t.do(ctx, call{method: http.MethodPost, path: "/api/v1/agent/jobs/" + url.PathEscape(jobID) + "/events", body: body, idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// JobClient is what a running job uses, authenticated by its per-job token.
type JobClient struct {
	t *transport
}

// NewJobClient returns a client for the job holding token.
func NewJobClient(baseURL, token string, opts ...Option) (*JobClient, error) {
	t, err := newTransport(baseURL, func(r *http.Request, _ []byte) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}, opts)
	if err != nil {
		return nil, err
	}
	return &JobClient{t: t}, nil
}

// Spec fetches the job's spec.
func (c *JobClient) Spec(ctx context.Context) (*JobSpec, error) {
	var out JobSpec
	if err := c.t.do(ctx, call{method: http.MethodGet, path: "/api/v1/job/spec", idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// AppendLog appends data at offset. A wrong offset returns an error matching ErrOffsetMismatch
// whose *Error carries the server's CommittedOffset, so the caller can resume from there.
func (c *JobClient) AppendLog(ctx context.Context, offset int64, data []byte) (*LogAppendResponse, error) {
	var out LogAppendResponse
	err := c.t.do(ctx, call{
		method: http.MethodPost, path: "/api/v1/job/logs",
		query: url.Values{LogOffsetParam: {strconv.FormatInt(offset, 10)}},
		body:  data, contentType: "application/octet-stream", idempotent: true, out: &out,
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// PutOutputs uploads the job's Terraform outputs.
func (c *JobClient) PutOutputs(ctx context.Context, outputs Outputs) error {
	body, err := jsonBody(outputs)
	if err != nil {
		return err
	}
	return c.t.do(ctx, call{method: http.MethodPut, path: "/api/v1/job/outputs", body: body, idempotent: true})
}
