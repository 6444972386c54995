// Package executor is the seam between the agent's session (which talks to the orchestrator) and
// the place attempts really run: one Kubernetes Job per attempt in a cluster, or one local process
// per attempt for development and the CLI tests. Everything an executor knows it keeps outside
// the agent's memory (Job objects, annotations, files), so an agent that restarts rebuilds its
// whole picture from List.
package executor

import (
	"context"
	"errors"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// An attempt's Status in an executor is an API status: api.StatusClaimed until its CLI starts,
// api.StatusRunning, then api.StatusSucceeded, api.StatusFailed or api.StatusCanceled, which are
// terminal: the session sends them as the result of the finished event and, once the
// orchestrator has acknowledged it, calls Cleanup.

// Reasons an executor gives for a waiting, failed or canceled attempt: the API's typed reasons
// (api.Reason), named here for the executors. They become the reason of waiting and finished
// events and the label of the failure metrics.
const (
	ReasonExitCode           = api.ReasonExitCode
	ReasonOOMKilled          = api.ReasonOOMKilled
	ReasonDeadlineExceeded   = api.ReasonDeadlineExceeded
	ReasonUnschedulable      = api.ReasonUnschedulable
	ReasonImagePull          = api.ReasonImagePull
	ReasonQuotaExceeded      = api.ReasonQuotaExceeded
	ReasonStartupTimeout     = api.ReasonStartupTimeout
	ReasonInvalidTemplate    = api.ReasonInvalidTemplate
	ReasonPodPolicy          = api.ReasonPodPolicy
	ReasonNoStateBackend     = api.ReasonNoStateBackend
	ReasonStartFailed        = api.ReasonStartFailed
	ReasonEvicted            = api.ReasonEvicted
	ReasonNodeLost           = api.ReasonNodeLost
	ReasonCanceled           = api.ReasonCanceled
	ReasonLost               = api.ReasonLost
	ReasonDisappeared        = api.ReasonDisappeared
	ReasonUnknownTermination = api.ReasonUnknownTermination
)

// ErrInvalidJob marks a Start error that no retry can fix (a pod template that breaks the
// contract, a claim in the wrong namespace). The session turns it into a failed finished event
// instead of retrying.
var ErrInvalidJob = errors.New("the attempt cannot run")

// ErrPolicy marks a Start error of a pod the cluster owner's job pod policy refuses; it is an
// ErrInvalidJob too.
var ErrPolicy = errors.New("refused by the job pod policy")

// Executor runs claimed attempts. Every method is idempotent: the session calls them again after
// errors and after restarts.
type Executor interface {
	// Start runs the claimed attempt; an existing Job or process of the attempt is adopted.
	// stateToken is the attempt's credential at the agent's state backend (jobtoken.Registry),
	// handed to the job runner beside the job token.
	Start(ctx context.Context, c *api.Claim, stateToken string) error
	// List returns every attempt this executor holds, including finished ones not yet cleaned up.
	List(ctx context.Context) ([]AttemptStatus, error)
	// Cancel stops an attempt, giving the CLI grace to release locks and push state.
	Cancel(ctx context.Context, deploymentID string, attempt int, grace time.Duration) error
	// Cleanup ends the attempt after its finished event was acknowledged: everything of it is
	// deleted, or (kubernetes) its finished Job is kept in the history, no attempt any more.
	Cleanup(ctx context.Context, deploymentID string, attempt int) error
	// SavePendingEvent stores an undelivered finished event with the attempt (the outbox), so it
	// survives an agent restart and is re-sent byte for byte.
	SavePendingEvent(ctx context.Context, deploymentID string, attempt int, event []byte) error
	// JobToken returns the job token stored with the attempt, so an agent that restarted can
	// authorise its job runner's state requests again. ErrNoToken when it is not stored.
	JobToken(ctx context.Context, deploymentID string, attempt int) (string, error)
	// Changes signals (coalesced) that some attempt's status may have changed.
	Changes() <-chan struct{}
}

// ErrNoToken says the executor has no job token stored for the attempt.
var ErrNoToken = errors.New("no job token stored")

// AttemptStatus is what an executor observed of one attempt.
type AttemptStatus struct {
	DeploymentID string
	Attempt      int
	Fencing      int64
	// Status is where the attempt stands (see above): claimed, running, or a terminal result.
	Status api.Status
	// Started is true once the attempt's CLI (the Job's main container, or the process) has
	// started.
	Started bool
	// ExitCode of main, when it terminated.
	ExitCode *int
	// Reason, Message and Detail say why a terminal attempt did not succeed: the typed reason,
	// Outpost's words (what to do), and the cluster's own words (Detail: the scheduler's
	// message, the registry's answer, the memory limit of an OOM kill).
	Reason  api.Reason
	Message string
	Detail  string
	// Waiting, while the attempt's CLI has not started, is what the cluster says it waits for
	// (nil when it names nothing).
	Waiting *Waiting
	// Timeline holds the steps of the attempt seen so far before its CLI started (job_created,
	// pod_scheduled, pod_initialized), oldest first.
	Timeline []Step
	// StateKey is the claim's state key, for the state backend's authorizer after a restart.
	StateKey string
	// StateNamespace is where the claim's kubernetes state storage keeps states ("" for others).
	StateNamespace string
	// Operation is the claim's operation; it decides the state access of the job runner.
	Operation api.Operation
	// PlanOf is the plan deployment whose saved plan the attempt applies ("" for others).
	PlanOf string
	// PendingEvent is the saved, undelivered finished event, if any.
	PendingEvent []byte
	// ClaimedAt is when the agent created the Job or process; StartedAt and FinishedAt come from
	// the runtime and are zero while unknown.
	ClaimedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
}

// Waiting is why an attempt that has not started yet waits.
type Waiting struct {
	Reason api.Reason
	// Message is Outpost's explanation and what to do; Detail the cluster's own words.
	Message string
	Detail  string
}

// Step is a point of an attempt's timeline the executor saw: when it happened, and the node
// for api.StepPodScheduled.
type Step struct {
	Step api.Step
	Time time.Time
	Node string
}

// Terminal reports whether the attempt has ended.
func (s AttemptStatus) Terminal() bool { return s.Status.Terminal() }

// AttemptKey identifies an attempt of a deployment.
type AttemptKey struct {
	DeploymentID string
	Attempt      int
}

// Key returns the attempt the status is of.
func (s AttemptStatus) Key() AttemptKey {
	return AttemptKey{DeploymentID: s.DeploymentID, Attempt: s.Attempt}
}

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
