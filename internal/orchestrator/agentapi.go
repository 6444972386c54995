package orchestrator

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// Limits of agent request fields.
const (
	maxInstanceLen     = 253
	maxAgentVersionLen = 128
	maxHeldEntries     = 10000
	maxCapacityFree    = api.MaxMaxConcurrency
	maxEventMessageLen = 64 << 10
	maxEventReasonLen  = 256
	// maxNodeNameLen is the longest Kubernetes node name (a DNS subdomain).
	maxNodeNameLen = 253
	// maxKeyFingerprints bounds the keys a poll may say the agent holds (it holds three at most).
	maxKeyFingerprints = 8
)

// statusClientClosed is logged and counted when the agent went away during a long poll (the
// nginx convention); nobody receives it.
const statusClientClosed = 499

func validatePoll(req *api.PollRequest) error {
	switch {
	case req.CapacityFree < 0 || req.CapacityFree > maxCapacityFree:
		return store.Invalid("capacity_free", "%d is out of range; use 0 to %d", req.CapacityFree, maxCapacityFree)
	case req.WaitSeconds < 0:
		return store.Invalid("wait_seconds", "%d is negative; use 0 to %d (longer waits are cut to %d)", req.WaitSeconds, int(MaxPollWait.Seconds()), int(MaxPollWait.Seconds()))
	case len(req.Instance) > maxInstanceLen:
		return store.Invalid("instance", "is %d characters; at most %d", len(req.Instance), maxInstanceLen)
	case req.Protocol != (api.ProtocolRange{}) && !req.Protocol.Valid():
		return store.Invalid("protocol", "%+v names no version: min and max count from 1 and max is at least min", req.Protocol)
	case len(req.AgentVersion) > maxAgentVersionLen:
		return store.Invalid("agent_version", "is %d characters; at most %d", len(req.AgentVersion), maxAgentVersionLen)
	case len(req.Held) > maxHeldEntries:
		return store.Invalid("held", "lists %d attempts; at most %d", len(req.Held), maxHeldEntries)
	}
	if len(req.KeyFingerprints) > maxKeyFingerprints {
		return store.Invalid("key_fingerprints", "lists %d keys; at most %d", len(req.KeyFingerprints), maxKeyFingerprints)
	}
	for i, f := range req.KeyFingerprints {
		if len(f) > 128 {
			return store.Invalid(fmt.Sprintf("key_fingerprints[%d]", i), "is %d characters; a key fingerprint has at most 128", len(f))
		}
	}
	for i, e := range req.Held {
		at := fmt.Sprintf("held[%d]", i)
		if err := api.ValidateID(at+".deployment_id", e.DeploymentID); err != nil {
			return err
		}
		if e.Attempt < 1 {
			return store.Invalid(at+".attempt", "%d is not an attempt; attempts count from 1", e.Attempt)
		}
		if e.Fencing < 1 {
			return store.Invalid(at+".fencing", "%d is not a granted fencing number; they count from 1", e.Fencing)
		}
	}
	return nil
}

// poll is the agent's long poll. It renews the job leases of the attempts the agent restates (the
// only renewal there is), then answers at once when there are offers or directives, and otherwise
// waits for the runner's next wake (a deployment queued, a cancel, a job lease settled) until the
// wait is over. No busy loop: between wakes it only sleeps on a channel. Everything but the wait
// runs on fresh stacks (onFreshStack), so the goroutine that waits, one per idle agent, keeps a
// small one.
func (s *Server) poll(w http.ResponseWriter, r *http.Request, c *call) error {
	var (
		req      api.PollRequest
		protocol int
		forget   []api.Directive
		err      error
	)
	onFreshStack(func() { protocol, err = s.startPoll(r.Context(), c, &req) })
	if err != nil {
		return err
	}
	runnerKey := c.agent.Org + "/" + c.agent.RunnerID
	s.notify.Enter(runnerKey)
	s.metrics.polls.Inc()
	defer func() {
		s.notify.Leave(runnerKey)
		s.metrics.polls.Dec()
	}()
	onFreshStack(func() { forget, err = s.store.RenewLeases(r.Context(), c.agent, &req, s.cfg.LeaseDuration) })
	if err != nil {
		return err
	}
	wait := min(time.Duration(req.WaitSeconds)*time.Second, MaxPollWait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	last := wait <= 0
	var (
		a     store.PollAnswer
		ops   []api.StateOperationOffer
		taken int
		// fresh says a and ops are from a look no wake has outdated since. A poll whose wait
		// ends without a wake answers with them instead of looking again, unless the runner
		// holds leased attempts (time alone makes re-offers of them): everything else that
		// could change the answer wakes the runner (queue, cancel, lease settled, runner
		// updated), and a retiring key's end, which only time brings, is answered at once by
		// the next poll's first look. With state operations looked at in Offers' transaction,
		// an idle poll is four store transactions instead of seven: the runner's keys for the
		// signature, the token id's replay check, the renewal with the runner's last sighting,
		// and one look at its start (BenchmarkOrchestratorScaleReplicas).
		fresh bool
	)
	for {
		woken := s.notify.Watch(runnerKey)
		answered := false
		onFreshStack(func() {
			if !fresh {
				if a, err = s.store.Offers(r.Context(), c.agent, &req, protocol); err != nil {
					return
				}
				// State operations go only to agents whose protocol knows them (Offers looks
				// only then).
				ops, taken = nil, 0
				if a.StateOperationsPending {
					if ops, taken, err = s.store.TakeStateOperations(r.Context(), c.agent); err != nil {
						return
					}
				}
				fresh = true
			}
			directives := append(append([]api.Directive{}, forget...), a.Cancels...)
			if a.Queued > 0 || len(directives) > 0 || a.MoveKey || taken > 0 || last {
				var claims []api.Claim
				if claims, err = s.claimOffers(r.Context(), c, &req, protocol, &a); err != nil {
					return
				}
				writeJSON(w, http.StatusOK, api.PollResponse{
					Offers: a.Offers, Claims: claims, Directives: directives, MaxConcurrency: a.MaxConcurrency, ServerTime: s.store.TimeNow(),
					Protocol: protocol, OrchestratorVersion: s.cfg.Version, OrchestratorProtocol: s.cfg.AgentProtocols,
					KeyFingerprints: keyFingerprintsFor(protocol, a.KeyFingerprints), StateOperations: ops,
				})
				answered = true
			}
		})
		if err != nil || answered {
			return err
		}
		select {
		case <-woken:
			fresh = false
		case <-timer.C:
			last = true
			select {
			case <-woken: // it came with the timer: look again
				fresh = false
			default:
				fresh = fresh && a.Leased == 0
			}
		case <-s.closing:
			last = true
		case <-r.Context().Done():
			w.WriteHeader(statusClientClosed)
			return nil
		}
	}
}

// claimOffers turns the answer's offers into claims for an agent whose poll chose
// api.ProtocolClaimInPoll on and names its instance (a claim needs one), so it starts them
// without a claim request: the store claims them by the claim's own rule (store.ClaimOffers),
// and the offers leave the answer. Only an answer about to be written claims anything: a poll
// that goes on waiting holds no grant it has not handed out. Nor does it claim beyond the free
// slots the poll states: re-offers come on top of them (store.Offers), and an agent would not
// start a grant it has no slot for, while the claim renewed its job lease on every answer.
func (s *Server) claimOffers(ctx context.Context, c *call, req *api.PollRequest, protocol int, a *store.PollAnswer) ([]api.Claim, error) {
	if protocol < api.ProtocolClaimInPoll || req.Instance == "" || len(a.Offers) == 0 {
		return nil, nil
	}
	claims, err := s.store.ClaimOffers(ctx, c.agent, a.Offers[:min(len(a.Offers), req.CapacityFree)], req.Instance, s.cfg.LeaseDuration)
	if err != nil {
		return nil, err
	}
	a.Offers = []api.Offer{}
	return claims, nil
}

// keyFingerprintsFor is the answer's key_fingerprints in the chosen protocol: none before the
// version that has them.
func keyFingerprintsFor(protocol int, fps []string) []string {
	if protocol < api.ProtocolKeyFingerprints {
		return nil
	}
	return fps
}

// startPoll decodes and checks a poll and negotiates its agent protocol.
func (s *Server) startPoll(ctx context.Context, c *call, req *api.PollRequest) (int, error) {
	if err := decodeJSON(c.body, req); err != nil {
		return 0, err
	}
	if err := validatePoll(req); err != nil {
		return 0, err
	}
	stated := req.Protocol.Stated()
	protocol, ok := api.Negotiate(stated, s.cfg.AgentProtocols)
	if !ok {
		msg := api.IncompatibleProtocolMessage(req.AgentVersion, stated, s.cfg.Version, s.cfg.AgentProtocols)
		s.log.Warn("agent refused: incompatible agent protocol", "org", c.agent.Org, "runner_id", c.agent.RunnerID,
			"agent_version", req.AgentVersion, "agent_protocol", stated.String(), "orchestrator_version", s.cfg.Version, "orchestrator_protocol", s.cfg.AgentProtocols.String())
		s.noteRefusal(ctx, c.agent.Org, c.agent.RunnerID, api.RunnerRefusal{Code: api.CodeIncompatibleProtocol, At: s.cfg.Now(), AgentVersion: req.AgentVersion, Message: msg})
		return 0, store.Refuse(api.CodeIncompatibleProtocol, "%s", msg)
	}
	return protocol, nil
}

func validateClaim(req *api.ClaimRequest) error {
	switch {
	case req.Attempt < 1:
		return store.Invalid("attempt", "%d is not an attempt; claim the attempt the offer names (from 1)", req.Attempt)
	case req.Instance == "":
		return store.Invalid("instance", "is required: name the agent process (its pod name), so retries of this claim are recognised")
	case len(req.Instance) > maxInstanceLen:
		return store.Invalid("instance", "is %d characters; at most %d", len(req.Instance), maxInstanceLen)
	}
	return nil
}

// claim reserves the agent token's id in the claim's own transaction (route replayInTx). A
// request refused before it (undecodable, invalid) reserves nothing: the same request replayed
// is refused the same way. One the store failed to run reserves its id on its own, so a
// captured claim cannot be replayed to succeed later.
func (s *Server) claim(w http.ResponseWriter, r *http.Request, c *call) error {
	return post(w, r, c, validateClaim, func(ctx context.Context, id string, req api.ClaimRequest) (*api.Claim, error) {
		out, err := s.store.ClaimOnce(ctx, c.agent, c.replay, id, req, s.cfg.LeaseDuration)
		if _, refused := store.AsRefusal(err); err != nil && !refused && c.replay != nil {
			if _, rerr := s.store.ReplayCache().CheckAndStore(context.WithoutCancel(ctx), c.replay.ID, c.replay.Until); rerr != nil {
				s.log.ErrorContext(ctx, "a failed claim's token id could not be reserved against replay", "request_id", requestID(ctx), "err", rerr)
			}
		}
		return out, err
	})
}

func validateEvent(req *api.EventRequest) error {
	switch {
	case req.Attempt < 1:
		return store.Invalid("attempt", "%d is not an attempt; attempts count from 1", req.Attempt)
	case req.Fencing < 1:
		return store.Invalid("fencing", "%d is not a granted fencing number; send the one from the claim", req.Fencing)
	case req.Seq < 0:
		return store.Invalid("seq", "%d is negative; sequence numbers count from 0 per attempt", req.Seq)
	case req.Seq == api.SeqClaimed:
		return store.Invalid("seq", "%d is the seq of the claim's event, which the orchestrator records; use another", req.Seq)
	case len(req.Message) > maxEventMessageLen:
		return store.Invalid("message", "is %d bytes; at most %d", len(req.Message), maxEventMessageLen)
	case len(req.Reason) > maxEventReasonLen:
		return store.Invalid("reason", "is %d bytes; at most %d", len(req.Reason), maxEventReasonLen)
	case len(req.Detail) > maxEventMessageLen:
		return store.Invalid("detail", "is %d bytes; at most %d", len(req.Detail), maxEventMessageLen)
	case len(req.Node) > maxNodeNameLen:
		return store.Invalid("node", "is %d bytes; at most %d (a Kubernetes node name)", len(req.Node), maxNodeNameLen)
	case req.Step != "" && !req.Step.Valid():
		return store.Invalid("step", "%q is not a step; use one of %s", req.Step, stepNames())
	case req.Step == api.StepClaimed:
		return store.Invalid("step", "%q is recorded by the orchestrator at the claim; an agent does not send it", req.Step)
	case req.Step.Review():
		return store.Invalid("step", "%q is a review step the orchestrator records when a person acts on a saved plan; an agent does not send it", req.Step)
	case req.By != "":
		return store.Invalid("by", "is set by the orchestrator on review events only; an agent leaves it out")
	case req.Step == api.StepWaiting && req.Reason == "":
		return store.Invalid("reason", "is empty; a waiting event says what the attempt waits for")
	}
	switch req.Type {
	case api.EventStarted, api.EventProgress:
		if req.Result != "" {
			return store.Invalid("result", "is only allowed on %q events", api.EventFinished)
		}
	case api.EventFinished:
		switch req.Result {
		case api.StatusSucceeded, api.StatusFailed, api.StatusCanceled:
		default:
			return store.Invalid("result", "%q is not a result; a finished event needs succeeded, failed or canceled", req.Result)
		}
	default:
		return store.Invalid("type", "%q is not an event type; use started, progress or finished", req.Type)
	}
	return nil
}

// stepNames lists the steps for messages.
func stepNames() string {
	names := make([]string, len(api.Steps))
	for i, st := range api.Steps {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}

func (s *Server) event(w http.ResponseWriter, r *http.Request, c *call) error {
	return post(w, r, c, validateEvent, func(ctx context.Context, id string, req api.EventRequest) (*api.EventResponse, error) {
		out, counted, err := s.store.RecordEvent(ctx, c.agent, id, req, s.cfg.LeaseDuration)
		if counted != "" {
			s.metrics.reasons.WithLabelValues(c.agent.Org, c.agent.RunnerID, string(counted)).Inc()
		}
		if err == nil && req.Type == api.EventFinished {
			// A slot is free again: a waiting poll may now hand out an offer.
			s.notify.Wake(c.agent.Org + "/" + c.agent.RunnerID)
		}
		return out, err
	})
}

// events takes an EventBatch (agent protocol 6): every event is checked as event checks it, the
// valid ones are applied in one transaction (store.RecordEvents), and each gets its own result,
// so one refused event does not refuse the batch.
func (s *Server) events(w http.ResponseWriter, r *http.Request, c *call) error {
	var req api.EventBatch
	if err := decodeJSON(c.body, &req); err != nil {
		return err
	}
	switch n := len(req.Events); {
	case n == 0:
		return store.Invalid("events", "is empty; send at least one event")
	case n > api.MaxEventBatch:
		return store.Invalid("events", "has %d events; at most %d in one batch", n, api.MaxEventBatch)
	}
	results := make([]api.EventResult, len(req.Events))
	valid := make([]api.DeploymentEvent, 0, len(req.Events))
	at := make([]int, 0, len(req.Events)) // valid[k] is req.Events[at[k]]
	for i, ev := range req.Events {
		err := validateEvent(&ev.EventRequest)
		if err == nil && ev.DeploymentID == "" {
			err = store.Invalid("deployment_id", "is empty; name the deployment the event is about")
		}
		if err != nil {
			results[i].Error = eventRefusal(err)
			continue
		}
		valid = append(valid, ev)
		at = append(at, i)
	}
	if len(valid) > 0 {
		outcomes, err := s.store.RecordEvents(r.Context(), c.agent, valid, s.cfg.LeaseDuration)
		if err != nil {
			return err
		}
		finished := false
		for k, o := range outcomes {
			i := at[k]
			if o.Refused != nil {
				results[i].Error = eventRefusal(o.Refused)
				continue
			}
			resp := o.Response
			results[i].Response = &resp
			if o.Counted != "" {
				s.metrics.reasons.WithLabelValues(c.agent.Org, c.agent.RunnerID, string(o.Counted)).Inc()
			}
			finished = finished || req.Events[i].Type == api.EventFinished
		}
		if finished {
			// Slots are free again: a waiting poll may now hand out offers.
			s.notify.Wake(c.agent.Org + "/" + c.agent.RunnerID)
		}
	}
	writeJSON(w, http.StatusOK, api.EventBatchResponse{Results: results})
	return nil
}

// eventRefusal is a refusal as one result of a batch: its error body and the status the event
// alone would have been answered with.
func eventRefusal(err error) *api.EventRefusal {
	ref, _ := store.AsRefusal(err) // only refusals reach here
	if ref == nil {
		ref = store.Refuse(api.CodeInternal, "internal error")
	}
	return &api.EventRefusal{Status: statusOf(ref.Code), ErrorDetail: api.ErrorDetail{Code: ref.Code, Message: ref.Message, Field: ref.Field, CommittedOffset: ref.Committed}}
}

// reportStates takes an agent's report of the states of its runner's kubernetes state storage:
// versions' metadata and lock holders, never contents.
func (s *Server) reportStates(w http.ResponseWriter, r *http.Request, c *call) error {
	var rep api.StateReport
	if err := decodeJSON(c.body, &rep); err != nil {
		return err
	}
	if err := rep.Validate(); err != nil {
		return err
	}
	if err := s.store.RecordStates(r.Context(), c.agent, rep); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
