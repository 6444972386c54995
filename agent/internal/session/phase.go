package session

// An attempt's phase: what it needs next from the event workers (phaseOf).

import (
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
)

// phase is what an attempt needs next from the event workers, derived from what the executor
// reports and what the orchestrator has acknowledged (phaseOf).
type phase int

const (
	// phaseRunning: nothing to send now (not started yet, or its started event acknowledged).
	phaseRunning phase = iota
	// phaseSendProgress: timeline events (steps seen, reasons waited for) are due.
	phaseSendProgress
	// phaseSendStarted: the CLI started; the started event is due.
	phaseSendStarted
	// phaseSendFinished: the attempt ended; the finished event is due (after the started event,
	// if that was never sent).
	phaseSendFinished
	// phaseRefused: the orchestrator refused an event for good; wait for its forget directive.
	phaseRefused
	// phaseCleanup: acknowledged (or forgotten); the executor's cleanup is due.
	phaseCleanup
	// phaseDone: cleaned up; forgotten once the executor no longer lists it.
	phaseDone
)

// phaseOf is the one place that reads an attempt's flags. An attempt the orchestrator forgot is
// cleaned up even after a refusal: forget is the directive a refused attempt waits for.
func phaseOf(st executor.AttemptStatus, att *attemptState) phase {
	switch {
	case att.acked && att.cleaned:
		return phaseDone
	case att.acked:
		return phaseCleanup
	case att.refused:
		return phaseRefused
	case st.Terminal():
		return phaseSendFinished
	case st.Started && !att.startedSent:
		return phaseSendStarted
	case len(att.progress) > 0:
		return phaseSendProgress
	default:
		return phaseRunning
	}
}

// eventLoop runs the event workers and, whenever the executor signals a change and at least
// every two seconds (retries, and changes a watch may have coalesced), queues the attempts that
// need work. When ctx ends the queues stop taking work; what a worker has begun finishes under
// its own timeout.
