package api

import (
	"encoding/json"
	"time"
)

// The agent side (/api/v1/agent/) and the job side (/api/v1/job/) of the API.

// PollRequest is the body of an agent's long poll. It restates the whole picture every time, so
// a lost message heals on the next poll.
type PollRequest struct {
	AgentVersion string `json:"agent_version"`
	// Instance names the agent process (pod name); a claim by another instance is refused while
	// a lease is held.
	Instance string `json:"instance"`
	// CapacityFree is how many more jobs the agent will take now.
	CapacityFree int `json:"capacity_free"`
	// Running lists every job the agent holds (from its Kubernetes Jobs), renewing their leases.
	Running []RunningJob `json:"running"`
	// WaitSeconds is how long the server may hold the poll open (at most 30).
	WaitSeconds int `json:"wait_seconds"`
}

// RunningJob is a job the agent holds.
type RunningJob struct {
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt"`
	Fencing int64  `json:"fencing"`
	// Started is true once the job's main container has started.
	Started bool `json:"started"`
}

// PollResponse carries offers and directives.
type PollResponse struct {
	Offers     []Offer     `json:"offers"`
	Directives []Directive `json:"directives"`
	// MaxConcurrency is the runner's current limit, so the agent follows changes without restart.
	MaxConcurrency int `json:"max_concurrency"`
	// ServerTime lets the agent notice clock skew.
	ServerTime time.Time `json:"server_time"`
}

// Offer is a queued job the agent may claim.
type Offer struct {
	JobID     string `json:"job_id"`
	Attempt   int    `json:"attempt"`
	Operation string `json:"operation"`
}

// Directive kinds.
const (
	// DirectiveCancel asks the agent to stop the job and report it canceled.
	DirectiveCancel = "cancel"
	// DirectiveForget says the orchestrator no longer assigns the job to this agent (unknown,
	// terminal, or the lease was lost): send any pending final report, then delete the Job.
	DirectiveForget = "forget"
)

// Directive tells the agent to act on a job it holds.
type Directive struct {
	Type    string `json:"type"`
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason,omitempty"`
}

// ClaimRequest is the body of a claim.
type ClaimRequest struct {
	Attempt  int    `json:"attempt"`
	Instance string `json:"instance"`
}

// Lease is the agent's right to act on a job attempt. Fencing grows with every grant, so a
// request carrying an older number is refused.
type Lease struct {
	Fencing   int64     `json:"fencing"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Claim is the answer to a successful claim: the lease, the job's spec and the per-job token.
type Claim struct {
	JobID    string  `json:"job_id"`
	Attempt  int     `json:"attempt"`
	Lease    Lease   `json:"lease"`
	JobToken string  `json:"job_token"`
	Spec     JobSpec `json:"spec"`
}

// JobSpec is everything a job needs to run, from the job's own point of view.
type JobSpec struct {
	JobID          string                     `json:"job_id"`
	Attempt        int                        `json:"attempt"`
	RunnerID       string                     `json:"runner_id"`
	Operation      string                     `json:"operation"`
	Source         Source                     `json:"source"`
	Variables      map[string]json.RawMessage `json:"variables,omitempty"`
	StateKey       string                     `json:"state_key"`
	StateStorage   StateStorage               `json:"state_storage"`
	TimeoutSeconds int                        `json:"timeout_seconds"`
	Job            RunnerJob                  `json:"job"`
}

// Event types an agent reports.
const (
	// EventStarted: the job's main container started (an apply past this point is never re-run).
	EventStarted = "started"
	// EventFinished: terminal; Result says how it ended.
	EventFinished = "finished"
	// EventProgress: informational (e.g. "pod pending: image pull").
	EventProgress = "progress"
)

// EventRequest is the body of a job event. Events are idempotent by (job, attempt, seq).
type EventRequest struct {
	Attempt int    `json:"attempt"`
	Fencing int64  `json:"fencing"`
	Seq     int64  `json:"seq"`
	Type    string `json:"type"`
	// Result is the terminal status for EventFinished: succeeded, failed or canceled.
	Result   string    `json:"result,omitempty"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Message  string    `json:"message,omitempty"`
	Time     time.Time `json:"time"`
}

// EventResponse acknowledges an event.
type EventResponse struct {
	// Status is the job's status after the event.
	Status string `json:"status"`
	// CancelRequested tells the agent a cancel is pending.
	CancelRequested bool `json:"cancel_requested,omitempty"`
}

// LogAppendResponse is the answer to a log append, and the body of the 409 that a wrong offset
// gets. Appends are by byte offset: an append at the committed offset extends the log; a resend
// of bytes already committed is acknowledged without change; any other offset is refused with the
// committed offset so the writer can resume from there.
type LogAppendResponse struct {
	CommittedOffset int64 `json:"committed_offset"`
	// Truncated is true once the log reached the server's cap; further bytes are counted, not kept,
	// and the log ends with an explicit truncation marker.
	Truncated bool `json:"truncated,omitempty"`
	// CancelRequested lets a running job notice a cancel between polls.
	CancelRequested bool `json:"cancel_requested,omitempty"`
}

// Header and query names of the protocol.
const (
	// LogOffsetParam is the query parameter of a log append: the byte offset of the body's first byte.
	LogOffsetParam = "offset"
	// JobTokenPrefix starts every per-job token, so a leaked one is recognisable in scanners.
	JobTokenPrefix = "opj_"
)
