package api

import (
	"encoding/json"
	"slices"
	"time"
)

// Operation is what a deployment runs: plan, apply or destroy.
type Operation string

// Operations a deployment can run.
const (
	OperationPlan    Operation = "plan"
	OperationApply   Operation = "apply"
	OperationDestroy Operation = "destroy"
)

// Valid reports whether o is one of the operations above.
func (o Operation) Valid() bool {
	switch o {
	case OperationPlan, OperationApply, OperationDestroy:
		return true
	}
	return false
}

// Status is where a deployment stands. Queued → Claimed → Running → one of the terminal ones. A job
// lease that expires returns a Claimed deployment, and a Running plan, to Queued with the next
// attempt; a Running apply or destroy becomes Lost instead, because re-running a half-done apply is
// not safe. Executors use the same values for an attempt: Claimed until its CLI starts, Running,
// then Succeeded, Failed or Canceled (the result of the finished event).
type Status string

// Deployment statuses.
const (
	StatusQueued    Status = "queued"
	StatusClaimed   Status = "claimed"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCanceled  Status = "canceled"
	StatusLost      Status = "lost"
)

// Statuses lists every status in lifecycle order, for filters, metrics and messages.
var Statuses = []Status{StatusQueued, StatusClaimed, StatusRunning, StatusSucceeded, StatusFailed, StatusCanceled, StatusLost}

// Terminal reports whether the status is final.
func (s Status) Terminal() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusCanceled, StatusLost:
		return true
	}
	return false
}

// Valid reports whether s is one of Statuses.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Source is where a deployment's Terraform configuration comes from: exactly one of Inline or Git.
type Source struct {
	Inline *InlineSource `json:"inline,omitempty"`
	Git    *GitSource    `json:"git,omitempty"`
}

// InlineSource is a gzip-compressed tar archive of the configuration, base64 in JSON.
type InlineSource struct {
	ArchiveTarGz []byte `json:"archive_tar_gz"`
}

// GitSource is a git repository, a ref (branch, tag or commit) and a path inside it.
type GitSource struct {
	URL  string `json:"url"`
	Ref  string `json:"ref,omitempty"`
	Path string `json:"path,omitempty"`
}

// DeploymentInput is the body of deployment create.
type DeploymentInput struct {
	RunnerID  string    `json:"runner_id"`
	Operation Operation `json:"operation"`
	Source    Source    `json:"source"`
	// Variables are Terraform input variables; values are any JSON.
	Variables map[string]json.RawMessage `json:"variables,omitempty"`
	// StateKey names the state this deployment reads and writes.
	StateKey string `json:"state_key"`
	// TimeoutSeconds overrides the runner's job timeout when set.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// SavePlan (operation plan only, kubernetes state storage only) keeps the plan file in the
	// cluster for review: the job runner uploads only its summary, and once approved the plan
	// is applied exactly with POST …/deployments/{id}/apply.
	SavePlan bool `json:"save_plan,omitempty"`
	// PlanDestroy makes the saved plan a destroy plan (`plan -destroy`): the reviewed way to
	// destroy on a runner that requires approval.
	PlanDestroy bool `json:"plan_destroy,omitempty"`
	// PlanTTLSeconds is how long the saved plan can be applied after it was made (default
	// DefaultPlanTTLSeconds).
	PlanTTLSeconds int `json:"plan_ttl_seconds,omitempty"`
}

// Deployment is what a user queues on a runner: an operation on a source, with variables and a
// state key, run by one attempt after another until one ends it.
type Deployment struct {
	ID             string                     `json:"id"`
	RunnerID       string                     `json:"runner_id"`
	Operation      Operation                  `json:"operation"`
	Source         Source                     `json:"source"`
	Variables      map[string]json.RawMessage `json:"variables,omitempty"`
	StateKey       string                     `json:"state_key"`
	TimeoutSeconds int                        `json:"timeout_seconds"`
	// DriftCheck marks a plan that a schedule (ScheduleID) queued: its job runner runs the plan
	// with -detailed-exitcode and reports whether the state key drifted (api.Drift).
	DriftCheck bool   `json:"drift_check,omitempty"`
	ScheduleID string `json:"schedule_id,omitempty"`
	// SavePlan, PlanDestroy and PlanTTLSeconds are as in DeploymentInput.
	SavePlan       bool `json:"save_plan,omitempty"`
	PlanDestroy    bool `json:"plan_destroy,omitempty"`
	PlanTTLSeconds int  `json:"plan_ttl_seconds,omitempty"`
	// PlanOf is the plan deployment whose saved plan this apply runs (`apply <planfile>`).
	PlanOf string `json:"plan_of,omitempty"`
	Status Status `json:"status"`
	// Attempt counts from 1; it grows when an expired job lease returns the deployment to the
	// queue.
	Attempt         int  `json:"attempt"`
	CancelRequested bool `json:"cancel_requested,omitempty"`
	ExitCode        *int `json:"exit_code,omitempty"`
	// Reason is why the deployment ended, or, while its attempt waits before the CLI started,
	// why it waits (the latest waiting event); empty otherwise.
	Reason Reason `json:"reason,omitempty"`
	// Message says in Outpost's words what happened and what to do.
	Message string `json:"message,omitempty"`
	// Detail is what the cluster said, verbatim: the scheduler's message, the registry's answer,
	// the memory limit main was OOM-killed at, the Job controller's condition.
	Detail       string `json:"detail,omitempty"`
	LogSize      int64  `json:"log_size"`
	LogTruncated bool   `json:"log_truncated,omitempty"`
	// OutputsOmitted counts the Terraform outputs the job runner (or the orchestrator) left out
	// of the stored outputs to keep within MaxOutputs and MaxOutputsBytes; the deployment's
	// result does not depend on it.
	OutputsOmitted int        `json:"outputs_omitted,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	ClaimedAt      *time.Time `json:"claimed_at,omitempty"`
	StartedAt      *time.Time `json:"started_at,omitempty"`
	FinishedAt     *time.Time `json:"finished_at,omitempty"`
	// SourcePurgedAt is when the orchestrator's retention deleted the source and the variables
	// (they can hold secrets); Source and Variables are empty from then on.
	SourcePurgedAt *time.Time `json:"source_purged_at,omitempty"`
	// LogsPurgedAt is when the orchestrator's retention deleted the log and the events; the log
	// reads as empty and complete from then on.
	LogsPurgedAt *time.Time `json:"logs_purged_at,omitempty"`
	// TraceID is the OpenTelemetry trace id (32 hex digits) of the deployment's trace, when the
	// orchestrator traces: look the deployment up by it in the tracing backend.
	TraceID string `json:"trace_id,omitempty"`
}

// Output is one Terraform output, as `terraform output -json` prints it.
type Output struct {
	Value     json.RawMessage `json:"value"`
	Type      json.RawMessage `json:"type,omitempty"`
	Sensitive bool            `json:"sensitive"`
}

// Outputs maps output names to values.
type Outputs map[string]Output

// Limits of a deployment's stored outputs. The outputs come after the apply has changed the
// infrastructure, so going over them never fails a deployment: what does not fit is left out
// (Outputs.Cap) and counted in Deployment.OutputsOmitted.
const (
	// MaxOutputs is the most outputs a deployment keeps.
	MaxOutputs = 1000
	// MaxOutputsBytes is the largest JSON body of the outputs a job runner uploads.
	MaxOutputsBytes = 1 << 20
	// OutputsOmittedParam is the query parameter of the outputs upload that says how many
	// outputs the job runner left out.
	OutputsOmittedParam = "omitted"
)

// Cap returns the outputs that fit within maxCount outputs and maxBytes of JSON, taken in name
// order and skipping any that would not fit (one large output does not push out every later
// one), and the names of those left out, in name order.
func (o Outputs) Cap(maxCount, maxBytes int) (kept Outputs, omitted []string) {
	names := make([]string, 0, len(o))
	for n := range o {
		names = append(names, n)
	}
	slices.Sort(names)
	kept = Outputs{}
	size := len("{}")
	for _, n := range names {
		entry, err := json.Marshal(map[string]Output{n: o[n]})
		// entry is {"name":{…}}: the braces stand for the comma between entries.
		if err != nil || len(kept) >= maxCount || size+len(entry)-1 > maxBytes {
			omitted = append(omitted, n)
			continue
		}
		kept[n] = o[n]
		size += len(entry) - 1
	}
	return kept, omitted
}

// Event is one point of an attempt's timeline: what the agent says happened to it (the body of
// EventRequest without the fencing number), or the claim, which the orchestrator records. The
// admin API lists an attempt's events in timeline order (by attempt, time to the second, step,
// seq); every listed event has a Step.
type Event struct {
	Attempt int       `json:"attempt"`
	Seq     int64     `json:"seq"`
	Type    EventType `json:"type"`
	// Step is the point of the timeline the event marks (claimed, job_created, pod_scheduled,
	// pod_initialized, waiting, cli_started, finished). Sent by agents from ProtocolTimeline on.
	Step Step `json:"step,omitempty"`
	// Result is the terminal status of a finished event: succeeded, failed or canceled.
	Result   Status `json:"result,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	// Reason is the typed cause of a waiting event or of a finished event that did not succeed.
	Reason Reason `json:"reason,omitempty"`
	// Message says in Outpost's words what happened and what to do.
	Message string `json:"message,omitempty"`
	// Detail is the cluster's own words, verbatim: the scheduler's message, the registry's
	// answer, the memory limit of an OOM kill, the Job controller's condition. Sent by agents
	// from ProtocolTimeline on (before, it is part of Message).
	Detail string `json:"detail,omitempty"`
	// Node is the node the pod was scheduled to (pod_scheduled).
	Node string `json:"node,omitempty"`
	// By names who asked for what a review event records (approved, discarded, apply_queued,
	// apply_refused): the admin token's id and name.
	By   string    `json:"by,omitempty"`
	Time time.Time `json:"time"`
}

// LogChunk is a slice of a deployment's log, from the admin API.
type LogChunk struct {
	Offset int64  `json:"offset"`
	Data   []byte `json:"data"`
	// NextOffset is where the next read should start.
	NextOffset int64 `json:"next_offset"`
	// Complete is true when the deployment is terminal and NextOffset is the end of the log.
	Complete  bool `json:"complete"`
	Truncated bool `json:"truncated,omitempty"`
}
