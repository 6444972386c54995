package session

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// maxConcurrentSends bounds the goroutines sending events, so a backlog (orchestrator back after an
// outage) drains in parallel without opening hundreds of connections.
const maxConcurrentSends = 16

// eventLoop sends started and finished events whenever the executor signals a change, and at
// least every two seconds (retries, and changes a watch may have coalesced).
func (s *Session) eventLoop(ctx context.Context) error {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	sem := make(chan struct{}, maxConcurrentSends)
	for {
		if err := s.eventPass(ctx, sem); err != nil && ctx.Err() == nil {
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

// eventPass compares what the executor holds with what the orchestrator was told, and starts a
// send for every attempt that needs one.
func (s *Session) eventPass(ctx context.Context, sem chan struct{}) error {
	statuses, err := s.o.Executor.List(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	present := map[executor.AttemptKey]bool{}
	pending := 0
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range statuses {
		k := st.Key()
		present[k] = true
		att := s.state(k)
		att.seen = true
		if att.fencing == 0 {
			att.fencing = st.Fencing
		}
		if st.Terminal() && !att.acked {
			pending++
		}
		if att.busy || now.Before(att.nextTry) || att.refused {
			continue
		}
		needStarted := st.Started && !att.startedSent
		needFinished := st.Terminal() && !att.acked
		needCleanup := att.acked && !att.cleaned
		if needStarted || needFinished || needCleanup {
			s.launch(ctx, sem, att, st)
		}
	}
	for k, att := range s.attempts {
		switch {
		case present[k]:
		case att.pendingEvent != nil && !att.acked:
			// The executor never held it (start failed): its finished event lives only here.
			pending++
			if !att.busy && !now.Before(att.nextTry) {
				s.launch(ctx, sem, att, executor.AttemptStatus{DeploymentID: k.DeploymentID, Attempt: k.Attempt, Fencing: att.fencing, PendingEvent: att.pendingEvent, Status: api.StatusFailed})
			}
		case att.seen && !att.acked && !att.refused && !att.busy:
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

// launch sends what an attempt needs in a goroutine of its own. Called with s.mu held.
func (s *Session) launch(ctx context.Context, sem chan struct{}, att *attemptState, st executor.AttemptStatus) {
	att.busy = true
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			s.mu.Lock()
			att.busy = false
			s.mu.Unlock()
			return
		}
		// A send that has begun is finished even when the session stops: losing leadership or
		// SIGTERM must not leave an acknowledged-but-not-cleaned or half-sent attempt behind.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.FinalTimeout)
		defer cancel()
		log := s.log.With("deployment_id", st.DeploymentID, "attempt", st.Attempt)
		clean, err := s.send(sctx, att, st, log)
		// The cleanup does not hold a sending slot: its requests give way to starts at the
		// Kubernetes client's rate limit, and the finished events of other attempts (which free
		// the runner's slots) must not wait for that.
		<-sem
		if err == nil && clean {
			err = s.cleanup(sctx, att, st)
		}
		s.settle(att, err, log)
	}()
}

// settle records the outcome of a launch: the attempt is free for the next pass, and a failure
// is retried with backoff unless the orchestrator refused for good.
func (s *Session) settle(att *attemptState, err error, log *slog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	att.busy = false
	switch {
	case err == nil:
		att.back.Reset()
		att.nextTry = time.Time{}
	case !retry.Eventually(err):
		att.refused = true
		s.o.Metrics.Events.WithLabelValues("refused").Inc()
		log.Warn("the orchestrator refused the attempt's event; waiting for its directive", "err", err)
	default:
		wait := att.back.Next(api.RetryAfter(err))
		att.nextTry = time.Now().Add(wait)
		s.o.Metrics.Events.WithLabelValues("retry").Inc()
		log.Warn("event not delivered; will retry", "err", err, "wait", wait.Round(time.Millisecond).String())
	}
}

// send delivers the started event, then the finished event of one attempt, and reports whether
// the attempt is ready for its cleanup.
func (s *Session) send(ctx context.Context, att *attemptState, st executor.AttemptStatus, log *slog.Logger) (clean bool, err error) {
	s.mu.Lock()
	startedSent, acked, fencing := att.startedSent, att.acked, att.fencing
	s.mu.Unlock()
	// An acknowledged attempt (or one the orchestrator told to forget) gets no more events, only
	// its cleanup.
	if st.Started && !startedSent && !acked {
		ev := api.EventRequest{Fencing: fencing, Event: api.Event{Attempt: st.Attempt, Seq: SeqStarted, Type: api.EventStarted, Time: st.StartedAt.UTC()}}
		if st.Fencing != 0 {
			ev.Fencing = st.Fencing
		}
		if ev.Time.IsZero() {
			ev.Time = time.Now().UTC()
		}
		_, err = s.o.Client.Event(ctx, st.DeploymentID, ev)
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
func (s *Session) cleanup(ctx context.Context, att *attemptState, st executor.AttemptStatus) error {
	if err := s.o.Executor.Cleanup(ctx, st.DeploymentID, st.Attempt); err != nil {
		return err
	}
	s.o.Tokens.Delete(st.DeploymentID, st.Attempt)
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
	_, err := s.o.Client.Event(ctx, deploymentID, ev)
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
		s.o.Metrics.JobFailures.WithLabelValues(ev.Reason).Inc()
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
	return api.EventRequest{Fencing: fencing, Event: api.Event{Attempt: st.Attempt, Seq: SeqFinished, Type: api.EventFinished,
		Result: result, ExitCode: st.ExitCode, Reason: st.Reason, Message: st.Message, Time: t.Truncate(time.Second)}}
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
	// Marked done, so the event loop sends nothing more for it and cleans it up (and retries a
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
