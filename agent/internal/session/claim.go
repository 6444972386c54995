package session

// Claims: taking up the offers of a poll answer, claiming each and starting it, and telling the
// poll loop when the claims in flight are answered.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
)

// awaitClaims is called after an answer that brought offers (took: it claimed some; otherwise
// it only repeated offers being claimed). It waits, at most bound, until no claim request is in
// flight, and reports whether the next poll may go at once. The orchestrator sees an offer as
// queued until its claim is answered, so a poll sent before then comes straight back with the
// same offer (and its commits queue behind the claim's); waiting for the answer instead of a
// fixed gap means an offer queued meanwhile waits one claim's round trip at most. The answer is
// no, and the caller keeps the gap, when there was nothing to wait for (an offer repeated while
// its Job is still being created) or a claim failed other than by a conflict (the attempt is
// offered again at once): the gap paces those.
func (s *Session) awaitClaims(ctx context.Context, took bool, bound time.Duration) bool {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for waited := false; ; waited = true {
		s.mu.Lock()
		claiming, failed := s.claiming, s.claimFailed
		if claiming == 0 {
			s.claimFailed = false
		}
		s.mu.Unlock()
		if claiming == 0 {
			return (took || waited) && !failed
		}
		select {
		case <-s.claimAnswered:
		case <-timer.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// offers claims and starts offered attempts, concurrently, never more than the capacity stated.
// It returns how many it took up, and whether any offer was one already being started (the
// orchestrator answered before that claim of it was).
func (s *Session) offers(ctx context.Context, wg *sync.WaitGroup, offers []api.Offer, capacity int) (taken int, repeated bool) {
	for i, o := range offers {
		if i >= capacity {
			break
		}
		if !s.startOnce(wg, executor.AttemptKey{DeploymentID: o.DeploymentID, Attempt: o.Attempt}, true, func() { s.claimAndStart(ctx, o) }) {
			repeated = true
			continue
		}
		taken++
	}
	return taken, repeated
}

// startOnce runs start on a goroutine of wg unless this session is starting the attempt or holds
// it already, and reports whether it did; claiming counts a claim request in flight (see
// awaitClaims). An attempt this session claimed is never started again, whatever the offer
// says. The orchestrator re-offers an attempt its holder does not restate (a claim or poll
// answer that was lost, an agent restarted), and the executor stops listing a Job once it failed
// to start, before the finished event is acknowledged: in that gap a re-offer was claimed (claims
// are idempotent for the holder) and the failed attempt started a second time.
func (s *Session) startOnce(wg *sync.WaitGroup, k executor.AttemptKey, claiming bool, start func()) bool {
	s.mu.Lock()
	if s.starting[k] || s.attempts[k] != nil {
		s.mu.Unlock()
		return false
	}
	s.starting[k] = true
	if claiming {
		s.claiming++
	}
	s.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.starting, k)
			s.mu.Unlock()
		}()
		start()
	}()
	return true
}

// claimDone records that a claim request was answered.
func (s *Session) claimDone(err error) {
	s.mu.Lock()
	s.claiming--
	if err != nil && !errors.Is(err, api.ErrConflict) && !errors.Is(err, api.ErrNotFound) {
		s.claimFailed = true
	}
	s.mu.Unlock()
	select {
	case s.claimAnswered <- struct{}{}:
	default:
	}
}

func (s *Session) claimAndStart(ctx context.Context, o api.Offer) {
	log := s.log.With("deployment_id", o.DeploymentID, "attempt", o.Attempt, "operation", o.Operation)
	claimedFrom := time.Now()
	c, err := s.o.Client.Claim(ctx, o.DeploymentID, api.ClaimRequest{Attempt: o.Attempt, Instance: s.o.Instance})
	s.claimDone(err)
	switch {
	case errors.Is(err, api.ErrConflict) || errors.Is(err, api.ErrNotFound):
		s.o.Metrics.Claims.WithLabelValues("conflict").Inc()
		log.Info("offer taken elsewhere or withdrawn", "err", err)
		return
	case err != nil:
		s.o.Metrics.Claims.WithLabelValues("error").Inc()
		log.Warn("claim failed; the attempt stays queued for the next poll", "err", err)
		return
	}
	s.startClaimed(ctx, c, claimedFrom, log)
}

// claimed starts the attempts a poll answer claimed for this agent (agent protocol
// api.ProtocolClaimInPoll on), concurrently, as offers does after its claim requests: never one
// this session is starting or holds already, never more than the capacity stated. The grants
// beyond it (the orchestrator never sends them) are left to heal as lost answers do. It returns
// how many it started, and whether any was one already being started.
func (s *Session) claimed(ctx context.Context, wg *sync.WaitGroup, claims []api.Claim, capacity int) (taken int, repeated bool) {
	arrived := time.Now()
	for i := range claims {
		if i >= capacity {
			break
		}
		c := &claims[i]
		start := func() {
			log := s.log.With("deployment_id", c.DeploymentID, "attempt", c.Attempt, "operation", c.Placement.Operation)
			s.startClaimed(ctx, c, arrived, log)
		}
		if !s.startOnce(wg, executor.AttemptKey{DeploymentID: c.DeploymentID, Attempt: c.Attempt}, false, start) {
			repeated = true
			continue
		}
		taken++
	}
	return taken, repeated
}

// startClaimed starts an attempt whose claim was granted, from a claim request or a poll answer
// (claimedFrom: when the claim was sent, or the answer arrived); one that cannot start is failed
// with its finished event.
func (s *Session) startClaimed(ctx context.Context, c *api.Claim, claimedFrom time.Time, log *slog.Logger) {
	var err error
	s.o.Metrics.Claims.WithLabelValues("claimed").Inc()
	stateToken := s.o.Tokens.Put(c.DeploymentID, c.Attempt, grantOf(c))
	s.mu.Lock()
	s.state(executor.AttemptKey{DeploymentID: c.DeploymentID, Attempt: c.Attempt}).fencing = c.Lease.Fencing
	s.mu.Unlock()
	// Starting the attempt must not be abandoned half-way because the session stops: the claim is
	// ours, and a created Job is found again by the next leader.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.FinalTimeout+30*time.Second)
	defer cancel()
	sctx, span := s.claimSpan(sctx, c, claimedFrom)
	defer func() { tracing.End(span, err) }()
	if err = s.start(sctx, c, stateToken, log); err == nil {
		log.Info("attempt started")
		return
	}
	reason := executor.ReasonStartFailed
	result := "start_failed"
	switch {
	case errors.Is(err, executor.ErrPolicy):
		reason, result = executor.ReasonPodPolicy, "refused"
	case errors.Is(err, errNoStateBackend):
		reason, result = executor.ReasonNoStateBackend, "refused"
	case errors.Is(err, executor.ErrInvalidJob):
		reason, result = executor.ReasonInvalidTemplate, "invalid"
	}
	var refusal interface{ RefusalReason() api.Reason }
	if errors.As(err, &refusal) {
		reason, result = refusal.RefusalReason(), "refused"
	}
	s.o.Metrics.Claims.WithLabelValues(result).Inc()
	log.Error("attempt cannot start; sending its finished event as failed", "err", err)
	ev := encodeEvent(api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: c.Attempt, Seq: SeqFinished, Type: api.EventFinished,
		Result: api.StatusFailed, Reason: reason, Message: fmt.Sprintf("the agent could not start the attempt: %v", err), Time: time.Now().UTC()}})
	s.mu.Lock()
	s.state(executor.AttemptKey{DeploymentID: c.DeploymentID, Attempt: c.Attempt}).pendingEvent = ev
	s.mu.Unlock()
	// Best effort: a Job may exist after all (a create that timed out); it must not run on.
	_ = s.o.Executor.Cleanup(sctx, c.DeploymentID, c.Attempt)
}

// errNoStateBackend refuses an attempt whose state storage is kubernetes on an agent that serves
// no state backend (Options.NoStateBackend).
var errNoStateBackend = errors.New("this agent serves no state backend for kubernetes state storage")

// start starts a claimed attempt with the executor, retrying what a retry can fix. An attempt
// this agent cannot serve is refused before anything is created: without the state backend,
// the CLI's init would retry its http backend for five minutes and then fail.
func (s *Session) start(ctx context.Context, c *api.Claim, stateToken string, log *slog.Logger) error {
	if c.Placement.StateStorage.Type == api.StateStorageKubernetes && s.o.NoStateBackend != "" {
		return fmt.Errorf("%w: %s", errNoStateBackend, s.o.NoStateBackend)
	}
	if ref := c.Placement.ApplyPlan; ref != nil {
		// An apply of a saved plan whose state moved, or whose plan file is gone, is refused
		// before anything is created; the CLI would refuse it too, but only after a job pod ran.
		if s.o.Plans == nil {
			return fmt.Errorf("%w: an apply of a saved plan needs the state backend that keeps the plan file", errNoStateBackend)
		}
		if err := s.o.Plans.CheckPlan(ctx, c.Placement.KubernetesStateNamespace(), c.Placement.StateKey, *ref); err != nil {
			return fmt.Errorf("check the saved plan of deployment %s: %w", ref.DeploymentID, err)
		}
	}
	back := retry.Backoff{Base: time.Second, Max: 8 * time.Second}
	for try := 1; ; try++ {
		err := s.o.Executor.Start(ctx, c, stateToken)
		if err == nil || errors.Is(err, executor.ErrInvalidJob) || try >= 4 || ctx.Err() != nil {
			return err
		}
		log.Warn("start failed; retrying", "err", err, "try", try)
		if retry.Sleep(ctx, back.Next(0)) != nil {
			return err
		}
	}
}
