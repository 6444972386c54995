// Package session is the agent's conversation with the orchestrator: the long poll that restates
// capacity and held jobs, claims of offered jobs, directives (cancel, forget), and the events and
// final reports of the jobs the executor runs. It is level-triggered: every pass rebuilds its
// picture from the executor's List, so an agent that restarts, or a message that got lost, heals
// on the next pass without any state of its own surviving.
package session

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/health"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobtoken"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/metrics"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// Orchestrator is the agent side of the API (client.AgentClient).
type Orchestrator interface {
	Poll(ctx context.Context, req api.PollRequest) (*api.PollResponse, error)
	Claim(ctx context.Context, jobID string, req api.ClaimRequest) (*api.Claim, error)
	Event(ctx context.Context, jobID string, req api.EventRequest) (*api.EventResponse, error)
}

// Options configure a session.
type Options struct {
	Client   Orchestrator
	Executor executor.Executor
	// Tokens receives the job token of every job claimed or adopted, for the state backend.
	Tokens  *jobtoken.Registry
	Metrics *metrics.Metrics
	Health  *health.State
	Logger  *slog.Logger
	// Instance names this agent (pod name) in claims.
	Instance string
	Version  string
	// MaxConcurrency caps jobs below the orchestrator's limit; 0 follows the orchestrator.
	MaxConcurrency int
	PollWait       time.Duration
	CancelGrace    time.Duration
	// FinalTimeout bounds the reports and cleanups that run on after the session is stopped.
	FinalTimeout time.Duration
	// ReportBackoff paces retries of undelivered reports (default 1 s … 60 s).
	ReportBackoff retry.Backoff
	// PollBackoff paces polls after errors (default 1 s … 30 s).
	PollBackoff retry.Backoff
}

// Session runs while this agent leads.
type Session struct {
	o   Options
	log *slog.Logger

	mu       sync.Mutex
	jobs     map[executor.Key]*jobState
	starting map[executor.Key]bool
	orchMax  int
	// orchKnown is false until the first poll told the runner's max_concurrency.
	orchKnown bool
	inflight  sync.WaitGroup
	// kick wakes the report loop early.
	kick *executor.Notifier
}

// jobState is what the session remembers about a job between passes. All of it can be lost: a
// new session resends events (the orchestrator deduplicates them by seq) and reports.
type jobState struct {
	fencing     int64
	startedSent bool
	acked       bool // the final report was acknowledged
	refused     bool // the orchestrator refused the report for good; wait for forget
	cleaned     bool
	seen        bool
	busy        bool // a goroutine is sending for this job
	back        retry.Backoff
	nextTry     time.Time
	// report is a final report of a job the executor never got to hold (start failed).
	report []byte
}

// Seq numbers of events. They are derived, not counted, so an agent that restarts sends
// byte-identical events and the orchestrator's (job, attempt, seq) dedup makes it exactly once.
const (
	SeqStarted  = 1
	SeqFinished = 2
)

// New returns a session.
func New(o Options) *Session {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Tokens == nil {
		o.Tokens = jobtoken.New()
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New(o.Version)
	}
	if o.Health == nil {
		o.Health = health.NewState(o.PollWait, nil)
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
	if o.ReportBackoff.Base == 0 {
		o.ReportBackoff = retry.Backoff{Base: time.Second, Max: 60 * time.Second}
	}
	if o.PollBackoff.Base == 0 {
		o.PollBackoff = retry.Backoff{Base: time.Second, Max: 30 * time.Second}
	}
	return &Session{o: o, log: o.Logger.With("component", "session"), jobs: map[executor.Key]*jobState{}, starting: map[executor.Key]bool{}, kick: executor.NewNotifier()}
}

// Run polls and reports until ctx ends (shutdown or lost leadership). Reports already being sent
// finish under their own timeout; running jobs are left alone for the next leader.
func (s *Session) Run(ctx context.Context) error {
	if err := s.adopt(ctx); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.pollLoop(gctx) })
	g.Go(func() error { return s.reportLoop(gctx) })
	err := g.Wait()
	s.inflight.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// RunAndRestart keeps the session running while ctx lasts: a run that fails (the executor could
// not list its jobs) is started again after a backoff, instead of taking the agent down.
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

// adopt takes over whatever the executor holds: jobs of an earlier agent process, or of the
// previous leader. Their tokens are recovered so the state backend admits their requests again.
func (s *Session) adopt(ctx context.Context) error {
	statuses, err := s.o.Executor.List(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, st := range statuses {
		if st.Terminal() {
			continue
		}
		n++
		if s.o.Tokens.Has(st.JobID, st.Attempt) {
			continue
		}
		token, err := s.o.Executor.JobToken(ctx, st.JobID, st.Attempt)
		stateKey := st.StateKey
		if err != nil {
			// Re-claiming is idempotent for the same instance and returns the same token.
			c, cerr := s.o.Client.Claim(ctx, st.JobID, api.ClaimRequest{Attempt: st.Attempt, Instance: s.o.Instance})
			if cerr != nil {
				s.log.Warn("cannot recover the token of an adopted job; its state requests will be refused", "job_id", st.JobID, "attempt", st.Attempt, "err", errors.Join(err, cerr))
				continue
			}
			token, stateKey = c.JobToken, c.Spec.StateKey
		}
		s.o.Tokens.Put(st.JobID, st.Attempt, token, stateKey, st.StateNamespace)
	}
	if n > 0 {
		s.o.Metrics.Readopted.Add(float64(n))
		s.log.Info("re-adopted running jobs", "count", n)
	}
	return nil
}

func (s *Session) state(k executor.Key) *jobState {
	js := s.jobs[k]
	if js == nil {
		js = &jobState{back: s.o.ReportBackoff}
		s.jobs[k] = js
	}
	return js
}
