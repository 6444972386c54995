package statebackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// State operations the orchestrator hands the agent with its poll answers (show, diff, rollback
// of the versions a state keeps): the agent reads the contents here, in the cluster, with the
// same code as `outpost-agent state show|diff|rollback` (statestore.Contents, Diff, Rollback),
// and posts back names only. A rollback runs under the state's lock and is written as a new
// serial; the state report that follows shows the new version.

// OperationPoster posts the results of state operations (client.AgentClient does).
type OperationPoster interface {
	StateOperationResult(ctx context.Context, id string, res api.StateOperationResult) (*api.StateOperation, error)
}

// Bounds of running state operations.
const (
	// operationTimeout bounds one operation (reading two versions of a large state, or a
	// rollback's write) and the posting of its result.
	operationTimeout = time.Minute
	// operationsRemembered is how long the result of an operation is kept, to post it again
	// when the orchestrator offers the operation again (its answer to the first post was lost).
	operationsRemembered = 10 * time.Minute
	operationPostTries   = 5
)

// Operations runs the state operations offered to the agent, each once: an operation offered
// again while it runs is skipped, and one offered again after it ran gets its result posted
// again (the orchestrator keeps the first result).
type Operations struct {
	handlerFor func(ns string) (*Handler, error)
	post       OperationPoster
	log        *slog.Logger

	mu   sync.Mutex
	seen map[string]*operationRun
	wg   sync.WaitGroup
}

type operationRun struct {
	result *api.StateOperationResult // nil while it runs
	at     time.Time
}

// NewOperations returns the runner of state operations over the handlers handlerFor gives per
// namespace, posting results through post.
func NewOperations(handlerFor func(ns string) (*Handler, error), post OperationPoster, log *slog.Logger) *Operations {
	if log == nil {
		log = slog.Default()
	}
	return &Operations{handlerFor: handlerFor, post: post, log: log.With("component", "state"), seen: map[string]*operationRun{}}
}

// Operations returns the runner of state operations over the namespaces this server keeps
// states in.
func (s *Server) Operations(post OperationPoster) *Operations {
	return NewOperations(func(ns string) (*Handler, error) {
		if ns == "" || !s.serves(ns) {
			return nil, &api.StateOperationError{Code: api.StateOpRefused, Message: fmt.Sprintf(
				"this agent keeps states only in namespace %q (--state-namespace), not in %q: point the state storage at %q", s.o.FallbackNamespace, ns, s.o.FallbackNamespace)}
		}
		return s.handler(ns)
	}, post, s.log)
}

// RefusedOperations answers every state operation as refused, saying why: the operations of an
// agent that serves no state backend.
func RefusedOperations(why string, post OperationPoster, log *slog.Logger) *Operations {
	return NewOperations(func(string) (*Handler, error) {
		return nil, &api.StateOperationError{Code: api.StateOpRefused, Message: "this agent serves no state backend: " + why}
	}, post, log)
}

// Offered starts the operations of a poll answer that are new and returns at once.
func (o *Operations) Offered(ctx context.Context, ops []api.StateOperationOffer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	for id, r := range o.seen {
		if r.result != nil && now.Sub(r.at) > operationsRemembered {
			delete(o.seen, id)
		}
	}
	for _, op := range ops {
		r := o.seen[op.ID]
		switch {
		case r == nil:
			r = &operationRun{at: now}
			o.seen[op.ID] = r
			o.wg.Add(1)
			go func() {
				defer o.wg.Done()
				res := o.run(ctx, op)
				o.mu.Lock()
				r.result, r.at = &res, time.Now()
				o.mu.Unlock()
				o.send(ctx, op, res)
			}()
		case r.result != nil:
			res := *r.result
			o.wg.Add(1)
			go func() { defer o.wg.Done(); o.send(ctx, op, res) }()
		}
	}
}

// Wait waits for the operations started so far (tests; shutdown).
func (o *Operations) Wait() { o.wg.Wait() }

// run runs one operation in the cluster.
func (o *Operations) run(ctx context.Context, op api.StateOperationOffer) api.StateOperationResult {
	ctx, cancel := context.WithTimeout(ctx, operationTimeout)
	defer cancel()
	log := o.log.With("state_operation", op.ID, "kind", op.Kind, "state_key", op.StateKey, "namespace", op.Namespace)
	h, err := o.handlerFor(op.Namespace)
	if err != nil {
		log.Warn("state operation refused", "err", err)
		return failedResult(err)
	}
	res := h.RunOperation(ctx, op)
	if res.Error != nil {
		log.Warn("state operation failed", "code", res.Error.Code, "err", res.Error.Message)
	} else {
		log.Info("state operation done", "generation", op.Generation, "to_generation", op.ToGeneration, "requested_by", op.RequestedBy)
	}
	return res
}

// send posts a result, retrying a few times on top of the client's own retries; after that the
// orchestrator offers the operation again (it has no result) and the result goes once more.
func (o *Operations) send(ctx context.Context, op api.StateOperationOffer, res api.StateOperationResult) {
	for try := 1; ; try++ {
		pctx, cancel := context.WithTimeout(ctx, operationTimeout)
		_, err := o.post.StateOperationResult(pctx, op.ID, res)
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		if api.Permanent(err) || try == operationPostTries {
			o.log.Warn("could not post the result of a state operation", "state_operation", op.ID, "err", err)
			return
		}
		if !sleepCtx(ctx, time.Duration(try)*time.Second) {
			return
		}
	}
}

// RunOperation runs a state operation on this handler's states: reads what it needs here and
// answers with names only.
func (h *Handler) RunOperation(ctx context.Context, op api.StateOperationOffer) api.StateOperationResult {
	var out api.StateOperationResult
	switch op.Kind {
	case api.StateOperationShow:
		c, err := h.store.Contents(ctx, op.StateKey, op.Generation)
		if err != nil {
			return failedResult(err)
		}
		out.Show = &c.StateContents
	case api.StateOperationDiff:
		a, err := h.store.Contents(ctx, op.StateKey, op.Generation)
		if err != nil {
			return failedResult(err)
		}
		b, err := h.store.Contents(ctx, op.StateKey, op.ToGeneration)
		if err != nil {
			return failedResult(err)
		}
		d := statestore.Diff(a, b)
		out.Diff = &d
	case api.StateOperationRollback:
		g, err := h.store.Rollback(ctx, op.StateKey, op.Generation, statestore.RollbackOptions{By: op.RequestedBy, Reason: op.Reason})
		h.stateChanged(op.StateKey) // a refused rollback may still have found the lock changed
		if err != nil {
			return failedResult(err)
		}
		out.Rollback = &api.StateRolledBack{Generation: g.Generation, Serial: g.Serial}
	default:
		return failedResult(&api.StateOperationError{Code: api.StateOpFailed, Message: fmt.Sprintf(
			"this agent does not know state operations of kind %q; upgrade it", op.Kind)})
	}
	out.Status = api.StateOperationDone
	return out
}

// failedResult types an error of the state store for the orchestrator. The messages name keys,
// generations and lock holders, never a value of the state.
func failedResult(err error) api.StateOperationResult {
	out := api.StateOperationResult{Status: api.StateOperationFailed}
	var opErr *api.StateOperationError
	var locked *statestore.LockedError
	switch {
	case errors.As(err, &opErr):
		out.Error = opErr
	case errors.As(err, &locked):
		l := reportedLock(&locked.Lock)
		out.Error = &api.StateOperationError{Code: api.StateOpLocked, Lock: l, Message: fmt.Sprintf(
			"state %q is locked by %s (since %s, expires %s unless renewed): wait for its run to end, or break the lock (outpost-agent state force-unlock --reason), then ask again",
			locked.Key, holderName(l), l.AcquiredAt.UTC().Format(time.RFC3339), l.ExpiresAt.UTC().Format(time.RFC3339))}
	case errors.Is(err, statestore.ErrNotFound):
		out.Error = &api.StateOperationError{Code: api.StateOpNotFound, Message: err.Error() + " (outpost state versions lists the generations kept)"}
	case errors.Is(err, statestore.ErrClientEncrypted):
		out.Error = &api.StateOperationError{Code: api.StateOpEncrypted, Message: err.Error()}
	default:
		out.Error = &api.StateOperationError{Code: api.StateOpFailed, Message: err.Error()}
	}
	return out
}

// holderName names a lock's holder: its attempt and pod when it is a deployment's.
func holderName(l *api.StateLock) string {
	if l.DeploymentID == "" {
		return l.Holder
	}
	s := fmt.Sprintf("deployment %s attempt %d", l.DeploymentID, l.Attempt)
	if l.Pod != "" {
		s += " (pod " + l.Pod + ")"
	}
	return s
}
