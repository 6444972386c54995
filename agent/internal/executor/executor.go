// Package executor is the seam between the agent's session (which talks to the orchestrator) and
// the place jobs really run: Kubernetes Jobs in a cluster, or local processes for development and
// the CLI tests. Everything an executor knows it keeps outside the agent's memory (Job objects,
// annotations, files), so an agent that restarts rebuilds its whole picture from List.
package executor

import (
	"context"
	"errors"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Phases of a held job. Succeeded, Failed and Canceled are terminal: the session reports them
// and, once the orchestrator has acknowledged, calls Cleanup.
const (
	PhasePending   = "pending"
	PhaseRunning   = "running"
	PhaseSucceeded = "succeeded"
	PhaseFailed    = "failed"
	PhaseCanceled  = "canceled"
)

// Reasons an executor gives for a failed or canceled job. They become the reason of the final
// report and the label of the failure metric, so keep the set small and stable.
const (
	ReasonExitCode           = "exit_code"
	ReasonOOMKilled          = "oom_killed"
	ReasonDeadlineExceeded   = "deadline_exceeded"
	ReasonUnschedulable      = "unschedulable"
	ReasonImagePull          = "image_pull"
	ReasonStartupTimeout     = "startup_timeout"
	ReasonInvalidTemplate    = "invalid_pod_template"
	ReasonStartFailed        = "start_failed"
	ReasonEvicted            = "evicted"
	ReasonCanceled           = "canceled"
	ReasonLost               = "lost"
	ReasonDisappeared        = "disappeared"
	ReasonUnknownTermination = "unknown"
)

// ErrInvalidJob marks a Start error that no retry can fix (a pod template that breaks the
// contract, a claim in the wrong namespace). The session turns it into a failed final report
// instead of retrying.
var ErrInvalidJob = errors.New("job cannot run")

// Executor runs claimed jobs. Every method is idempotent: the session calls them again after
// errors and after restarts.
type Executor interface {
	// Start runs the claim; an existing Job or process for (job, attempt) is adopted.
	Start(ctx context.Context, c *api.Claim) error
	// List returns every job this executor holds, including finished ones not yet cleaned up.
	List(ctx context.Context) ([]Status, error)
	// Cancel stops a job, giving the CLI grace to release locks and push state.
	Cancel(ctx context.Context, jobID string, attempt int, grace time.Duration) error
	// Cleanup deletes everything of the job, after its final report was acknowledged.
	Cleanup(ctx context.Context, jobID string, attempt int) error
	// SavePendingReport stores an undelivered final report with the job (the outbox), so it
	// survives an agent restart and is re-sent byte for byte.
	SavePendingReport(ctx context.Context, jobID string, attempt int, report []byte) error
	// JobToken returns the per-job token stored with the job, so an agent that restarted can
	// authorise the job's state requests again. ErrNoToken when it is not stored.
	JobToken(ctx context.Context, jobID string, attempt int) (string, error)
	// Changes signals (coalesced) that some job's status may have changed.
	Changes() <-chan struct{}
}

// ErrNoToken says the executor has no token stored for the job.
var ErrNoToken = errors.New("no job token stored")

// Status is what an executor observed of one job.
type Status struct {
	JobID   string
	Attempt int
	Fencing int64
	Phase   string
	// Started is true once the job's main container (or process) has started.
	Started bool
	// ExitCode of main, when it terminated.
	ExitCode *int
	Reason   string
	Message  string
	// StateKey is the claim's state key, for the state backend's authorizer after a restart.
	StateKey string
	// StateNamespace is where the claim's kubernetes state storage keeps states ("" for others).
	StateNamespace string
	// PendingReport is the saved, undelivered final report, if any.
	PendingReport []byte
	// ClaimedAt is when the agent created the job; StartedAt and FinishedAt come from the
	// runtime and are zero while unknown.
	ClaimedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
}

// Terminal reports whether the phase is final.
func (s Status) Terminal() bool {
	switch s.Phase {
	case PhaseSucceeded, PhaseFailed, PhaseCanceled:
		return true
	}
	return false
}

// Key identifies a job attempt.
type Key struct {
	JobID   string
	Attempt int
}

// Key returns the status's job attempt.
func (s Status) Key() Key { return Key{JobID: s.JobID, Attempt: s.Attempt} }

// Notifier coalesces change signals into a channel of capacity one, so producers never block.
type Notifier struct{ ch chan struct{} }

// NewNotifier returns a ready Notifier.
func NewNotifier() *Notifier { return &Notifier{ch: make(chan struct{}, 1)} }

// Notify signals a change without blocking.
func (n *Notifier) Notify() {
	select {
	case n.ch <- struct{}{}:
	default:
	}
}

// C is the channel receivers wait on.
func (n *Notifier) C() <-chan struct{} { return n.ch }
