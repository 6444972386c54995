package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// minPollGap (Options.PollGap) keeps a server that answers at once with nothing new (directives
// it keeps repeating) from turning the loop into a busy loop. An answer that brought offers is
// followed by the next poll as soon as their claims are answered (see awaitClaims), and one with
// new directives at once, never after a fixed gap: a gap would delay every offer queued right
// after.
const minPollGap = 250 * time.Millisecond

// pollLoop long-polls until ctx ends. Every error is retried (the agent never stops polling: a
// key registered or rotated later lets it in), backing off on top of the client's own retries,
// with full jitter and never sooner than Retry-After.
func (s *Session) pollLoop(ctx context.Context) error {
	back := s.o.PollBackoff
	var claims sync.WaitGroup
	defer claims.Wait()
	for ctx.Err() == nil {
		began := time.Now()
		if _, err := s.adoptUnregistered(ctx); err != nil {
			s.log.Warn("list attempts to adopt", "err", err)
		}
		req, err := s.pollRequest(ctx)
		if err != nil {
			s.log.Error("list attempts for the poll", "err", err)
			if retry.Sleep(ctx, back.Next(0)) != nil {
				break
			}
			continue
		}
		pctx, cut := context.WithCancel(ctx)
		s.mu.Lock()
		s.cutPoll, s.pollFree = cut, req.CapacityFree
		s.mu.Unlock()
		resp, err := s.o.Client.Poll(pctx, req)
		s.mu.Lock()
		wasCut := s.cutPoll == nil // attemptEnded took it
		s.cutPoll = nil
		s.mu.Unlock()
		cut()
		s.o.Metrics.PollDuration.Observe(time.Since(began).Seconds())
		if err == nil {
			err = s.checkProtocol(resp)
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if wasCut {
				continue // restate the free slot now (a poll cut short is no failure)
			}
			if errors.Is(err, api.ErrUnknownKey) {
				err = s.keyRefusedError(err)
			}
			if s.o.Connection != nil {
				s.o.Connection.PollFailed(err)
			}
			s.o.Metrics.PollFailures.WithLabelValues(pollFailure(err)).Inc()
			wait := back.Next(api.RetryAfter(err))
			if errors.Is(err, api.ErrUnknownKey) {
				s.keyRefused(err, wait)
			} else if errors.Is(err, api.ErrIncompatibleProtocol) {
				// Nothing heals this but an upgrade of one side; keep polling (slowly) so the agent
				// starts working as soon as one is done.
				s.log.Error("the orchestrator and this agent speak no agent protocol version in common; upgrade one of them", "err", err,
					"agent_version", s.o.Version, "agent_protocol", s.o.Protocols.String(), "wait", wait.Round(time.Millisecond).String())
			} else {
				s.log.Warn("poll failed; backing off", "err", err, "wait", wait.Round(time.Millisecond).String(), "failures", back.Failures())
			}
			if retry.Sleep(ctx, wait) != nil {
				break
			}
			continue
		}
		if back.Failures() > 0 {
			s.orchestratorBack()
		}
		back.Reset()
		s.keyAccepted()
		s.o.Health.PollOK()
		if s.o.Connection != nil {
			s.o.Connection.PollOK(resp.OrchestratorVersion)
		}
		s.logClockOffset()
		s.mu.Lock()
		s.orchMax, s.orchKnown = max(resp.MaxConcurrency, 0), true
		if s.protocol == 0 {
			s.kick.Notify() // events held for the protocol (holdForProtocol) may go now
		}
		s.protocol = max(resp.Protocol, api.LegacyProtocol)
		limit, changed := s.limitLocked()
		s.mu.Unlock()
		if changed && s.o.LimitChanged != nil {
			s.o.LimitChanged(limit)
		}
		s.directives(ctx, resp.Directives)
		if len(resp.StateOperations) > 0 && s.o.StateOperations != nil {
			s.o.StateOperations.Offered(ctx, resp.StateOperations)
		}
		fresh := s.freshDirectives(resp.Directives)
		// Claims in the answer (agent protocol 7 on) start at once; offers (an orchestrator of 6
		// or older) need their claim request first.
		taken, repeated := s.claimed(ctx, &claims, resp.Claims, req.CapacityFree)
		took, again := s.offers(ctx, &claims, resp.Offers, req.CapacityFree-len(resp.Claims))
		taken, repeated = taken+took, repeated || again
		if (taken > 0 || repeated) && s.awaitClaims(ctx, taken > 0, s.o.PollGap) {
			continue
		}
		if gap := time.Since(began); taken == 0 && !fresh && gap < s.o.PollGap {
			if retry.Sleep(ctx, s.o.PollGap-gap) != nil {
				break
			}
		}
	}
	return ctx.Err()
}

// freshDirectives tells whether an answer brought directives and none of them was in the answer
// before. The agent acts on a directive at once (forget drops the attempt from the next poll,
// cancel stops its Job), so the next poll may go at once; a directive repeated, as cancel is
// until the Job has stopped, is what the gap paces. Called by the poll loop only.
func (s *Session) freshDirectives(ds []api.Directive) bool {
	seen := s.lastDirectives
	s.lastDirectives = make(map[api.Directive]bool, len(ds))
	fresh := len(ds) > 0
	for _, d := range ds {
		s.lastDirectives[d] = true
		if seen[d] {
			fresh = false
		}
	}
	return fresh
}

// attemptEnded is called when the orchestrator acknowledged an attempt's finished event, which
// freed its slot. A long poll in flight that stated no free capacity is cut short, so the next
// poll states the free slot: the orchestrator offers no more than a poll states, and the
// deployments queued behind the attempt would otherwise wait out the poll (up to 30 s) however
// soon the slot freed. A poll that stated a free slot is left alone: the orchestrator answers it
// as soon as it has something to offer (and itself wakes it when the runner's own limit frees),
// and cutting it would cost a new connection for nothing.
func (s *Session) attemptEnded() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cutPoll != nil && s.pollFree == 0 {
		s.cutPoll()
		s.cutPoll = nil
	}
}

// KeysChanged is called when the runner keys the agent holds changed (a rotation reached it).
// The long poll in flight stated the old keys, so it is cut short: the next one states the new
// keys, and an orchestrator that has the new key answers it at once for the agent to move over
// (or, when it does not have it yet, answers at once when it gets it), instead of up to 30 s
// later.
func (s *Session) KeysChanged() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cutPoll != nil {
		s.cutPoll()
		s.cutPoll = nil
	}
}

// errProtocolAnswer is an answer from an orchestrator that chose a protocol version this agent
// does not speak.
type errProtocolAnswer struct{ msg string }

func (e errProtocolAnswer) Error() string { return e.msg }

// Is makes the error an api.ErrIncompatibleProtocol, like the orchestrator's refusal.
func (e errProtocolAnswer) Is(target error) bool { return target == api.ErrIncompatibleProtocol }

// checkProtocol refuses an answer in a protocol version this agent does not speak: offers and
// directives of an unknown protocol are not acted on. An orchestrator from before negotiation
// chooses none and speaks api.LegacyProtocol.
func (s *Session) checkProtocol(resp *api.PollResponse) error {
	chosen := resp.Protocol
	if chosen == 0 {
		chosen = api.LegacyProtocol
	}
	if chosen >= s.o.Protocols.Min && chosen <= s.o.Protocols.Max {
		return nil
	}
	return errProtocolAnswer{fmt.Sprintf("the orchestrator answered in agent protocol %d: %s", chosen,
		api.IncompatibleProtocolMessage(s.o.Version, s.o.Protocols, resp.OrchestratorVersion, resp.OrchestratorProtocol.Stated()))}
}

// orchestratorBack runs when a poll succeeds after failures: events waiting out a long backoff
// are retried now instead of up to a minute later.
func (s *Session) orchestratorBack() {
	s.mu.Lock()
	q := s.queues
	s.mu.Unlock()
	if q != nil {
		for _, k := range q.sendRetry.waiting() {
			q.sendRetry.Forget(k)
			q.sends.Add(k)
		}
	}
	s.kick.Notify()
	s.log.Info("orchestrator reachable again; retrying pending events now")
}

// pollRequest restates the whole picture: every attempt held (so their job leases renew) and the
// free capacity. Until the orchestrator has told its limit the agent asks for nothing and waits
// not, which makes the first poll after a restart a pure restatement of the adopted attempts.
func (s *Session) pollRequest(ctx context.Context) (api.PollRequest, error) {
	statuses, err := s.o.Executor.List(ctx)
	if err != nil {
		return api.PollRequest{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	req := api.PollRequest{AgentVersion: s.o.Version, Protocol: s.o.Protocols, Instance: s.o.Instance, Held: []api.HeldAttempt{}, WaitSeconds: int(s.o.PollWait.Seconds())}
	// An attempt being started counts once: the executor may list it already while its claim
	// goroutine has not yet left s.starting.
	busy := 0
	for k := range s.starting {
		if !slices.ContainsFunc(statuses, func(st executor.AttemptStatus) bool { return st.Key() == k }) {
			busy++
		}
	}
	for _, st := range statuses {
		att := s.attempts[st.Key()]
		if att != nil && att.acked {
			continue
		}
		if !st.Terminal() {
			busy++
		}
		h := api.HeldAttempt{DeploymentID: st.DeploymentID, Attempt: st.Attempt, Fencing: st.Fencing, Started: st.Started}
		if err := validHeld(h); err != nil {
			// One attempt the orchestrator would refuse must not make it refuse every poll.
			s.skipOnce(st.Key(), "an attempt the executor lists cannot be restated to the orchestrator; it is left out of the poll", err)
			continue
		}
		req.Held = append(req.Held, h)
	}
	limit := s.effectiveLimit()
	if !s.orchKnown {
		req.WaitSeconds = 0
	}
	req.CapacityFree = max(limit-busy, 0)
	s.o.Metrics.JobsRunning.Set(float64(busy))
	s.o.Metrics.CapacityFree.Set(float64(req.CapacityFree))
	return req, nil
}

// effectiveLimit is how many attempts the agent may hold: the runner's max_concurrency, capped
// by the agent's own. Called with s.mu held.
func (s *Session) effectiveLimit() int {
	if s.o.MaxConcurrency > 0 && s.o.MaxConcurrency < s.orchMax {
		return s.o.MaxConcurrency
	}
	return s.orchMax
}

// limitLocked returns the effective limit and whether it changed since it was last reported.
// Called with s.mu held.
func (s *Session) limitLocked() (int, bool) {
	limit := s.effectiveLimit()
	changed := limit != s.limit
	s.limit = limit
	return limit, changed
}

// validHeld checks a held attempt the way the orchestrator checks a poll.
func validHeld(h api.HeldAttempt) error {
	if err := api.ValidateID("deployment_id", h.DeploymentID); err != nil {
		return err
	}
	if h.Attempt < 1 || h.Fencing < 1 {
		return fmt.Errorf("attempt %d with fencing number %d: both count from 1", h.Attempt, h.Fencing)
	}
	return nil
}

// skipOnce logs, once per attempt, why it is left out. Called with s.mu held.
func (s *Session) skipOnce(k executor.AttemptKey, msg string, err error) {
	if s.skipped[k] {
		return
	}
	s.skipped[k] = true
	s.log.Warn(msg, "deployment_id", k.DeploymentID, "attempt", k.Attempt, "err", err)
}

// directives acts on cancel and forget. Both are idempotent, so a directive repeated by the
// next poll (before its effect is visible) does no harm.
func (s *Session) directives(ctx context.Context, ds []api.Directive) {
	for _, d := range ds {
		log := s.log.With("deployment_id", d.DeploymentID, "attempt", d.Attempt, "directive", d.Type, "reason", d.Reason)
		switch d.Type {
		case api.DirectiveCancel:
			log.Info("canceling attempt")
			if err := s.o.Executor.Cancel(ctx, d.DeploymentID, d.Attempt, s.o.CancelGrace); err != nil {
				log.Error("cancel failed; will retry on the next poll", "err", err)
			}
		case api.DirectiveForget:
			s.forget(ctx, d, log)
		default:
			log.Warn("unknown directive ignored")
		}
	}
}

// logClockOffset says once per change that this machine's clock differs from the orchestrator's,
// which the client corrects for when it signs (agentauth.Signer.ObserveServerDate): a warning
// from agentauth.NotableClockOffset on, below that for information only.
func (s *Session) logClockOffset() {
	c, ok := s.o.Client.(interface{ ClockOffset() time.Duration })
	if !ok {
		return
	}
	d := c.ClockOffset()
	if d == s.clockOffset {
		return
	}
	s.clockOffset = d
	switch {
	case d == 0:
		s.log.Info("this machine's clock agrees with the orchestrator's again; signing requests with this machine's time")
	case d.Abs() >= agentauth.NotableClockOffset:
		s.log.Warn("this machine's clock differs from the orchestrator's; signing requests with the orchestrator's time (check NTP on the node)",
			"orchestrator_ahead_by", d.String())
	default:
		s.log.Info("this machine's clock differs slightly from the orchestrator's; signing requests with the orchestrator's time",
			"orchestrator_ahead_by", d.String())
	}
}
