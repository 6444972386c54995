package session

import (
	"context"
	"log/slog"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// stepSeqs are the seqs of the timeline steps the executor reports.
var stepSeqs = map[api.Step]int64{
	api.StepJobCreated:     api.SeqJobCreated,
	api.StepPodScheduled:   api.SeqPodScheduled,
	api.StepPodInitialized: api.SeqPodInitialized,
}

// progressEvents are the timeline events of an attempt not yet sent: each step the executor saw
// (Job created, pod scheduled to a node, pod initialized), then, while the CLI has not started,
// what the attempt waits for, once per reason. Their seqs come from the step or the reason
// (api.WaitingSeq), so after an agent restart they are sent again with the same seqs and the
// orchestrator keeps the first of each. Called with s.mu held.
func progressEvents(st executor.AttemptStatus, att *attemptState, now time.Time) []api.EventRequest {
	fencing := att.fencing
	if st.Fencing != 0 {
		fencing = st.Fencing
	}
	var out []api.EventRequest
	for _, step := range st.Timeline {
		seq, ok := stepSeqs[step.Step]
		if !ok || att.sentSeqs[seq] {
			continue
		}
		t := step.Time
		if t.IsZero() {
			t = now
		}
		out = append(out, api.EventRequest{Fencing: fencing, Event: api.Event{Attempt: st.Attempt, Seq: seq, Type: api.EventProgress,
			Step: step.Step, Node: step.Node, Time: t.UTC().Truncate(time.Second)}})
	}
	if w := st.Waiting; w != nil && !st.Started && !st.Terminal() {
		if seq, ok := api.WaitingSeq(w.Reason); ok && !att.sentSeqs[seq] {
			out = append(out, api.EventRequest{Fencing: fencing, Event: api.Event{Attempt: st.Attempt, Seq: seq, Type: api.EventProgress,
				Step: api.StepWaiting, Reason: w.Reason, Message: w.Message, Detail: w.Detail, Time: now.UTC().Truncate(time.Second)}})
		}
	}
	return out
}

// sendProgress sends an attempt's timeline events in order. An event the orchestrator refuses
// for good (the deployment ended meanwhile, the attempt's event cap) is dropped: the timeline is
// information, and the started and finished events that follow must not wait on it. Any other
// error stops the sends for a retry.
func (s *Session) sendProgress(ctx context.Context, att *attemptState, st executor.AttemptStatus, progress []api.EventRequest, log *slog.Logger) error {
	for _, ev := range progress {
		_, err := s.postEvent(ctx, st.DeploymentID, ev)
		if err != nil && retry.Eventually(err) {
			return err
		}
		if err != nil {
			log.Debug("timeline event refused; dropping it", "step", ev.Step, "reason", ev.Reason, "err", err)
		} else if ev.Step == api.StepWaiting {
			s.o.Metrics.Waiting.WithLabelValues(string(ev.Reason)).Inc()
			log.Info("attempt waits", "reason", ev.Reason, "detail", ev.Detail)
		}
		s.mu.Lock()
		if att.sentSeqs == nil {
			att.sentSeqs = map[int64]bool{}
		}
		att.sentSeqs[ev.Seq] = true
		att.progress = without(att.progress, ev.Seq)
		s.mu.Unlock()
	}
	return nil
}

// without is events without the one of seq.
func without(events []api.EventRequest, seq int64) []api.EventRequest {
	out := events[:0:0]
	for _, ev := range events {
		if ev.Seq != seq {
			out = append(out, ev)
		}
	}
	return out
}
