package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// AgentClient calls the agent side of the API. Every try is signed afresh, because agent
// tokens are bound to one request and refused when replayed.
type AgentClient struct {
	t      *transport
	signer *agentauth.Signer
	// protocol is the agent protocol version the last poll answer chose (0 before the first).
	protocol atomic.Int32
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
	// A 401 for a token from a clock that is off carries the orchestrator's Date, so the retry
	// of the same call is signed with the corrected time.
	t.observeDate = func(date string, sent, received time.Time) bool {
		before := signer.ClockOffset()
		return signer.ObserveServerDate(date, sent, received) != before
	}
	// A key the runner does not have (being rotated) is worth one more try with the signer's
	// other key, at once: the request itself was fine.
	t.keyRefused = func(authorization string) bool {
		return signer.Refused(agentauth.KeyIDOf(authorization))
	}
	return &AgentClient{t: t, signer: signer}, nil
}

// KeyFingerprint is the fingerprint of the key requests are signed with now.
func (c *AgentClient) KeyFingerprint() string { return c.signer.Fingerprint() }

// ClockOffset is how far the orchestrator's clock is ahead of this machine's, as learnt from its
// answers; tokens are signed with the orchestrator's time.
func (c *AgentClient) ClockOffset() time.Duration { return c.signer.ClockOffset() }

// Poll long-polls for offers and directives, restating the agent's capacity and held attempts
// (which renews their job leases). A request that states no protocol range states this build's
// (api.AgentProtocols). An orchestrator that speaks none of the range answers with
// api.ErrIncompatibleProtocol.
func (c *AgentClient) Poll(ctx context.Context, req api.PollRequest) (*api.PollResponse, error) {
	if req.Protocol == (api.ProtocolRange{}) {
		req.Protocol = api.AgentProtocols()
	}
	if req.KeyFingerprints == nil && int(c.protocol.Load()) >= api.ProtocolKeyFingerprints && req.Protocol.Max >= api.ProtocolKeyFingerprints {
		// Only once an answer chose a version that has the field: an older orchestrator
		// refuses a poll with a field it does not know.
		req.KeyFingerprints = c.signer.Fingerprints()
	}
	resp, err := roundTrip[api.PollResponse](ctx, c.t, call{method: http.MethodPost, path: "/api/v1/agent/poll", retryable: retry.Idempotent}, req)
	if err != nil {
		return nil, err
	}
	c.protocol.Store(int32(resp.Protocol))
	if resp.KeyFingerprints != nil {
		// The runner's current keys: the next requests are signed with the newest of ours
		// among them (an orchestrator from before rotation says nothing, and nothing changes).
		c.signer.Registered(resp.KeyFingerprints)
	}
	return resp, nil
}

// Claim claims an offered attempt of a deployment. It is idempotent for the same instance;
// another instance gets api.ErrConflict while the job lease holds.
func (c *AgentClient) Claim(ctx context.Context, deploymentID string, req api.ClaimRequest) (*api.Claim, error) {
	return roundTrip[api.Claim](ctx, c.t, call{method: http.MethodPost, path: "/api/v1/agent/deployments/" + url.PathEscape(deploymentID) + "/claim", retryable: retry.Idempotent}, req)
}

// ReportStates sends what the agent keeps of states of its runner's kubernetes state storage:
// versions' metadata and lock holders, never contents. A report replaces what the orchestrator
// knew of the states it names, so a resend is harmless.
func (c *AgentClient) ReportStates(ctx context.Context, rep api.StateReport) error {
	b, err := jsonBody(rep)
	if err != nil {
		return err
	}
	return c.t.do(ctx, call{method: http.MethodPost, path: "/api/v1/agent/states", body: b, contentType: "application/json", retryable: retry.Idempotent})
}

// StateOperationResult posts the result of a state operation the agent ran: names only, never
// a value of the state. A result posted again is harmless: the orchestrator keeps the first.
func (c *AgentClient) StateOperationResult(ctx context.Context, id string, res api.StateOperationResult) (*api.StateOperation, error) {
	return roundTrip[api.StateOperation](ctx, c.t, call{method: http.MethodPost, path: "/api/v1/agent/state-operations/" + url.PathEscape(id) + "/result", retryable: retry.Idempotent}, res)
}

// Event sends an event about an attempt; events are idempotent by (deployment, attempt, seq).
// Until a poll answer chose api.ProtocolTimeline, the event goes in the older shape (without
// step, detail and node; detail folded into message), which an older orchestrator takes.
func (c *AgentClient) Event(ctx context.Context, deploymentID string, req api.EventRequest) (*api.EventResponse, error) {
	if req.Time.IsZero() {
		req.Time = time.Now().UTC()
	}
	timeline := int(c.protocol.Load()) >= api.ProtocolTimeline
	if !timeline {
		req.Event = req.WithoutTimeline()
	}
	send := func() (*api.EventResponse, error) {
		return roundTrip[api.EventResponse](ctx, c.t, call{method: http.MethodPost, path: "/api/v1/agent/deployments/" + url.PathEscape(deploymentID) + "/events", retryable: retry.Idempotent}, req)
	}
	resp, err := send()
	// While an orchestrator's replicas are replaced one at a time, a poll answered by a new
	// replica can be followed by an event that reaches an old one, which refuses the timeline's
	// fields as unknown. A refused event would leave its attempt waiting for a directive that
	// never comes (its finished event undelivered), so the same event goes again in the older
	// shape; a new replica takes that shape too.
	if timeline && errors.Is(err, api.ErrInvalid) && req.Event != req.WithoutTimeline() {
		req.Event = req.WithoutTimeline()
		resp, err = send()
	}
	return resp, err
}

// Events sends several events of the runner's attempts in one request (api.ProtocolEventBatch;
// send it only once a poll answer chose that version) and returns one result per event, in
// order: each event is taken or refused on its own (api.EventResult.Err). An error means none was
// answered: the whole request failed, and the events, idempotent, may all be sent again.
func (c *AgentClient) Events(ctx context.Context, events []api.DeploymentEvent) ([]api.EventResult, error) {
	batch := api.EventBatch{Events: make([]api.DeploymentEvent, len(events))}
	now := time.Now().UTC()
	for i, ev := range events {
		if ev.Time.IsZero() {
			ev.Time = now
		}
		batch.Events[i] = ev
	}
	resp, err := roundTrip[api.EventBatchResponse](ctx, c.t, call{method: http.MethodPost, path: "/api/v1/agent/events", retryable: retry.Idempotent}, batch)
	var apiErr *api.Error
	if errors.As(err, &apiErr) && (apiErr.StatusCode == http.StatusNotFound || apiErr.StatusCode == http.StatusMethodNotAllowed) {
		return nil, errors.Join(api.ErrEventBatchUnsupported, err)
	}
	if err != nil {
		return nil, err
	}
	if len(resp.Results) != len(events) {
		return nil, &api.Error{StatusCode: http.StatusBadGateway, Code: api.CodeInternal,
			Message: "the orchestrator answered a batch of " + strconv.Itoa(len(events)) + " events with " + strconv.Itoa(len(resp.Results)) + " results; sending them again"}
	}
	return resp.Results, nil
}
