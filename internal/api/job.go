package api

import "encoding/json"

// The job API (/api/v1/job/): what the job runner of an attempt calls with its job token.

// JobSpec is what the job runner needs to run an attempt: the deployment's operation, source,
// variables and state, as GET /api/v1/job/spec returns it. Only the job runner fetches it; the
// agent places the attempt from the claim's Placement and never sees the source.
type JobSpec struct {
	DeploymentID string                     `json:"deployment_id"`
	Attempt      int                        `json:"attempt"`
	RunnerID     string                     `json:"runner_id"`
	Operation    Operation                  `json:"operation"`
	Source       Source                     `json:"source"`
	Variables    map[string]json.RawMessage `json:"variables,omitempty"`
	StateKey     string                     `json:"state_key"`
	StateStorage StateStorage               `json:"state_storage"`
	// DriftCheck asks for a drift check: the plan runs with -detailed-exitcode (2 means changes,
	// not a failure) and the job runner reports the result with PUT /api/v1/job/drift.
	DriftCheck bool `json:"drift_check,omitempty"`
	// SavePlan: run `plan -out`, keep the plan file with the state backend and upload its
	// summary (PUT /api/v1/job/plan-summary); PlanDestroy makes it `plan -destroy`.
	SavePlan    bool `json:"save_plan,omitempty"`
	PlanDestroy bool `json:"plan_destroy,omitempty"`
	// ApplyPlan is the plan deployment whose saved plan this apply runs: the job runner fetches
	// the plan file from the state backend and runs `apply <planfile>`, without variables.
	ApplyPlan string `json:"apply_plan,omitempty"`
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
	// CancelRequested lets a running job runner notice a cancel between polls.
	CancelRequested bool `json:"cancel_requested,omitempty"`
}

// Header and query names of the job API.
const (
	// LogOffsetParam is the query parameter of a log append: the byte offset of the body's first byte.
	LogOffsetParam = "offset"
	// JobTokenPrefix starts every job token, so a leaked one is recognisable in scanners.
	JobTokenPrefix = "opj_"
)
