package statebackend

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Reports to the orchestrator: what the orchestrator may know of the states this handler serves
// is each state's kept versions (serial, lineage, size, resource count, writer, time) and its
// lock holder, never a byte of the state itself. A state is reported after every request that
// changed it (a write, a delete, a lock, an unlock) and after the agent released a finished
// attempt's lock; every state of the namespace is reported once when the handler starts. A report
// restates the whole of a state, so a lost one heals with the next, and one that failed is sent
// again with backoff.

// StateReporter sends state reports to the orchestrator (client.AgentClient does).
type StateReporter interface {
	ReportStates(ctx context.Context, rep api.StateReport) error
}

// WithReporter makes the handler report its states' versions and locks through r.
func WithReporter(r StateReporter) Option { return func(h *Handler) { h.reporter = r } }

// Bounds of the reporting.
const (
	// reportDelay gathers the changes of a CLI run's requests (lock, write, unlock) into one report.
	reportDelay       = 250 * time.Millisecond
	reportBackoffMin  = time.Second
	reportBackoffMax  = time.Minute
	reportTimeout     = 30 * time.Second
	reportStatesBatch = 20 // states of up to 100 versions each, well under the 8 MiB route limit
)

// reports is the queue of state keys to report.
type reports struct {
	mu    sync.Mutex
	dirty map[string]bool
	all   bool // report every state of the namespace
	wake  chan struct{}
}

func newReports() *reports {
	return &reports{dirty: map[string]bool{}, all: true, wake: make(chan struct{}, 1)}
}

func (q *reports) mark(keys ...string) {
	q.mu.Lock()
	for _, k := range keys {
		q.dirty[k] = true
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns the keys to report now, and whether every state is to be listed first.
func (q *reports) take() (keys []string, all bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	keys, all = slices.Sorted(maps.Keys(q.dirty)), q.all
	clear(q.dirty)
	q.all = false
	return keys, all
}

// stateChanged queues key for a report (no-op without a reporter).
func (h *Handler) stateChanged(key string) {
	if h.reports != nil && key != "" {
		h.reports.mark(key)
	}
}

// runReports sends reports until the handler is closed.
func (h *Handler) runReports(ctx context.Context) {
	backoff := reportBackoffMin
	for {
		keys, all := h.reports.take()
		err := h.reportNow(ctx, keys, all)
		switch {
		case ctx.Err() != nil:
			return
		case api.Permanent(err):
			// The orchestrator will not take these reports as they are (an orchestrator of an
			// older release has no such route; a runner whose state storage is not this
			// namespace): sending them again cannot help. The next change tries anew.
			h.log.LogAttrs(ctx, slog.LevelWarn, "the orchestrator refused the state report; the states are not shown there",
				slog.Int("states", len(keys)), slog.Any("err", err))
		case err != nil:
			h.log.LogAttrs(ctx, slog.LevelWarn, "could not report states to the orchestrator; retrying",
				slog.Int("states", len(keys)), slog.Bool("all", all), slog.Duration("retry_in", backoff), slog.Any("err", err))
			h.reports.mu.Lock()
			h.reports.all = h.reports.all || all
			for _, k := range keys {
				h.reports.dirty[k] = true
			}
			h.reports.mu.Unlock()
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, reportBackoffMax)
			continue
		}
		backoff = reportBackoffMin
		select {
		case <-ctx.Done():
			return
		case <-h.reports.wake:
		}
		if !sleepCtx(ctx, reportDelay) {
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// reportNow reports keys (and every state of the namespace when all is set), a batch at a time.
func (h *Handler) reportNow(ctx context.Context, keys []string, all bool) error {
	if all {
		infos, err := h.store.List(ctx)
		if err != nil {
			return err
		}
		locks, err := h.store.ListLocks(ctx)
		if err != nil {
			return err
		}
		set := map[string]bool{}
		for _, k := range keys {
			set[k] = true
		}
		for _, i := range infos {
			set[i.Key] = true
		}
		for _, l := range locks {
			set[l.Key] = true
		}
		keys = slices.Sorted(maps.Keys(set))
	}
	var batch []api.ReportedState
	send := func() error {
		if len(batch) == 0 {
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, reportTimeout)
		defer cancel()
		err := h.reporter.ReportStates(rctx, api.StateReport{Namespace: h.store.Namespace(), States: batch})
		batch = nil
		return err
	}
	for _, key := range keys {
		if api.ValidateStateKey("state_key", key) != nil {
			continue // a key no deployment can name (states imported by an operator)
		}
		st, err := h.reportedState(ctx, key)
		if err != nil {
			return err
		}
		if batch = append(batch, st); len(batch) == reportStatesBatch {
			if err := send(); err != nil {
				return err
			}
		}
	}
	return send()
}

// reportedState is what the orchestrator may know of one state: metadata from the manifest and
// the lock's Lease, nothing read from the chunks.
func (h *Handler) reportedState(ctx context.Context, key string) (api.ReportedState, error) {
	out := api.ReportedState{StateKey: key, Versions: []api.StateVersion{}}
	history, err := h.store.History(ctx, key)
	switch {
	case errors.Is(err, statestore.ErrNotFound):
	case errors.Is(err, statestore.ErrCorrupt):
		h.log.LogAttrs(ctx, slog.LevelWarn, "state manifest unreadable; reported without versions", slog.String("state_key", key), slog.Any("err", err))
	case err != nil:
		return out, err
	}
	for _, g := range history {
		dep, attempt := parseHolder(g.Writer)
		out.Versions = append(out.Versions, api.StateVersion{
			Generation: g.Generation, Serial: g.Serial, Lineage: g.Lineage, Size: g.Size, Resources: g.Resources,
			DeploymentID: dep, Attempt: attempt, Source: truncate(g.Source, maxReportedText), WrittenAt: g.UpdatedAt,
		})
	}
	held, brk, err := h.store.LockRecord(ctx, key)
	if err != nil {
		return out, err
	}
	if brk != nil {
		out.LastLockBreak = &api.StateLockBreak{Holder: brk.Holder, Pod: brk.Pod, By: brk.By, Reason: brk.Reason, At: brk.At, Live: brk.Live}
	}
	if held != nil {
		out.Lock = reportedLock(held)
	}
	return out, nil
}

// reportedLock is what the orchestrator may know of a held lock: its holder, never the CLI's
// free-text lock info.
func reportedLock(held *statestore.HeldLock) *api.StateLock {
	dep, attempt := parseHolder(held.Info.Holder)
	return &api.StateLock{
		DeploymentID: dep, Attempt: attempt, Pod: held.Info.Pod, Holder: truncate(held.Info.Holder, maxReportedText),
		Operation:  knownOperation(held.Info.Operation),
		AcquiredAt: held.AcquireTime, ExpiresAt: held.Expires(),
	}
}

// maxReportedText is the most bytes of a text field of a state report the orchestrator takes
// (api.StateReport.Validate): a rollback's source holds the operator's reason, which may be
// longer.
const maxReportedText = 256

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n-len("…")]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// parseHolder reads the deployment and attempt out of a holder or writer "job/<id>/<attempt>"
// (jobtoken.Holder); anything else (an operator's) names neither.
func parseHolder(holder string) (deploymentID string, attempt int) {
	rest, ok := strings.CutPrefix(holder, "job/")
	if !ok {
		return "", 0
	}
	id, n, ok := strings.Cut(rest, "/")
	a, err := strconv.Atoi(n)
	if !ok || err != nil || a < 1 {
		return "", 0
	}
	return id, a
}

// knownOperation passes on the lock operations the CLIs send and nothing else: the field is the
// holder CLI's free text.
func knownOperation(op string) string {
	switch op {
	case "OperationTypeApply", "OperationTypePlan", "OperationTypeRefresh", "OperationTypeInvalid":
		return op
	}
	return ""
}
