package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// AgentClient calls the agent side of the API. Every try is signed afresh, because agent
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

// Poll long-polls for offers and directives, restating the agent's capacity and held attempts
// (which renews their job leases). A request that states no protocol range states this build's
// (api.AgentProtocols). An orchestrator that speaks none of the range answers with
// api.ErrIncompatibleProtocol.
func (c *AgentClient) Poll(ctx context.Context, req api.PollRequest) (*api.PollResponse, error) {
	if req.Protocol == (api.ProtocolRange{}) {
		req.Protocol = api.AgentProtocols()
	}
	return roundTrip[api.PollResponse](ctx, c.t, call{method: http.MethodPost, path: "/api/v1/agent/poll", retryable: retry.Idempotent}, req)
}

// Claim claims an offered attempt of a deployment. It is idempotent for the same instance;
// another instance gets api.ErrConflict while the job lease holds.
func (c *AgentClient) Claim(ctx context.Context, deploymentID string, req api.ClaimRequest) (*api.Claim, error) {
	return roundTrip[api.Claim](ctx, c.t, call{method: http.MethodPost, path: "/api/v1/agent/deployments/" + url.PathEscape(deploymentID) + "/claim", retryable: retry.Idempotent}, req)
}

// Event sends an event about an attempt; events are idempotent by (deployment, attempt, seq).
func (c *AgentClient) Event(ctx context.Context, deploymentID string, req api.EventRequest) (*api.EventResponse, error) {
	if req.Time.IsZero() {
		req.Time = time.Now().UTC()
	}
	return roundTrip[api.EventResponse](ctx, c.t, call{method: http.MethodPost, path: "/api/v1/agent/deployments/" + url.PathEscape(deploymentID) + "/events", retryable: retry.Idempotent}, req)
}
