// Package session is the agent's conversation with the orchestrator: the long poll that restates
// capacity and held attempts (renewing their job leases), claims (carried by the poll's answer
// from agent protocol 7 on, claim requests for the offers of older orchestrators), directives
// (cancel, forget), and the events (the timeline, started, finished) of the attempts the
// executor runs. It is
// level-triggered: every pass rebuilds its picture from the executor's List, so an agent that
// restarts, or a message that got lost, heals on the next pass without any state of its own
// surviving.
//
// # Pacing
//
// The orchestrator never offers more attempts than a poll states free slots. So when a finished
// event is acknowledged while a poll that stated no free slot is held, the session cuts that
// poll short and the next one states the slot (attemptEnded); otherwise a busy agent's queue
// would wait out the long poll. A poll that stated a free slot is left alone: the orchestrator
// answers it itself. After an answer with claims (protocol 7) the next poll goes at once; after
// one with offers as soon as their claims are answered (awaitClaims: until then the orchestrator
// would answer at once with the same offers), after new directives at once; only an answer that brought nothing new waits the gap
// (minPollGap, 250 ms) that keeps a repeating server from a busy loop.
//
// Events and cleanups are work queues of attempts (events.go): started and finished events have
// maxConcurrentSends workers, cleanups workers of their own, so a cleanup, whose Kubernetes
// requests give way to starts at the client's rate limit (kubeclient.Deferrable), never holds up
// the finished events that free the runner's slots. Failed sends and cleanups are retried per
// attempt with the session's backoff, never sooner than a Retry-After (queues.go).
package session

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"golang.org/x/sync/errgroup"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/health"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobtoken"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/metrics"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
)

// Orchestrator is the agent side of the API (client.AgentClient).
type Orchestrator interface {
	Poll(ctx context.Context, req api.PollRequest) (*api.PollResponse, error)
	Claim(ctx context.Context, deploymentID string, req api.ClaimRequest) (*api.Claim, error)
	Event(ctx context.Context, deploymentID string, req api.EventRequest) (*api.EventResponse, error)
}

// ConnectionRecorder keeps a record of whether polls reach the orchestrator. Its methods must
// not block.
type ConnectionRecorder interface {
	PollOK(orchestratorVersion string)
	PollFailed(err error)
}

// PlanChecker tells whether the saved plan an apply runs can still be applied: an error with
// a RefusalReason() api.Reason method refuses the claim with that reason.
type PlanChecker interface {
	CheckPlan(ctx context.Context, ns, key string, ref api.PlanRef) error
}

// Options configure a session.
type Options struct {
	Client   Orchestrator
	Executor executor.Executor
	// Tokens receives the job token of every attempt claimed or adopted, for the state backend.
	Tokens  *jobtoken.Registry
	Metrics *metrics.Metrics
	Health  *health.State
	// Connection, when set, is told every poll's outcome (connection.Recorder, for `helm test`).
	Connection ConnectionRecorder
	Logger     *slog.Logger
	// Instance names this agent (pod name) in claims.
	Instance string
	Version  string
	// Protocols is the range of agent protocol versions stated on every poll
	// (api.AgentProtocols() when zero); tests widen or move it to stand for another release.
	Protocols api.ProtocolRange
	// MaxConcurrency caps attempts below the orchestrator's limit; 0 follows the orchestrator.
	MaxConcurrency int
	// LimitChanged, when set, is called with the number of attempts the agent may run at once
	// whenever a poll changes it (the agent sizes its Kubernetes client's burst with it).
	LimitChanged func(maxConcurrency int)
	PollWait     time.Duration
	CancelGrace  time.Duration
	// FinalTimeout bounds the events and cleanups that run on after the session is stopped.
	FinalTimeout time.Duration
	// EventBackoff paces retries of undelivered events (default 1 s … 60 s).
	EventBackoff retry.Backoff
	// PollBackoff paces polls after errors (default 1 s … 30 s).
	PollBackoff retry.Backoff
	// NoStateBackend, when set, says why this agent serves no state backend and which setting
	// would make it serve one. Attempts whose state storage is kubernetes are then refused at
	// claim time (reason no_state_backend) with this text, instead of running a CLI that cannot
	// reach its state.
	NoStateBackend string
	// Plans checks the saved plan of an apply before the attempt starts (the state backend's
	// Server); nil when the agent serves no state backend.
	Plans PlanChecker
	// StateOperations, when set, runs the state operations poll answers hand over (the state
	// backend's statebackend.Operations); nil when the agent serves no state backend.
	StateOperations StateOperations
	// PollGap is the least time from a poll to the next when its answer brought nothing new
	// (default minPollGap).
	PollGap time.Duration
	// TracerProvider makes the claim spans of traced deployments (trace.go); nil traces nothing.
	TracerProvider trace.TracerProvider
}

// StateOperations runs state operations; Offered returns at once.
type StateOperations interface {
	Offered(ctx context.Context, ops []api.StateOperationOffer)
}

// Session runs while this agent leads.
type Session struct {
	o   Options
	log *slog.Logger

	mu       sync.Mutex
	attempts map[executor.AttemptKey]*attemptState
	starting map[executor.AttemptKey]bool
	skipped  map[executor.AttemptKey]bool
	orchMax  int
	// clockOffset is the orchestrator's clock offset last logged (pollLoop only).
	clockOffset time.Duration
	// refusedKey is true while polls are refused for an unknown key (pollLoop only).
	refusedKey bool
	// orchKnown is false until the first poll told the runner's max_concurrency.
	orchKnown bool
	// limit is the last value given to LimitChanged.
	limit int
	// queues are the term's event work queues (nil before the event loop starts).
	queues *eventQueues
	// batcher gathers the event workers' events into batches (nil when the client cannot
	// batch); see postEvent.
	batcher *eventBatcher
	// kick wakes the event loop early.
	kick *executor.Notifier
	// cutPoll ends the long poll in flight (nil when none is), and pollFree is the capacity it
	// stated; see attemptEnded.
	cutPoll  context.CancelFunc
	pollFree int
	// claiming counts claim requests in flight, claimFailed tells that one failed other than by
	// a conflict since the poll loop last looked, and claimAnswered wakes the poll loop when one
	// is answered; see awaitClaims.
	claiming      int
	claimFailed   bool
	claimAnswered chan struct{}
	// lastDirectives are the directives of the last poll answer (pollLoop only).
	lastDirectives map[api.Directive]bool
	// protocol is the agent protocol version the last poll answer chose (0 before the first);
	// from api.ProtocolTimeline on, attempts' timeline events are sent.
	protocol int
	// began is when the current term started (Run).
	began time.Time
}

// holdForProtocol is how long, after a term starts, the events of an attempt with a timeline
// wait for the first poll answer to say which protocol the orchestrator speaks, so the steps an
// attempt reached while no agent ran are sent before its finished event instead of being lost.
// Polls that keep failing do not hold the finished events longer than this.
const holdForProtocol = 10 * time.Second

// attemptState is what the session remembers about an attempt between passes. All of it can be
// lost: a new session resends the events (the orchestrator deduplicates them by seq).
// What the attempt needs next is its phase (phaseOf); its retries are paced by the work queues.
type attemptState struct {
	fencing     int64
	startedSent bool
	acked       bool // the finished event was acknowledged, or the orchestrator forgot the attempt
	refused     bool // the orchestrator refused an event for good; wait for forget
	cleaned     bool
	seen        bool // the executor listed it this term
	// status is what the executor last reported (or, for an attempt it does not hold, the
	// finished event to send).
	status executor.AttemptStatus
	// pendingEvent is the finished event of an attempt the executor never got to hold (its start
	// failed), so it has no outbox but this.
	pendingEvent []byte
	// progress are the attempt's timeline events not yet acknowledged, in seq order (timeline.go);
	// sentSeqs the seqs of those the orchestrator acknowledged or refused for good.
	progress []api.EventRequest
	sentSeqs map[int64]bool
}

// Seq numbers of events. They are derived, not counted, so an agent that restarts sends
// byte-identical events and the orchestrator's (deployment, attempt, seq) dedup makes it exactly
// once.
const (
	SeqStarted  = api.SeqStarted
	SeqFinished = api.SeqFinished
)

// New returns a session.
func New(o Options) *Session {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Tokens == nil {
		o.Tokens = jobtoken.New(nil)
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New(o.Version)
	}
	if o.Health == nil {
		o.Health = health.NewState(o.PollWait, nil)
	}
	if o.Protocols == (api.ProtocolRange{}) {
		o.Protocols = api.AgentProtocols()
	}
	if o.PollWait <= 0 || o.PollWait > 30*time.Second {
		o.PollWait = 30 * time.Second
	}
	if o.CancelGrace <= 0 {
		o.CancelGrace = 120 * time.Second
	}
	if o.FinalTimeout <= 0 {
		o.FinalTimeout = 20 * time.Second
	}
	if o.EventBackoff.Base == 0 {
		o.EventBackoff = retry.Backoff{Base: time.Second, Max: 60 * time.Second}
	}
	if o.PollGap <= 0 {
		o.PollGap = minPollGap
	}
	if o.PollBackoff.Base == 0 {
		o.PollBackoff = retry.Backoff{Base: time.Second, Max: 30 * time.Second}
	}
	o.TracerProvider = tracing.OrOff(o.TracerProvider)
	return &Session{o: o, log: o.Logger.With("component", "session"), attempts: map[executor.AttemptKey]*attemptState{}, starting: map[executor.AttemptKey]bool{}, skipped: map[executor.AttemptKey]bool{}, kick: executor.NewNotifier(),
		claimAnswered: make(chan struct{}, 1)}
}

// Run polls and sends events until ctx ends (shutdown or lost leadership). Events already being
// sent finish under their own timeout; running attempts are left alone for the next leader.
func (s *Session) Run(ctx context.Context) error {
	// A term starts from what the executor holds, not from what an earlier term remembered.
	s.mu.Lock()
	s.attempts = map[executor.AttemptKey]*attemptState{}
	s.began = time.Now()
	s.mu.Unlock()
	s.o.Tokens.Adopting()
	if err := s.adopt(ctx); err != nil {
		return err
	}
	s.o.Tokens.Adopted()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.pollLoop(gctx) })
	g.Go(func() error { return s.eventLoop(gctx) })
	err := g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// RunAndRestart keeps the session running while ctx lasts: a run that fails (the executor could
// not list its attempts) is started again after a backoff, instead of taking the agent down.
func (s *Session) RunAndRestart(ctx context.Context) {
	back := retry.Backoff{Base: time.Second, Max: 30 * time.Second}
	for ctx.Err() == nil {
		if err := s.Run(ctx); err != nil && ctx.Err() == nil {
			wait := back.Next(0)
			s.log.Error("session failed; restarting it", "err", err, "wait", wait.String())
			_ = retry.Sleep(ctx, wait)
		}
	}
}

// adopt takes over whatever the executor holds: attempts of an earlier agent process, or of the
// previous leader. Their job tokens are recovered so the state backend admits their job runners'
// requests again.
func (s *Session) adopt(ctx context.Context) error {
	n, err := s.adoptUnregistered(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		s.o.Metrics.Readopted.Add(float64(n))
		s.log.Info("re-adopted running attempts", "count", n)
	}
	return nil
}

// adoptUnregistered registers the grant of every running attempt the executor holds whose job
// token the registry lacks, and returns how many running attempts it holds. Run at the start of
// a term and before every poll: the previous leader may still create a Job whose claim it was
// answering when it stepped down, after this term's first adoption, and its job runner must get
// its state all the same.
func (s *Session) adoptUnregistered(ctx context.Context) (int, error) {
	statuses, err := s.o.Executor.List(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, st := range statuses {
		if st.Terminal() {
			continue
		}
		if err := validHeld(api.HeldAttempt{DeploymentID: st.DeploymentID, Attempt: st.Attempt, Fencing: st.Fencing}); err != nil {
			continue // left out of the polls too (pollRequest says why)
		}
		s.mu.Lock()
		att := s.attempts[st.Key()]
		done := att != nil && att.acked // its finished event acknowledged, or forgotten: it is being cleaned up
		s.mu.Unlock()
		if done {
			continue
		}
		n++
		if s.o.Tokens.Has(st.DeploymentID, st.Attempt) {
			continue
		}
		s.adoptAttempt(ctx, st)
	}
	return n, nil
}

// adoptAttempt recovers the job token of one attempt the executor holds and registers its grant.
func (s *Session) adoptAttempt(ctx context.Context, st executor.AttemptStatus) {
	g := jobtoken.Grant{StateKey: st.StateKey, StateNamespace: st.StateNamespace, Operation: st.Operation, PlanOf: st.PlanOf}
	token, err := s.o.Executor.JobToken(ctx, st.DeploymentID, st.Attempt)
	if err != nil {
		// Re-claiming is idempotent for the same instance and returns the same token.
		c, cerr := s.o.Client.Claim(ctx, st.DeploymentID, api.ClaimRequest{Attempt: st.Attempt, Instance: s.o.Instance})
		if cerr != nil {
			s.log.Warn("cannot recover the job token of an adopted attempt; its state requests will be refused", "deployment_id", st.DeploymentID, "attempt", st.Attempt, "err", errors.Join(err, cerr))
			return
		}
		g = grantOf(c)
		token = c.JobToken
		// The token was not stored with the attempt (the agent stopped between creating the
		// Job and its token Secret): starting again adopts the Job and stores the token, so
		// the job pod waiting for it goes on.
		if err := s.o.Executor.Start(ctx, c, s.o.Tokens.StateToken(c.DeploymentID, c.Attempt, c.JobToken)); err != nil {
			s.log.Warn("cannot store the recovered job token with an adopted attempt", "deployment_id", st.DeploymentID, "attempt", st.Attempt, "err", err)
		}
	}
	g.Token = token
	s.o.Tokens.Put(st.DeploymentID, st.Attempt, g)
}

// grantOf is the state access a claim grants its job runner.
func grantOf(c *api.Claim) jobtoken.Grant {
	g := jobtoken.Grant{Token: c.JobToken, StateKey: c.Placement.StateKey, StateNamespace: c.Placement.KubernetesStateNamespace(), Operation: c.Placement.Operation,
		PlanTTL: time.Duration(c.Placement.PlanTTLSeconds) * time.Second}
	if c.Placement.ApplyPlan != nil {
		g.PlanOf = c.Placement.ApplyPlan.DeploymentID
	}
	return g
}

func (s *Session) state(k executor.AttemptKey) *attemptState {
	att := s.attempts[k]
	if att == nil {
		att = &attemptState{}
		s.attempts[k] = att
	}
	return att
}
