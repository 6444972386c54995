package api

import "time"

// The agent side of the API (/api/v1/agent/): the long poll, claims and events.

// PollRequest is the body of an agent's long poll. It restates the whole picture every time, so
// a lost message heals on the next poll, and it renews the job leases of the attempts it lists:
// there is no other renewal.
type PollRequest struct {
	AgentVersion string `json:"agent_version"`
	// Protocol is the range of agent protocol versions the agent speaks. The orchestrator refuses
	// a poll whose range does not meet its own with CodeIncompatibleProtocol (HTTP 409).
	Protocol ProtocolRange `json:"protocol"`
	// Instance names the agent process (pod name); a claim by another instance is refused while
	// a job lease is held.
	Instance string `json:"instance"`
	// CapacityFree is how many more attempts the agent will take now.
	CapacityFree int `json:"capacity_free"`
	// Held lists every attempt the agent holds (from its executor), renewing their job leases.
	Held []HeldAttempt `json:"held"`
	// WaitSeconds is how long the server may hold the poll open (at most 30).
	WaitSeconds int `json:"wait_seconds"`
	// KeyFingerprints are the fingerprints of the runner keys the agent holds, newest first.
	// When the agent signed with a retiring key while it holds a current one, the poll is
	// answered at once, so it moves onto the current key without waiting out the long poll.
	KeyFingerprints []string `json:"key_fingerprints,omitempty"`
}

// HeldAttempt is an attempt the agent holds: claimed, and not yet cleaned up after its finished
// event was acknowledged (or after a forget directive).
type HeldAttempt struct {
	DeploymentID string `json:"deployment_id"`
	Attempt      int    `json:"attempt"`
	Fencing      int64  `json:"fencing"`
	// Started is true once the attempt's CLI started (the Job's main container, or the process).
	Started bool `json:"started"`
}

// PollResponse carries offers (or, from ProtocolClaimInPoll on, claims) and directives.
type PollResponse struct {
	Offers []Offer `json:"offers"`
	// Claims are the attempts the orchestrator claimed for the polling instance (protocol
	// ProtocolClaimInPoll on, in place of offers): each the grant POST …/claim would answer
	// with, so the agent starts them at once. One lost with the answer is offered to the same
	// instance again (ReofferAfter in the orchestrator's store) or waits out its job lease, as a
	// claim whose answer was lost.
	Claims     []Claim     `json:"claims,omitempty"`
	Directives []Directive `json:"directives"`
	// MaxConcurrency is the runner's current limit, so the agent follows changes without restart.
	MaxConcurrency int `json:"max_concurrency"`
	// ServerTime lets the agent notice clock skew.
	ServerTime time.Time `json:"server_time"`
	// Protocol is the agent protocol version the orchestrator chose: the highest both speak.
	Protocol int `json:"protocol"`
	// OrchestratorVersion is the orchestrator's release, for the agent's log.
	OrchestratorVersion string `json:"orchestrator_version"`
	// OrchestratorProtocol is the range of agent protocol versions the orchestrator speaks.
	OrchestratorProtocol ProtocolRange `json:"orchestrator_protocol"`
	// KeyFingerprints are the fingerprints of the runner's current public keys (not the
	// retiring ones): the agent signs with the newest of its keys among them.
	KeyFingerprints []string `json:"key_fingerprints,omitempty"`
	// StateOperations are the state operations for the runner's state storage this agent is to
	// run (protocol ProtocolStateOperations on): the queued ones, which the poll marks running
	// for this runner, and the ones it took before and has not posted a result of yet.
	StateOperations []StateOperationOffer `json:"state_operations,omitempty"`
}

// Offer is a queued attempt the agent may claim.
type Offer struct {
	DeploymentID string    `json:"deployment_id"`
	Attempt      int       `json:"attempt"`
	Operation    Operation `json:"operation"`
}

// DirectiveType is what a directive asks the agent to do.
type DirectiveType string

// Directive types.
const (
	// DirectiveCancel asks the agent to stop the attempt and send its finished event with the
	// result canceled.
	DirectiveCancel DirectiveType = "cancel"
	// DirectiveForget says the orchestrator no longer assigns the attempt to this agent (unknown,
	// terminal, or the job lease was lost): deliver any pending event, then clean the attempt up.
	DirectiveForget DirectiveType = "forget"
)

// Directive tells the agent to act on an attempt it holds.
type Directive struct {
	Type         DirectiveType `json:"type"`
	DeploymentID string        `json:"deployment_id"`
	Attempt      int           `json:"attempt"`
	Reason       string        `json:"reason,omitempty"`
}

// ClaimRequest is the body of a claim.
type ClaimRequest struct {
	Attempt  int    `json:"attempt"`
	Instance string `json:"instance"`
}

// Lease is the agent's job lease on an attempt: its right to act on it until ExpiresAt, renewed
// by every poll that lists the attempt. Fencing grows with every grant, so a request carrying an
// older number is refused.
type Lease struct {
	Fencing   int64     `json:"fencing"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Claim is the answer to a successful claim: the job lease, the job token, and the placement of
// the attempt.
type Claim struct {
	DeploymentID string    `json:"deployment_id"`
	Attempt      int       `json:"attempt"`
	Lease        Lease     `json:"lease"`
	JobToken     string    `json:"job_token"`
	Placement    Placement `json:"placement"`
}

// Placement is what the agent needs to run an attempt: the operation (it decides what an evicted
// pod does), where the Job goes and as whom (the runner's job settings), how long it may run, and
// which state the job runner may use (the agent's state backend authorises it). The source and
// the variables are not in it: only the job runner reads them, from the job API (JobSpec).
type Placement struct {
	Operation      Operation    `json:"operation"`
	StateKey       string       `json:"state_key"`
	StateStorage   StateStorage `json:"state_storage"`
	TimeoutSeconds int          `json:"timeout_seconds"`
	Job            RunnerJob    `json:"job"`
	// SavePlan says the job runner will store its plan file with the state backend, kept
	// PlanTTLSeconds (from ProtocolSavedPlans on; only such agents are offered it).
	SavePlan       bool `json:"save_plan,omitempty"`
	PlanTTLSeconds int  `json:"plan_ttl_seconds,omitempty"`
	// ApplyPlan is the saved plan an apply runs; the agent checks it against the state before it
	// creates anything.
	ApplyPlan *PlanRef `json:"apply_plan,omitempty"`
	// Traceparent is the W3C traceparent of the deployment's enqueue span, when the orchestrator
	// traces: the agent's spans of the attempt nest under it. Empty otherwise.
	Traceparent string `json:"traceparent,omitempty"`
}

// KubernetesStateNamespace is the namespace of the placement's kubernetes state storage, or ""
// when its state storage is of another type.
func (p *Placement) KubernetesStateNamespace() string {
	if ks := p.StateStorage.Kubernetes; p.StateStorage.Type == StateStorageKubernetes && ks != nil {
		return ks.Namespace
	}
	return ""
}

// EventType is what an event says happened to an attempt.
type EventType string

// Event types.
const (
	// EventStarted: the attempt's CLI started (an apply past this point is never re-run).
	EventStarted EventType = "started"
	// EventProgress: informational (e.g. "pod pending: image pull").
	EventProgress EventType = "progress"
	// EventFinished: terminal; Result says how the attempt ended.
	EventFinished EventType = "finished"
)

// EventRequest is the body of an event: the event, and the fencing number of the job lease it
// is sent under. Events are idempotent by (deployment, attempt, seq).
type EventRequest struct {
	Event
	Fencing int64 `json:"fencing"`
}

// EventResponse acknowledges an event.
type EventResponse struct {
	// Status is the deployment's status after the event.
	Status Status `json:"status"`
	// CancelRequested tells the agent a cancel is pending.
	CancelRequested bool `json:"cancel_requested,omitempty"`
}

// MaxEventBatch is the most events one EventBatch may carry.
const MaxEventBatch = 100

// EventBatch is several events of the runner's attempts in one request (ProtocolEventBatch).
// The orchestrator checks and applies each as it would the same event sent alone, in order, in
// one transaction: an event refused does not stop the others.
type EventBatch struct {
	Events []DeploymentEvent `json:"events"`
}

// DeploymentEvent is one event of an EventBatch: the deployment it is about, and the event as a
// request of its own would carry it.
type DeploymentEvent struct {
	DeploymentID string `json:"deployment_id"`
	EventRequest
}

// EventBatchResponse answers an EventBatch with one result per event, in the batch's order.
type EventBatchResponse struct {
	Results []EventResult `json:"results"`
}

// EventResult is the outcome of one event of a batch: Response when it was taken (or was a
// resend of one stored), Error when it was refused.
type EventResult struct {
	Response *EventResponse `json:"response,omitempty"`
	Error    *EventRefusal  `json:"error,omitempty"`
}

// EventRefusal is why one event of a batch was refused: the error body, and the HTTP status the
// same event sent alone would have been answered with.
type EventRefusal struct {
	ErrorDetail
	Status int `json:"status"`
}

// Err is the refusal as the error the same event sent alone would have returned, nil when the
// event was taken.
func (r EventResult) Err() error {
	if r.Error == nil {
		if r.Response == nil {
			return &Error{StatusCode: 500, Code: CodeInternal, Message: "the orchestrator answered an event of the batch with neither a response nor an error"}
		}
		return nil
	}
	return &Error{StatusCode: r.Error.Status, Code: r.Error.Code, Message: r.Error.Message, Field: r.Error.Field, CommittedOffset: r.Error.CommittedOffset}
}
