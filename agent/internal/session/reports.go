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

// maxConcurrentSends bounds report goroutines, so a backlog (orchestrator back after an outage)
// drains in parallel without opening hundreds of connections.
const maxConcurrentSends = 16

// reportLoop sends started events and final reports whenever the executor signals a change, and
// at least every two seconds (retries, and changes a watch may have coalesced).
func (s *Session) reportLoop(ctx context.Context) error {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	sem := make(chan struct{}, maxConcurrentSends)
	for {
		if err := s.reportPass(ctx, sem); err != nil && ctx.Err() == nil {
			s.log.Error("report pass failed", "err", err)
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

// reportPass compares what the executor holds with what the orchestrator was told, and starts a
// send for every job that needs one.
func (s *Session) reportPass(ctx context.Context, sem chan struct{}) error {
	statuses, err := s.o.Executor.List(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	present := map[executor.Key]bool{}
	pending := 0
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range statuses {
		k := st.Key()
		present[k] = true
		js := s.state(k)
		js.seen = true
		if js.fencing == 0 {
			js.fencing = st.Fencing
		}
		if st.Terminal() && !js.acked {
			pending++
		}
		if js.busy || now.Before(js.nextTry) || js.refused {
			continue
		}
		needStarted := st.Started && !js.startedSent
		needFinal := st.Terminal() && !js.acked
		needCleanup := js.acked && !js.cleaned
		if needStarted || needFinal || needCleanup {
			s.launch(ctx, sem, js, st)
		}
	}
	for k, js := range s.jobs {
		switch {
		case present[k]:
		case js.report != nil && !js.acked:
			// The executor never held it (start failed): the report lives only here.
			pending++
			if !js.busy && !now.Before(js.nextTry) {
				s.launch(ctx, sem, js, executor.Status{JobID: k.JobID, Attempt: k.Attempt, Fencing: js.fencing, PendingReport: js.report, Phase: executor.PhaseFailed})
			}
		case js.seen && !js.acked && !js.refused && !js.busy:
			// Held before, gone now without a report: someone deleted the Job.
			s.log.Warn("job disappeared without a final report; reporting it failed", "job_id", k.JobID, "attempt", k.Attempt, "fencing", js.fencing)
			js.report = encodeReport(api.EventRequest{Attempt: k.Attempt, Fencing: js.fencing, Seq: SeqFinished, Type: api.EventFinished,
				Result: api.StatusFailed, Reason: executor.ReasonDisappeared, Message: "the job's Kubernetes Job or process disappeared before it finished", Time: now.UTC()})
			pending++
		case js.acked || js.refused || !js.seen:
			if js.cleaned || js.refused {
				delete(s.jobs, k)
			}
		}
	}
	s.o.Metrics.PendingReports.Set(float64(pending))
	return nil
}

// launch sends what a job needs in a goroutine of its own. Called with s.mu held.
func (s *Session) launch(ctx context.Context, sem chan struct{}, js *jobState, st executor.Status) {
	js.busy = true
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			s.mu.Lock()
			js.busy = false
			s.mu.Unlock()
			return
		}
		defer func() { <-sem }()
		// A report that has begun is finished even when the session stops: losing leadership
		// or SIGTERM must not leave an acknowledged-but-not-cleaned or half-sent job behind.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.FinalTimeout)
		defer cancel()
		s.send(sctx, js, st)
	}()
}

// send delivers the started event, the final report and the cleanup of one job, in that order.
func (s *Session) send(ctx context.Context, js *jobState, st executor.Status) {
	log := s.log.With("job_id", st.JobID, "attempt", st.Attempt)
	s.mu.Lock()
	startedSent, acked, fencing := js.startedSent, js.acked, js.fencing
	s.mu.Unlock()
	var err error
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		js.busy = false
		switch {
		case err == nil:
			js.back.Reset()
			js.nextTry = time.Time{}
		case !retry.Eventually(err):
			js.refused = true
			s.o.Metrics.Reports.WithLabelValues("refused").Inc()
			log.Warn("the orchestrator refused the job's report; waiting for its directive", "err", err)
		default:
			wait := js.back.Next(api.RetryAfter(err))
			js.nextTry = time.Now().Add(wait)
			s.o.Metrics.Reports.WithLabelValues("retry").Inc()
			log.Warn("report not delivered; will retry", "err", err, "wait", wait.Round(time.Millisecond).String())
		}
	}()
	if st.Started && !startedSent {
		ev := api.EventRequest{Attempt: st.Attempt, Fencing: fencing, Seq: SeqStarted, Type: api.EventStarted, Time: st.StartedAt.UTC()}
		if st.Fencing != 0 {
			ev.Fencing = st.Fencing
		}
		if ev.Time.IsZero() {
			ev.Time = time.Now().UTC()
		}
		_, err = s.o.Client.Event(ctx, st.JobID, ev)
		switch {
		case err == nil:
			s.mu.Lock()
			js.startedSent = true
			s.mu.Unlock()
			if !st.StartedAt.IsZero() && !st.ClaimedAt.IsZero() {
				s.o.Metrics.StartLatency.Observe(st.StartedAt.Sub(st.ClaimedAt).Seconds())
			}
		case !retry.Eventually(err) && st.Terminal():
			// The final report says more than a refused started event; send it anyway.
			log.Info("started event refused; sending the final report", "err", err)
			err = nil
		default:
			if st.Terminal() && !acked && retry.Eventually(err) {
				s.keep(ctx, st, fencing, log)
			}
			return
		}
	}
	if st.Terminal() && !acked {
		report := st.PendingReport
		if report == nil {
			report = encodeReport(finalEvent(st, fencing))
		}
		if err = s.deliver(ctx, st.JobID, report); err != nil {
			if retry.Eventually(err) {
				s.keep(ctx, st, fencing, log)
			}
			return
		}
		s.mu.Lock()
		js.acked = true
		s.mu.Unlock()
		s.observeFinal(st, report, log)
	}
	if !st.Terminal() && !acked {
		return
	}
	if err = s.o.Executor.Cleanup(ctx, st.JobID, st.Attempt); err != nil {
		return
	}
	s.o.Tokens.Delete(st.JobID, st.Attempt)
	s.mu.Lock()
	js.cleaned = true
	s.mu.Unlock()
}

// keep saves the final report of a terminal job with the job (the outbox) when the orchestrator
// cannot take it now, so an agent restart re-sends exactly this report.
func (s *Session) keep(ctx context.Context, st executor.Status, fencing int64, log *slog.Logger) {
	if st.PendingReport != nil {
		return
	}
	if err := s.o.Executor.SavePendingReport(ctx, st.JobID, st.Attempt, encodeReport(finalEvent(st, fencing))); err != nil {
		log.Error("cannot keep the undelivered final report with the job", "err", err)
	}
}

// deliver sends a saved final report byte for byte.
func (s *Session) deliver(ctx context.Context, jobID string, report []byte) error {
	var ev api.EventRequest
	if err := json.Unmarshal(report, &ev); err != nil {
		return &api.Error{StatusCode: 400, Code: api.CodeInvalid, Message: "undecodable saved report: " + err.Error()}
	}
	_, err := s.o.Client.Event(ctx, jobID, ev)
	return err
}

func (s *Session) observeFinal(st executor.Status, report []byte, log *slog.Logger) {
	var ev api.EventRequest
	_ = json.Unmarshal(report, &ev)
	s.o.Metrics.Reports.WithLabelValues("acknowledged").Inc()
	if !st.StartedAt.IsZero() && !st.FinishedAt.IsZero() {
		s.o.Metrics.JobDuration.WithLabelValues(ev.Result).Observe(st.FinishedAt.Sub(st.StartedAt).Seconds())
	}
	if ev.Result == api.StatusFailed {
		s.o.Metrics.JobFailures.WithLabelValues(ev.Reason).Inc()
	}
	log.Info("final report acknowledged", "result", ev.Result, "exit_code", ev.ExitCode, "reason", ev.Reason)
}

// finalEvent is the deterministic final report of a terminal status: the same status always
// gives the same event, so a re-send after a restart is a duplicate the orchestrator drops.
func finalEvent(st executor.Status, fencing int64) api.EventRequest {
	if st.Fencing != 0 {
		fencing = st.Fencing
	}
	result := api.StatusFailed
	switch st.Phase {
	case executor.PhaseSucceeded:
		result = api.StatusSucceeded
	case executor.PhaseCanceled:
		result = api.StatusCanceled
	}
	t := st.FinishedAt.UTC()
	if t.IsZero() {
		t = time.Now().UTC()
	}
	return api.EventRequest{Attempt: st.Attempt, Fencing: fencing, Seq: SeqFinished, Type: api.EventFinished,
		Result: result, ExitCode: st.ExitCode, Reason: st.Reason, Message: st.Message, Time: t.Truncate(time.Second)}
}

func encodeReport(ev api.EventRequest) []byte {
	b, _ := json.Marshal(ev)
	return b
}

// forget handles the directive that the orchestrator no longer assigns a job to this agent:
// deliver a pending report if there is one (the orchestrator may be waiting for exactly that),
// then remove the job.
func (s *Session) forget(ctx context.Context, d api.Directive, log *slog.Logger) {
	statuses, err := s.o.Executor.List(ctx)
	if err != nil {
		log.Error("forget: list jobs", "err", err)
		return
	}
	for _, st := range statuses {
		if st.JobID != d.JobID || st.Attempt != d.Attempt {
			continue
		}
		if st.PendingReport != nil {
			if err := s.deliver(ctx, st.JobID, st.PendingReport); err != nil && retry.Eventually(err) {
				log.Warn("forget: pending report not delivered; keeping the job for the next try", "err", err)
				return
			}
		}
	}
	// Marked done before the Job goes, so the report loop neither reports the vanished Job as
	// "disappeared" nor sends anything more; a failed cleanup is retried by that loop.
	s.mu.Lock()
	js := s.state(executor.Key{JobID: d.JobID, Attempt: d.Attempt})
	js.acked, js.report = true, nil
	s.mu.Unlock()
	s.o.Tokens.Delete(d.JobID, d.Attempt)
	if err := s.o.Executor.Cleanup(ctx, d.JobID, d.Attempt); err != nil {
		log.Error("forget: cleanup failed; will retry", "err", err)
		return
	}
	s.mu.Lock()
	js.cleaned = true
	s.mu.Unlock()
	log.Info("forgot job")
}
