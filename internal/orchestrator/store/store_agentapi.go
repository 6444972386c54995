package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// MaxEventsPerAttempt caps the events one attempt may record; beyond it only its finished
// event is taken, so an agent cannot grow the database without bound.
const MaxEventsPerAttempt = 1000

// Directive reasons.
const (
	reasonUnknownDeployment = "unknown_deployment"
	ReasonTerminal          = "terminal"
	ReasonLeaseLost         = "lease_lost"
	ReasonCancelRequested   = "cancel_requested"
)

// touchRunner records that the runner's agent made an authenticated request. The write is
// skipped when nothing visible would change, so a busy agent does not rewrite the record on
// every request.
func touchRunner(tx Tx, id agentauth.Identity, agentVersion string, now time.Time) (*api.Runner, error) {
	r, err := agentRunnerTx(tx, id)
	if err != nil {
		return nil, err
	}
	st := &r.Status
	changed := st.LastSeenAt == nil || now.Sub(*st.LastSeenAt) >= time.Second || st.KeyFingerprint != id.Fingerprint
	if agentVersion != "" && agentVersion != st.AgentVersion {
		st.AgentVersion, changed = agentVersion, true
	}
	if len(r.RetiringKeys) > 0 && slices.Contains(currentFingerprints(r), id.Fingerprint) {
		// The agent signs with a current key: the keys it replaced are no longer needed.
		r.RetiringKeys, changed = nil, true
	}
	if !changed {
		return r, nil
	}
	st.LastSeenAt = &now
	st.KeyFingerprint = id.Fingerprint
	return r, tx.PutDoc(KindRunner, id.Org, id.RunnerID, r)
}

// agentRunnerTx reads the runner an agent signs for: a runner that is not there is runnerGone,
// any other error is the database's and stays one. Turned into a refusal, a failed read (a
// serialization failure under load) was answered as a deleted runner (401), or, in a write,
// committed a transaction PostgreSQL had aborted ("commit unexpectedly resulted in rollback",
// HTTP 500) instead of running it again.
func agentRunnerTx(tx Tx, id agentauth.Identity) (*api.Runner, error) {
	r, err := getRunnerTx(tx, id.Org, id.RunnerID)
	if _, refused := AsRefusal(err); refused {
		return nil, runnerGone(id)
	}
	return r, err
}

func runnerGone(id agentauth.Identity) *Refusal {
	r := unauthorized("runner %q of organisation %q no longer exists", id.RunnerID, id.Org)
	r.AuthReason = AuthReasonRunnerGone
	return r
}

// loadRunnerDeployment loads a deployment the runner may act on; one of another runner is reported
// as not found, so an agent learns nothing about deployments that are not its own.
func loadRunnerDeployment(tx Tx, id agentauth.Identity, deploymentID string) (*DeploymentRecord, error) {
	rec, err := loadDeployment(tx, id.Org, deploymentID)
	if err == nil && rec.D.RunnerID != id.RunnerID {
		err = NotFound("deployment %q does not exist for runner %q", deploymentID, id.RunnerID)
	}
	return rec, err
}

// RenewLeases handles the held list of a poll: it renews the job leases the agent still holds,
// marks started attempts running, takes the job lease over for a new agent instance (a new
// leader re-adopting the attempts) and returns forget directives for everything else.
func (s *Store) RenewLeases(ctx context.Context, id agentauth.Identity, req *api.PollRequest, leaseFor time.Duration) ([]api.Directive, error) {
	var out []api.Directive
	err := s.batch(ctx, func(tx Tx) error {
		out = nil
		now := s.TimeNow()
		if _, err := touchRunner(tx, id, req.AgentVersion, now); err != nil {
			return err
		}
		for _, e := range req.Held {
			forget := func(reason string) {
				out = append(out, api.Directive{Type: api.DirectiveForget, DeploymentID: e.DeploymentID, Attempt: e.Attempt, Reason: reason})
			}
			rec, err := loadRunnerDeployment(tx, id, e.DeploymentID)
			if err != nil {
				if _, ok := AsRefusal(err); ok {
					forget(reasonUnknownDeployment)
					continue
				}
				return err
			}
			if _, err := settleLease(tx, rec, now); err != nil {
				return err
			}
			switch {
			case rec.D.Status.Terminal():
				forget(ReasonTerminal)
				continue
			case rec.Lease == nil || rec.D.Attempt != e.Attempt || rec.Lease.Fencing != e.Fencing:
				forget(ReasonLeaseLost)
				continue
			}
			rec.Lease.ExpiresAt = now.Add(leaseFor)
			if req.Instance != "" {
				rec.Lease.Instance = req.Instance
			}
			if e.Started && rec.D.Status == api.StatusClaimed {
				rec.D.Status = api.StatusRunning
				rec.D.StartedAt = &now
			}
			if err := tx.SaveDeployment(rec); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// reofferAfter is how long after its claim an attempt leased to the polling instance, but neither
// started nor restated in its poll, is offered to it again. An agent killed between a claim and
// its Job lost the claim with its memory; the same instance (a container restarted in its pod)
// claims it again (claims are idempotent for the holder) and creates the Job, instead of the
// attempt waiting out the job lease. The delay keeps a claim whose answer is still on its way
// from being offered twice; the agent would skip it anyway (it is starting it) and the Job name
// is deterministic, so a second start adopts the first Job. A re-offer alone does not end a long
// poll early (an agent still creating that Job would poll in a loop); it goes with the next answer,
// and the first poll of a restarted agent does not wait.
const ReofferAfter = 5 * time.Second

// PollAnswer is what one look at the store gives a waiting poll.
type PollAnswer struct {
	Offers []api.Offer
	// Queued counts the offers of queued attempts (the others are re-offers).
	Queued         int
	Cancels        []api.Directive
	MaxConcurrency int
	// KeyFingerprints are the runner's current keys.
	KeyFingerprints []string
	// moveKey: the agent signed with a key that is not current while it holds a current one, or
	// with one that is no longer accepted at all (revoked since the poll began). Answered at
	// once, it moves over (and the retiring key retires), or its next poll is refused and it says
	// so, instead of either waiting out the long poll.
	MoveKey bool
	// Leased counts the runner's attempts under a job lease. Time alone, with no wake, turns
	// such an attempt into a re-offer (ReofferAfter), so a poll must look again before it
	// answers at the end of its wait; with none leased, its first look still holds then.
	Leased int
	// StateOperationsPending: state operations wait for the runner's state storage (only looked
	// at when the poll's protocol has them), so the poll takes them (TakeStateOperations); an
	// idle poll's look at the store stays one transaction.
	StateOperationsPending bool
}

// Offers returns what a poll may hand out now: attempts leased to the polling instance that it
// seems to have lost (see reofferAfter), then queued attempts of this runner, oldest first, at
// most capacityFree and never beyond max_concurrency counting the attempts the runner already
// holds; and cancel directives for held attempts whose cancel was requested. queued counts the
// offers taken from the queue. protocol is the agent protocol the poll negotiated: deployments
// with saved plans are offered only from api.ProtocolSavedPlans on.
func (s *Store) Offers(ctx context.Context, id agentauth.Identity, req *api.PollRequest, protocol int) (a PollAnswer, err error) {
	a.Offers, a.Cancels = []api.Offer{}, []api.Directive{}
	now := s.TimeNow()
	err = s.view(ctx, func(tx Tx) error {
		r, err := agentRunnerTx(tx, id)
		if err != nil {
			return err
		}
		a = PollAnswer{MaxConcurrency: r.MaxConcurrency, Offers: []api.Offer{}, Cancels: []api.Directive{}, KeyFingerprints: currentFingerprints(r)}
		if !slices.Contains(a.KeyFingerprints, id.Fingerprint) {
			holdsCurrent := slices.ContainsFunc(req.KeyFingerprints, func(f string) bool { return slices.Contains(a.KeyFingerprints, f) })
			retiring := slices.ContainsFunc(r.RetiringKeys, func(k api.RetiringKey) bool { return k.Fingerprint == id.Fingerprint && now.Before(k.Until) })
			a.MoveKey = holdsCurrent || !retiring
		}
		if protocol >= api.ProtocolStateOperations {
			if a.StateOperationsPending, _, err = stateOperationsPending(tx, id.Org, r); err != nil {
				return err
			}
		}
		leased, err := tx.Leased(id.Org, id.RunnerID)
		if err != nil {
			return err
		}
		a.Leased = len(leased)
		// Saved plans are offered only to an agent that knows them (see needsSavedPlans).
		savedPlans := protocol >= api.ProtocolSavedPlans
		for _, d := range leased {
			rec, err := loadIndexedDeployment(tx, id.Org, d)
			if err != nil {
				return err
			}
			if rec.D.CancelRequested {
				a.Cancels = append(a.Cancels, api.Directive{Type: api.DirectiveCancel, DeploymentID: rec.D.ID, Attempt: rec.D.Attempt, Reason: ReasonCancelRequested})
			} else if lostByPoller(rec, req, now) && (savedPlans || !needsSavedPlans(&rec.D)) {
				a.Offers = append(a.Offers, api.Offer{DeploymentID: rec.D.ID, Attempt: rec.D.Attempt, Operation: rec.D.Operation})
			}
		}
		n := min(req.CapacityFree-len(a.Offers), r.MaxConcurrency-len(leased))
		if n <= 0 {
			return nil
		}
		ids, err := tx.Queued(id.Org, id.RunnerID, n)
		if err != nil {
			return err
		}
		for _, d := range ids {
			rec, err := loadIndexedDeployment(tx, id.Org, d)
			if err != nil {
				return err
			}
			if !savedPlans && needsSavedPlans(&rec.D) {
				continue // it waits for an agent of protocol 4 (ProtocolSavedPlans)
			}
			a.Offers = append(a.Offers, api.Offer{DeploymentID: rec.D.ID, Attempt: rec.D.Attempt, Operation: rec.D.Operation})
			a.Queued++
		}
		return nil
	})
	return a, err
}

// lostByPoller reports whether rec is an attempt leased to the polling instance that it has not
// started and does not restate, reofferAfter after its claim.
func lostByPoller(rec *DeploymentRecord, req *api.PollRequest, now time.Time) bool {
	if req.Instance == "" || rec.Lease == nil || rec.Lease.Instance != req.Instance || rec.D.Status != api.StatusClaimed ||
		rec.D.ClaimedAt == nil || now.Sub(*rec.D.ClaimedAt) < ReofferAfter {
		return false
	}
	return !slices.ContainsFunc(req.Held, func(h api.HeldAttempt) bool { return h.DeploymentID == rec.D.ID && h.Attempt == rec.D.Attempt })
}

// Claim grants the job lease on a queued attempt, or returns the same grant again to the
// instance that holds it (idempotent retries).
func (s *Store) Claim(ctx context.Context, id agentauth.Identity, deploymentID string, req api.ClaimRequest, leaseFor time.Duration) (*api.Claim, error) {
	return s.ClaimOnce(ctx, id, nil, deploymentID, req, leaseFor)
}

// ClaimOnce is Claim that first reserves the request's agent token id (agentauth.BindBody) in
// the claim's own transaction, one commit for both: a replayed id is refused (401), and a claim
// refused for any other reason keeps its id reserved, since the refusal commits what was written
// before it (see Update). replay nil reserves nothing (the caller did).
func (s *Store) ClaimOnce(ctx context.Context, id agentauth.Identity, replay *agentauth.Replay, deploymentID string, req api.ClaimRequest, leaseFor time.Duration) (*api.Claim, error) {
	var out *api.Claim
	err := s.Update(ctx, func(tx Tx) error {
		now := s.TimeNow()
		if replay != nil {
			seen, err := tx.CheckReplay(replay.ID, s.now(), replay.Until)
			if err != nil {
				return err
			}
			if seen {
				return &Refusal{Code: api.CodeUnauthorized, Message: agentauth.ReplayedError().Error(), AuthReason: string(agentauth.ReasonReplayed)}
			}
		}
		var err error
		out, err = s.claimTx(tx, id, deploymentID, req, leaseFor, now)
		return err
	})
	return out, err
}

// ClaimOffers claims the offers of a poll answer for the polling instance, for agents of
// api.ProtocolClaimInPoll on: the answer carries the grants, so starting an attempt costs the
// agent no claim request. All in one transaction, each offer by the claim's own rule (claimTx):
// the same fencing, job lease, job token and max_concurrency check as POST …/claim, and the
// same idempotence (an attempt the instance already holds, re-offered by lostByPoller, returns
// its grant again). An offer the rule refuses (taken by another instance meanwhile, the runner
// at its max_concurrency) is left out of the result; what it wrote before the refusal commits,
// as for a refused claim. An answer lost on the wire loses nothing: the attempt is claimed and
// not restated, so it is offered to the instance again after ReofferAfter, or its job lease
// runs out, exactly like a claim whose answer was lost.
func (s *Store) ClaimOffers(ctx context.Context, id agentauth.Identity, offers []api.Offer, instance string, leaseFor time.Duration) ([]api.Claim, error) {
	var out []api.Claim
	err := s.Update(ctx, func(tx Tx) error {
		out = make([]api.Claim, 0, len(offers)) // the engine may run this again
		now := s.TimeNow()
		for _, o := range offers {
			c, err := s.claimTx(tx, id, o.DeploymentID, api.ClaimRequest{Attempt: o.Attempt, Instance: instance}, leaseFor, now)
			if _, refused := AsRefusal(err); refused {
				continue
			}
			if err != nil {
				return err
			}
			out = append(out, *c)
		}
		return nil
	})
	return out, err
}

// claimTx is the claim's rule in tx: it grants the job lease on the queued attempt req names, or
// returns the grant again to the instance that holds it.
func (s *Store) claimTx(tx Tx, id agentauth.Identity, deploymentID string, req api.ClaimRequest, leaseFor time.Duration, now time.Time) (*api.Claim, error) {
	runner, err := touchRunner(tx, id, "", now)
	if err != nil {
		return nil, err
	}
	rec, err := loadRunnerDeployment(tx, id, deploymentID)
	if err != nil {
		return nil, err
	}
	if _, err := settleLease(tx, rec, now); err != nil {
		return nil, err
	}
	switch st := rec.D.Status; {
	case st.Terminal():
		return nil, conflict("deployment %q already ended with status %s", deploymentID, st)
	case req.Attempt != rec.D.Attempt:
		return nil, conflict("attempt %d is not the current attempt of deployment %q (it is %d, status %s); claim the attempt the latest poll offers", req.Attempt, deploymentID, rec.D.Attempt, st)
	case st == api.StatusQueued:
		leased, err := tx.Leased(id.Org, id.RunnerID)
		if err != nil {
			return nil, err
		}
		held := len(leased)
		if held >= runner.MaxConcurrency {
			return nil, conflict("runner %q already holds %d attempt(s), its max_concurrency; finish one first", id.RunnerID, held)
		}
		rec.Fencing++
		rec.Lease = &leaseRecord{Fencing: rec.Fencing, Instance: req.Instance}
		rec.D.Status = api.StatusClaimed
		rec.D.ClaimedAt = &now
		rec.D.Reason, rec.D.Message, rec.D.Detail = "", "", ""
		rec.LogCommitted = 0
		// The claim is the attempt's first step; the agent reports the others.
		claimed := api.Event{Attempt: rec.D.Attempt, Seq: api.SeqClaimed, Type: api.EventProgress, Step: api.StepClaimed, Time: now}
		if err := tx.PutEvent(id.Org, deploymentID, rec.D.Attempt, api.SeqClaimed, claimed); err != nil {
			return nil, err
		}
		if rec.D.LogSize > 0 {
			note := fmt.Sprintf("\n[outpost: attempt %d starts here; the lines above are from earlier attempts]\n", rec.D.Attempt)
			if err := appendCapped(tx, rec, []byte(note), s.logCap); err != nil {
				return nil, err
			}
		}
	case rec.Lease == nil:
		return nil, conflict("deployment %q is %s without a job lease; wait for the next poll", deploymentID, st)
	case rec.Lease.Instance != req.Instance:
		return nil, conflict("deployment %q attempt %d is held by agent instance %q until %s", deploymentID, rec.D.Attempt, rec.Lease.Instance, rec.Lease.ExpiresAt.Format(time.RFC3339))
	}
	rec.Lease.ExpiresAt = now.Add(leaseFor)
	if err := tx.SaveDeployment(rec); err != nil {
		return nil, err
	}
	placement, err := placementOf(tx, rec)
	if err != nil {
		return nil, err
	}
	return &api.Claim{
		DeploymentID: deploymentID, Attempt: rec.D.Attempt,
		Lease:     api.Lease{Fencing: rec.Lease.Fencing, ExpiresAt: rec.Lease.ExpiresAt},
		JobToken:  MintJobToken(s.secret, JobTokenPayload{Org: id.Org, Deployment: deploymentID, Attempt: rec.D.Attempt, Fencing: rec.Lease.Fencing}),
		Placement: *placement,
	}, nil
}

// runnerAndStorage loads the runner of a deployment and its state storage as they are now.
func runnerAndStorage(tx Tx, rec *DeploymentRecord) (*api.Runner, *api.StateStorage, error) {
	// Only a record that is not there is a refusal; a failed read stays an error (see
	// agentRunnerTx: in a claim, a refusal commits).
	runner, err := getRunnerTx(tx, rec.Org, rec.D.RunnerID)
	if _, refused := AsRefusal(err); refused {
		return nil, nil, NotFound("runner %q of deployment %q no longer exists", rec.D.RunnerID, rec.D.ID)
	} else if err != nil {
		return nil, nil, err
	}
	st, err := getStorageTx(tx, rec.Org, runner.StateStorageID)
	if _, refused := AsRefusal(err); refused {
		return nil, nil, NotFound("state storage %q of runner %q no longer exists", runner.StateStorageID, runner.ID)
	} else if err != nil {
		return nil, nil, err
	}
	return runner, st, nil
}

// placementOf is what the agent needs to run the deployment's current attempt: the runner's job
// settings and state storage as they are now. The source stays out (only the job runner reads it).
func placementOf(tx Tx, rec *DeploymentRecord) (*api.Placement, error) {
	runner, st, err := runnerAndStorage(tx, rec)
	if err != nil {
		return nil, err
	}
	ref, err := planRef(tx, rec)
	if err != nil {
		return nil, err
	}
	return &api.Placement{
		Operation: rec.D.Operation, StateKey: rec.D.StateKey, StateStorage: *st,
		TimeoutSeconds: rec.D.TimeoutSeconds, Job: runner.Job, Traceparent: rec.Traceparent,
		SavePlan: rec.D.SavePlan, PlanTTLSeconds: rec.D.PlanTTLSeconds, ApplyPlan: ref,
	}, nil
}

// RecordEvent stores an event once per (deployment, attempt, seq) and applies it: started makes
// the deployment running, finished ends it and releases the job lease, a waiting event sets the
// deployment's reason until a later step (pod scheduled or initialized, CLI started) clears it. A
// resend of a stored event is acknowledged without change, before any other check, so an agent
// that lost the answer to its finished event can still get it acknowledged. New events are taken
// only for the current attempt of a deployment that has not ended, and at most
// MaxEventsPerAttempt per attempt, the finished event always.
//
// counted is the reason the event adds to the runner's reason counts, or "": a waiting event's
// reason, and a finished event's unless the attempt already waited for the same reason, so each
// reason counts once per attempt.
func (s *Store) RecordEvent(ctx context.Context, id agentauth.Identity, deploymentID string, req api.EventRequest, leaseFor time.Duration) (out *api.EventResponse, counted api.Reason, err error) {
	var resp api.EventResponse
	// A batch: when a wave of attempts finishes, their events share commits (and fsyncs) instead
	// of queueing one commit each. The batch may run this again, so out is set only at the end.
	err = s.batch(ctx, func(tx Tx) error {
		var err error
		resp, counted, err = s.recordEvent(tx, id, deploymentID, req, leaseFor, s.TimeNow())
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return &resp, counted, nil
}

// EventOutcome is what RecordEvents made of one event: Response and Counted as RecordEvent
// returns them, or Refused, the refusal RecordEvent would have returned.
type EventOutcome struct {
	Response api.EventResponse
	Counted  api.Reason
	Refused  error
}

// RecordEvents is RecordEvent for several events of the agent's runner in one transaction, so
// they share one commit: each is checked and applied as RecordEvent would, in order (a later
// event of the same attempt sees an earlier one), and one refused does not stop the others.
// What a refused event wrote before its refusal is committed as Update says. An error that is
// not a refusal (the database) fails them all.
func (s *Store) RecordEvents(ctx context.Context, id agentauth.Identity, events []api.DeploymentEvent, leaseFor time.Duration) ([]EventOutcome, error) {
	var out []EventOutcome
	err := s.batch(ctx, func(tx Tx) error {
		out = make([]EventOutcome, len(events)) // the batch may run this again
		now := s.TimeNow()
		for i, ev := range events {
			resp, counted, err := s.recordEvent(tx, id, ev.DeploymentID, ev.EventRequest, leaseFor, now)
			if _, refused := AsRefusal(err); refused {
				out[i].Refused = err
				continue
			}
			if err != nil {
				return err
			}
			out[i] = EventOutcome{Response: resp, Counted: counted}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// recordEvent is RecordEvent's check and write of one event in tx.
func (s *Store) recordEvent(tx Tx, id agentauth.Identity, deploymentID string, req api.EventRequest, leaseFor time.Duration, now time.Time) (api.EventResponse, api.Reason, error) {
	var counted api.Reason
	if _, err := touchRunner(tx, id, "", now); err != nil {
		return api.EventResponse{}, "", err
	}
	rec, err := loadRunnerDeployment(tx, id, deploymentID)
	if err != nil {
		return api.EventResponse{}, "", err
	}
	seen, err := tx.HasEvent(id.Org, deploymentID, req.Attempt, req.Seq)
	if err != nil {
		return api.EventResponse{}, "", err
	}
	if seen {
		return api.EventResponse{Status: rec.D.Status, CancelRequested: rec.D.CancelRequested}, "", nil
	}
	if _, err := settleLease(tx, rec, now); err != nil {
		return api.EventResponse{}, "", err
	}
	switch {
	case req.Attempt != rec.D.Attempt:
		return api.EventResponse{}, "", staleFencing("event for attempt %d, but deployment %q is at attempt %d; this attempt's job lease was lost", req.Attempt, deploymentID, rec.D.Attempt)
	case req.Fencing > rec.Fencing:
		return api.EventResponse{}, "", Invalid("fencing", "fencing %d was never granted for deployment %q (the latest grant is %d)", req.Fencing, deploymentID, rec.Fencing)
	case req.Fencing < rec.Fencing:
		return api.EventResponse{}, "", staleFencing("fencing %d is older than the current fencing %d of deployment %q; another claim superseded this one", req.Fencing, rec.Fencing, deploymentID)
	case rec.D.Status.Terminal():
		return api.EventResponse{}, "", conflict("deployment %q already ended with status %s at %s; events of its attempts are no longer taken",
			deploymentID, rec.D.Status, rec.D.FinishedAt.Format(time.RFC3339))
	}
	n, err := tx.CountEvents(id.Org, deploymentID, req.Attempt, MaxEventsPerAttempt)
	if err != nil {
		return api.EventResponse{}, "", err
	}
	if req.Type != api.EventFinished && n >= MaxEventsPerAttempt {
		return api.EventResponse{}, "", conflict("attempt %d of deployment %q already has %d events, the most one attempt may record; only its finished event is still taken",
			req.Attempt, deploymentID, MaxEventsPerAttempt)
	}
	when := req.Time.UTC().Round(0)
	if req.Time.IsZero() {
		when = now
	}
	ev := req.Event
	ev.Time = when
	ev.Step = ev.StepOf()
	if err := tx.PutEvent(id.Org, deploymentID, req.Attempt, req.Seq, ev); err != nil {
		return api.EventResponse{}, "", err
	}
	if counted, err = countedReason(tx, id.Org, deploymentID, ev); err != nil {
		return api.EventResponse{}, "", err
	}
	// The current attempt of a deployment that has not ended holds the job lease.
	if rec.Lease != nil {
		rec.Lease.ExpiresAt = now.Add(leaseFor)
		switch ev.Step {
		case api.StepWaiting:
			if rec.D.Status != api.StatusClaimed {
				break
			}
			rec.D.Reason, rec.D.Message, rec.D.Detail = ev.Reason, ev.Message, ev.Detail
		case api.StepPodScheduled, api.StepPodInitialized:
			rec.D.Reason, rec.D.Message, rec.D.Detail = "", "", ""
		}
		switch req.Type {
		case api.EventStarted:
			if rec.D.Status == api.StatusClaimed {
				rec.D.Status = api.StatusRunning
				rec.D.StartedAt = &now
				rec.D.Reason, rec.D.Message, rec.D.Detail = "", "", ""
			}
		case api.EventFinished:
			rec.D.ExitCode = req.ExitCode
			if err := finishDeployment(tx, rec, req.Result, req.Reason, req.Message, now); err != nil {
				return api.EventResponse{}, "", err
			}
			rec.D.Detail = req.Detail
		}
		if err := tx.SaveDeployment(rec); err != nil {
			return api.EventResponse{}, "", err
		}
	}
	return api.EventResponse{Status: rec.D.Status, CancelRequested: rec.D.CancelRequested}, counted, nil
}

// countedReason is the reason a newly stored event adds to its runner's reason counts (see
// RecordEvent): a reason outside api.Reasons counts as "other", so a newer agent's reasons
// cannot grow the metric's series without bound.
func countedReason(tx Tx, org, deploymentID string, ev api.Event) (api.Reason, error) {
	if ev.Reason == "" || (ev.Type == api.EventFinished && ev.Result == api.StatusSucceeded) {
		return "", nil
	}
	if ev.Type == api.EventFinished {
		if seq, ok := api.WaitingSeq(ev.Reason); ok {
			waited, err := tx.HasEvent(org, deploymentID, ev.Attempt, seq)
			if err != nil || waited {
				return "", err
			}
		}
	}
	if !ev.Reason.Known() {
		return ReasonOther, nil
	}
	return ev.Reason, nil
}

// ReasonOther is the reason counted for one outside api.Reasons.
const ReasonOther api.Reason = "other"
