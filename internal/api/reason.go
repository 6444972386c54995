package api

import (
	"slices"
	"strings"
)

// Reason is the typed cause of why an attempt waits or how a deployment ended: one of the
// constants below, the same word in events, on the deployment, in the CLI, the console and the
// orchestrator's outpost_orchestrator_deployment_reasons_total. What the cluster said in its
// own words travels beside it, in Detail, never folded into the reason.
type Reason string

// Reasons the agent reports (from the Job's and pod's conditions, container states and Warning
// events) and the orchestrator sets itself (lease_expired, runner_deleted, canceled before a
// start). Keep the set small and stable: reasons label a metric, and a waiting event's seq is
// derived from its reason's place in Reasons.
const (
	// ReasonExitCode: the CLI's container exited non-zero; Detail holds its termination message.
	ReasonExitCode Reason = "exit_code"
	// ReasonOOMKilled: the kernel killed main for exceeding its memory limit; Detail names the limit.
	ReasonOOMKilled Reason = "oom_killed"
	// ReasonDeadlineExceeded: the Job ran past activeDeadlineSeconds (the deployment's timeout).
	ReasonDeadlineExceeded Reason = "deadline_exceeded"
	// ReasonUnschedulable: the scheduler finds no node for the pod; Detail is its message.
	ReasonUnschedulable Reason = "unschedulable"
	// ReasonImagePull: a container's image cannot be pulled; Detail is the runtime's (registry's)
	// answer.
	ReasonImagePull Reason = "image_pull"
	// ReasonQuotaExceeded: the Job controller cannot create the pod within the namespace's
	// ResourceQuota; Detail is the API server's refusal.
	ReasonQuotaExceeded Reason = "quota_exceeded"
	// ReasonStartupTimeout: the pod did not start within the agent's startup timeout for no
	// reason the cluster named.
	ReasonStartupTimeout  Reason = "startup_timeout"
	ReasonInvalidTemplate Reason = "invalid_pod_template"
	ReasonPodPolicy       Reason = "pod_policy"
	ReasonNoStateBackend  Reason = "no_state_backend"
	// ReasonStartFailed: a Warning event of the Job or pod that no other reason covers (e.g.
	// FailedCreate, FailedMount); Detail is the event's reason and message.
	ReasonStartFailed Reason = "start_failed"
	// ReasonEvicted: the pod was evicted or preempted (DisruptionTarget).
	ReasonEvicted Reason = "evicted"
	// ReasonNodeLost: the node of the attempt's pod stopped answering and Kubernetes gave the pod
	// up (taint-based eviction, then the pod garbage collector once the node is gone). Its CLI
	// may have partly run.
	ReasonNodeLost Reason = "node_lost"
	// ReasonCanceled: a cancel request ended the deployment.
	ReasonCanceled Reason = "canceled"
	// ReasonLost: the agent lost the attempt.
	ReasonLost Reason = "lost"
	// ReasonDisappeared: the attempt's Job or process was deleted before it finished.
	ReasonDisappeared Reason = "disappeared"
	// ReasonUnknownTermination: the Job failed and nothing says why.
	ReasonUnknownTermination Reason = "unknown"
	// ReasonLeaseExpired: the orchestrator heard nothing from the agent within the job lease.
	ReasonLeaseExpired Reason = "lease_expired"
	// ReasonRunnerDeleted: the deployment's runner was deleted before it ended.
	ReasonRunnerDeleted Reason = "runner_deleted"
	// ReasonStalePlan: the agent refused the claim of an apply of a saved plan because the state
	// moved since the plan was made (its serial or lineage differ); nothing was created.
	ReasonStalePlan Reason = "stale_plan"
	// ReasonPlanExpired: the agent refused the claim of an apply of a saved plan because the plan
	// file is gone from the cluster (expired, or deleted); nothing was created.
	ReasonPlanExpired Reason = "plan_expired"
)

// Reasons lists every reason. Append only: a waiting event's seq is SeqWaiting plus its
// reason's index here, so a reordering would make an agent resend old waiting events as new.
var Reasons = []Reason{
	ReasonExitCode, ReasonOOMKilled, ReasonDeadlineExceeded, ReasonUnschedulable, ReasonImagePull,
	ReasonQuotaExceeded, ReasonStartupTimeout, ReasonInvalidTemplate, ReasonPodPolicy, ReasonNoStateBackend,
	ReasonStartFailed, ReasonEvicted, ReasonNodeLost, ReasonCanceled, ReasonLost, ReasonDisappeared,
	ReasonUnknownTermination, ReasonLeaseExpired, ReasonRunnerDeleted, ReasonStalePlan, ReasonPlanExpired,
}

// Known reports whether r is one of Reasons.
func (r Reason) Known() bool { return slices.Contains(Reasons, r) }

// Step is the point of an attempt's timeline an event marks. Every event has one on the admin
// API (the orchestrator fills it in for agents that send none); the agent sends steps from agent
// protocol ProtocolTimeline on.
type Step string

// The steps of an attempt's timeline, in the order they happen; StepWaiting may come between any
// two before cli_started, once per reason.
const (
	// StepClaimed: the agent claimed the attempt (recorded by the orchestrator at the claim).
	StepClaimed Step = "claimed"
	// StepJobCreated: the agent created the attempt's Kubernetes Job (or local process).
	StepJobCreated Step = "job_created"
	// StepPodScheduled: the scheduler bound the Job's pod to a node; Event.Node names it.
	StepPodScheduled Step = "pod_scheduled"
	// StepPodInitialized: the pod's init containers ran: their images were pulled and the job
	// runner was copied into the pod.
	StepPodInitialized Step = "pod_initialized"
	// StepWaiting: the attempt waits for something the cluster named; Event.Reason is why,
	// Event.Detail the cluster's words.
	StepWaiting Step = "waiting"
	// StepCLIStarted: main (the CLI) started; the started event.
	StepCLIStarted Step = "cli_started"
	// StepFinished: the attempt ended; the finished event.
	StepFinished Step = "finished"
	// Review steps of a saved plan, recorded by the orchestrator on the plan deployment after
	// it finished; Event.By names who asked. apply_queued names the apply deployment in
	// Message; apply_refused says why in Message, its code in Detail.
	StepApproved     Step = "approved"
	StepDiscarded    Step = "discarded"
	StepApplyQueued  Step = "apply_queued"
	StepApplyRefused Step = "apply_refused"
)

// Steps lists every step in timeline order.
var Steps = []Step{StepClaimed, StepJobCreated, StepPodScheduled, StepPodInitialized, StepWaiting, StepCLIStarted, StepFinished,
	StepApproved, StepDiscarded, StepApplyQueued, StepApplyRefused}

// Review reports whether s is one of the steps the orchestrator records when a person acts on a
// saved plan (approved, discarded, apply_queued, apply_refused); an agent never sends them.
func (s Step) Review() bool {
	switch s {
	case StepApproved, StepDiscarded, StepApplyQueued, StepApplyRefused:
		return true
	}
	return false
}

// Valid reports whether s is one of Steps.
func (s Step) Valid() bool { return slices.Contains(Steps, s) }

// Rank is the step's place in Steps, for ordering events of the same second; an event without
// a step (a progress event of an older agent) ranks with waiting.
func (s Step) Rank() int {
	if s == "" {
		s = StepWaiting
	}
	if i := slices.Index(Steps, s); i >= 0 {
		// Review steps rank alike: they happen in the order they were asked for (their seq).
		return min(i, slices.Index(Steps, StepApproved))
	}
	return len(Steps)
}

// Seq numbers of an attempt's events. They are derived from what an event says, never counted,
// so an agent that restarts sends the same events again and the orchestrator's
// (deployment, attempt, seq) deduplication records each once.
const (
	SeqStarted        int64 = 1
	SeqFinished       int64 = 2
	SeqClaimed        int64 = 3
	SeqJobCreated     int64 = 4
	SeqPodScheduled   int64 = 5
	SeqPodInitialized int64 = 6
	// SeqWaiting is the seq of the first reason's waiting event; see WaitingSeq.
	SeqWaiting int64 = 100
	// SeqReview is the seq of a plan deployment's first review event (approved, discarded,
	// apply_queued, apply_refused); the orchestrator numbers them on from there.
	SeqReview int64 = 1 << 20
)

// WaitingSeq is the seq of an attempt's waiting event for reason r: one per reason and attempt,
// the first time the agent sees the attempt wait for it. ok is false for an unknown reason.
func WaitingSeq(r Reason) (seq int64, ok bool) {
	if i := slices.Index(Reasons, r); i >= 0 {
		return SeqWaiting + int64(i), true
	}
	return 0, false
}

// StepOf is the step an event marks: its own, or, for an event of an agent that sends none,
// the one its type implies (started: cli_started, finished: finished, progress: waiting when it
// has a reason).
func (e *Event) StepOf() Step {
	switch {
	case e.Step != "":
		return e.Step
	case e.Type == EventStarted:
		return StepCLIStarted
	case e.Type == EventFinished:
		return StepFinished
	case e.Reason != "":
		return StepWaiting
	}
	return ""
}

// WithoutTimeline is the event in the shape of agent protocols before ProtocolTimeline: no step,
// node or detail, the detail appended to the message unless the message holds it already.
func (e Event) WithoutTimeline() Event {
	if e.Detail != "" && !strings.Contains(e.Message, e.Detail) {
		if e.Message != "" {
			e.Message += ": "
		}
		e.Message += e.Detail
	}
	e.Step, e.Node, e.Detail = "", "", ""
	return e
}
