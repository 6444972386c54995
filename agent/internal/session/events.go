package session

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// maxConcurrentSends is the number of event workers: a backlog (a wave of attempts that end
// together, the orchestrator back after an outage) drains in parallel. Their events go in
// batches (eventBatcher) once the orchestrator speaks api.ProtocolEventBatch, up to this many in
// one request, on batchesInFlight connections; one by one to an older orchestrator, on as many
// connections as workers. Cleanups have workers of
// their own (maxConcurrentCleanups), so an attempt's cleanup, whose Kubernetes requests give way
// to starts at the client's rate limit, never holds up the finished events of others, which free
// the runner's slots.
const (
	maxConcurrentSends    = 64
	maxConcurrentCleanups = 16
)

func (s *Session) eventLoop(ctx context.Context) error {
	q := newEventQueues(s.o.EventBackoff)
	var b *eventBatcher
	if to, ok := s.o.Client.(EventBatcher); ok {
		b = newEventBatcher(to, s.o.Client.Event, s.o.FinalTimeout)
	}
	s.mu.Lock()
	s.queues, s.batcher = q, b
	s.mu.Unlock()
	if b != nil {
		// The batcher outlives the workers: it stops once they have finished what they began.
		bctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { b.run(bctx); close(done) }()
		defer func() {
			s.mu.Lock()
			s.batcher = nil // a late send (a forget directive's) goes alone
			s.mu.Unlock()
			stop()
			<-done
		}()
	}
	var workers sync.WaitGroup
	for range maxConcurrentSends {
		workers.Go(func() { s.work(ctx, q.sends, s.processSend) })
	}
	for range maxConcurrentCleanups {
		workers.Go(func() { s.work(ctx, q.cleanups, s.processCleanup) })
	}
	defer func() {
		q.sends.ShutDown()
		q.cleanups.ShutDown()
		workers.Wait()
	}()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		if err := s.eventPass(ctx, q); err != nil && ctx.Err() == nil {
			s.log.Error("event pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.o.Executor.Changes():
		case <-s.kick.C():
		case <-tick.C:
		}
	}
}

// eventPass compares what the executor holds with what the orchestrator was told, and queues
// every attempt that needs a send or a cleanup.
func (s *Session) eventPass(ctx context.Context, q *eventQueues) error {
	statuses, err := s.o.Executor.List(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	present := map[executor.AttemptKey]bool{}
	pending := 0
	s.mu.Lock()
	defer s.mu.Unlock()
	holdForTimeline := s.protocol == 0 && now.Sub(s.began) < holdForProtocol
	for _, st := range statuses {
		k := st.Key()
		present[k] = true
		att := s.state(k)
		att.seen = true
		if att.fencing == 0 {
			att.fencing = st.Fencing
		}
		att.status = st
		att.progress = nil
		if s.protocol >= api.ProtocolTimeline && !att.acked && !att.refused {
			att.progress = progressEvents(st, att, now)
		}
		if st.Terminal() && !att.acked {
			pending++
		}
		if holdForTimeline && (len(st.Timeline) > 0 || st.Waiting != nil) && !att.acked {
			continue // its timeline events may be due; the first poll answer says
		}
		q.queue(k, phaseOf(st, att))
	}
	for k, att := range s.attempts {
		switch {
		case present[k]:
		case att.pendingEvent != nil && !att.acked:
			// The executor never held it (start failed): its finished event lives only here.
			pending++
			att.status = executor.AttemptStatus{DeploymentID: k.DeploymentID, Attempt: k.Attempt, Fencing: att.fencing, PendingEvent: att.pendingEvent, Status: api.StatusFailed}
			q.queue(k, phaseOf(att.status, att))
		case att.seen && !att.acked && !att.refused && att.status.Terminal():
			// Gone after it ended, its finished event not yet acknowledged: that event is known.
			att.pendingEvent = encodeEvent(finishedEvent(att.status, att.fencing))
			pending++
		case att.seen && !att.acked && !att.refused:
			// Held before, gone now without a finished event: someone deleted the Job.
			s.log.Warn("attempt disappeared before it finished; sending its finished event as failed", "deployment_id", k.DeploymentID, "attempt", k.Attempt, "fencing", att.fencing)
			att.pendingEvent = encodeEvent(api.EventRequest{Fencing: att.fencing, Event: api.Event{Attempt: k.Attempt, Seq: SeqFinished, Type: api.EventFinished,
				Result: api.StatusFailed, Reason: executor.ReasonDisappeared, Message: "the attempt's Kubernetes Job or process disappeared before it finished", Time: now.UTC()}})
			pending++
		case att.acked || att.refused || !att.seen:
			// Not held any more: acknowledged (or forgotten) and gone, nothing left to clean.
			if att.acked || att.refused {
				delete(s.attempts, k)
			}
		}
	}
	s.o.Metrics.PendingEvents.Set(float64(pending))
	return nil
}

// processSend sends what an attempt's phase calls for, then hands it to the cleanups when it is
// done with the orchestrator.
func (s *Session) processSend(ctx context.Context, k executor.AttemptKey) {
	s.mu.Lock()
	att, q := s.attempts[k], s.queues
	var st executor.AttemptStatus
	ph := phaseRunning
	if att != nil {
		st, ph = att.status, phaseOf(att.status, att)
	}
	s.mu.Unlock()
	if ph != phaseSendStarted && ph != phaseSendFinished && ph != phaseSendProgress {
		q.sendRetry.Forget(k)
		return
	}
	log := s.log.With("deployment_id", k.DeploymentID, "attempt", k.Attempt)
	clean, err := s.send(ctx, att, st, log)
	switch {
	case err == nil:
		q.sendRetry.Forget(k)
		if clean {
			q.cleanups.Add(k)
		}
	case !retry.Eventually(err):
		q.sendRetry.Forget(k)
		s.mu.Lock()
		att.refused = true
		s.mu.Unlock()
		s.o.Metrics.Events.WithLabelValues("refused").Inc()
		log.Warn("the orchestrator refused the attempt's event; waiting for its directive", "err", err)
	default:
		wait := q.sendRetry.next(k, api.RetryAfter(err))
		q.sends.AddAfter(k, wait)
		s.o.Metrics.Events.WithLabelValues("retry").Inc()
		log.Warn("event not delivered; will retry", "err", err, "wait", wait.Round(time.Millisecond).String())
	}
}

// processCleanup runs the executor's cleanup of an acknowledged attempt, retried with backoff.
func (s *Session) processCleanup(ctx context.Context, k executor.AttemptKey) {
	s.mu.Lock()
	att, q := s.attempts[k], s.queues
	ph := phaseRunning
	if att != nil {
		ph = phaseOf(att.status, att)
	}
	s.mu.Unlock()
	if ph != phaseCleanup {
		q.cleanupRetry.Forget(k)
		return
	}
	if err := s.cleanup(ctx, att, k); err != nil {
		wait := q.cleanupRetry.next(k, 0)
		q.cleanups.AddAfter(k, wait)
		s.log.Warn("attempt not cleaned up; will retry", "deployment_id", k.DeploymentID, "attempt", k.Attempt, "err", err, "wait", wait.Round(time.Millisecond).String())
		return
	}
	q.cleanupRetry.Forget(k)
}

// send delivers the attempt's timeline events, then its started event, then its finished event,
// and reports whether the attempt is ready for its cleanup.
func (s *Session) send(ctx context.Context, att *attemptState, st executor.AttemptStatus, log *slog.Logger) (clean bool, err error) {
	s.mu.Lock()
	startedSent, acked, fencing, progress := att.startedSent, att.acked, att.fencing, att.progress
	s.mu.Unlock()
	if err = s.sendProgress(ctx, att, st, progress, log); err != nil {
		if st.Terminal() && !acked {
			s.keepPending(ctx, st, fencing, log)
		}
		return false, err
	}
	// An acknowledged attempt (or one the orchestrator told to forget) gets no more events, only
	// its cleanup.
	if st.Started && !startedSent && !acked {
		ev := api.EventRequest{Fencing: fencing, Event: api.Event{Attempt: st.Attempt, Seq: SeqStarted, Type: api.EventStarted, Step: api.StepCLIStarted, Time: st.StartedAt.UTC()}}
		if st.Fencing != 0 {
			ev.Fencing = st.Fencing
		}
		if ev.Time.IsZero() {
			ev.Time = time.Now().UTC()
		}
		_, err = s.postEvent(ctx, st.DeploymentID, ev)
		switch {
		case err == nil:
			s.mu.Lock()
			att.startedSent = true
			s.mu.Unlock()
			if !st.StartedAt.IsZero() && !st.ClaimedAt.IsZero() {
				s.o.Metrics.StartLatency.Observe(st.StartedAt.Sub(st.ClaimedAt).Seconds())
			}
		case !retry.Eventually(err) && st.Terminal():
			// The finished event says more than a refused started event; send it anyway (what
			// follows sets err again).
			log.Info("started event refused; sending the finished event", "err", err)
		default:
			if st.Terminal() && !acked && retry.Eventually(err) {
				s.keepPending(ctx, st, fencing, log)
			}
			return
		}
	}
	if st.Terminal() && !acked {
		ev := st.PendingEvent
		if ev == nil {
			ev = encodeEvent(finishedEvent(st, fencing))
		}
		if err = s.deliver(ctx, st.DeploymentID, ev); err != nil {
			if retry.Eventually(err) {
				s.keepPending(ctx, st, fencing, log)
			}
			return
		}
		s.mu.Lock()
		att.acked = true
		s.mu.Unlock()
		s.observeFinished(st, ev, log)
		s.attemptEnded()
	}
	return st.Terminal() || acked, nil
}

// cleanup removes an acknowledged attempt from the executor and forgets its state token.
func (s *Session) cleanup(ctx context.Context, att *attemptState, k executor.AttemptKey) error {
	if err := s.o.Executor.Cleanup(ctx, k.DeploymentID, k.Attempt); err != nil {
		return err
	}
	s.o.Tokens.Delete(k.DeploymentID, k.Attempt)
	s.mu.Lock()
	att.cleaned = true
	s.mu.Unlock()
	return nil
}

// keepPending saves the finished event of a terminal attempt with the attempt (the outbox: the
// pending event) when the orchestrator cannot take it now, so an agent restart re-sends exactly
// this event.
func (s *Session) keepPending(ctx context.Context, st executor.AttemptStatus, fencing int64, log *slog.Logger) {
	if st.PendingEvent != nil {
		return
	}
	if err := s.o.Executor.SavePendingEvent(ctx, st.DeploymentID, st.Attempt, encodeEvent(finishedEvent(st, fencing))); err != nil {
		log.Error("cannot keep the undelivered finished event with the attempt", "err", err)
	}
}

// deliver sends a saved finished event byte for byte.
func (s *Session) deliver(ctx context.Context, deploymentID string, event []byte) error {
	var ev api.EventRequest
	if err := json.Unmarshal(event, &ev); err != nil {
		return &api.Error{StatusCode: 400, Code: api.CodeInvalid, Message: "undecodable saved event: " + err.Error()}
	}
	_, err := s.postEvent(ctx, deploymentID, ev)
	return err
}

func (s *Session) observeFinished(st executor.AttemptStatus, event []byte, log *slog.Logger) {
	var ev api.EventRequest
	_ = json.Unmarshal(event, &ev)
	s.o.Metrics.Events.WithLabelValues("acknowledged").Inc()
	if !st.StartedAt.IsZero() && !st.FinishedAt.IsZero() {
		s.o.Metrics.JobDuration.WithLabelValues(string(ev.Result)).Observe(st.FinishedAt.Sub(st.StartedAt).Seconds())
	}
	if ev.Result == api.StatusFailed {
		s.o.Metrics.JobFailures.WithLabelValues(string(ev.Reason)).Inc()
	}
	log.Info("finished event acknowledged", "result", ev.Result, "exit_code", ev.ExitCode, "reason", ev.Reason)
}

// finishedEvent is the deterministic finished event of a terminal status: the same status always
// gives the same event, so a re-send after a restart is a duplicate the orchestrator drops.
func finishedEvent(st executor.AttemptStatus, fencing int64) api.EventRequest {
	if st.Fencing != 0 {
		fencing = st.Fencing
	}
	result := st.Status
	if result != api.StatusSucceeded && result != api.StatusCanceled {
		result = api.StatusFailed
	}
	t := st.FinishedAt.UTC()
	if t.IsZero() {
		t = time.Now().UTC()
	}
	return api.EventRequest{Fencing: fencing, Event: api.Event{Attempt: st.Attempt, Seq: SeqFinished, Type: api.EventFinished, Step: api.StepFinished,
		Result: result, ExitCode: st.ExitCode, Reason: st.Reason, Message: st.Message, Detail: st.Detail, Time: t.Truncate(time.Second)}}
}

func encodeEvent(ev api.EventRequest) []byte {
	b, _ := json.Marshal(ev)
	return b
}

// forget handles the directive that the orchestrator no longer assigns an attempt to this agent:
// deliver its pending event if there is one (the orchestrator may be waiting for exactly that),
// then clean the attempt up.
func (s *Session) forget(ctx context.Context, d api.Directive, log *slog.Logger) {
	statuses, err := s.o.Executor.List(ctx)
	if err != nil {
		log.Error("forget: list attempts", "err", err)
		return
	}
	for _, st := range statuses {
		if st.DeploymentID != d.DeploymentID || st.Attempt != d.Attempt {
			continue
		}
		if st.PendingEvent != nil {
			if err := s.deliver(ctx, st.DeploymentID, st.PendingEvent); err != nil && retry.Eventually(err) {
				log.Warn("forget: pending event not delivered; keeping the attempt for the next try", "err", err)
				return
			}
		}
	}
	// Marked done, so the event workers send nothing more for it and clean it up (and retry a
	// cleanup that fails). The poll loop, which calls this, does not wait for the cleanup: its
	// requests give way to starts at the client's rate limit.
	s.mu.Lock()
	att := s.state(executor.AttemptKey{DeploymentID: d.DeploymentID, Attempt: d.Attempt})
	att.acked, att.pendingEvent = true, nil
	s.mu.Unlock()
	s.o.Tokens.Delete(d.DeploymentID, d.Attempt)
	s.kick.Notify()
	log.Info("forgot attempt")
}
