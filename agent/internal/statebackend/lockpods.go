package statebackend

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

// Which pod holds a lock, and the release of locks whose pod is gone.
//
// A state lock names its holder, the attempt (job/<deployment>/<attempt>), and, when the agent's
// executor runs attempts in pods, the job pod the attempt's CLI runs in. The CLI in that pod is
// the only process that can use the lock: once the pod has ended or is gone, nobody will write
// or unlock with it. The agent releases the locks of finished attempts as soon as it sees them
// end (releaseHolder); what it could not see (it was restarted, or lost leadership, while the
// attempt ended) the sweep finds: every LockSweepEvery the handler lists the locks of its
// namespace and releases each one whose holder's attempt this agent no longer holds and whose
// attempt has no pod left, among the locks this runner's agent granted. So a lock outlives its
// holder's pod by at most LockSweepEvery (plus the informer's lag behind the API server) while a
// handler serves its namespace (handlers start with the first claim, adoption or request there),
// not the lock duration, and a live holder's lock is never released by the sweep: its attempt
// still has its pod.

// AttemptPods names the pod an attempt's CLI runs in ("" when it has none: not started, ended,
// or gone). The kubernetes executor implements it; without one, locks name no pod and only
// expire.
type AttemptPods interface {
	AttemptPod(ctx context.Context, deploymentID string, attempt int) (string, error)
}

// WithAttemptPods makes the handler name each lock's pod and release the locks whose pod is gone:
// only those it granted for runner, whose attempts it alone can judge (another runner's agent may
// keep states in the same namespace).
func WithAttemptPods(p AttemptPods, runner string) Option {
	return func(h *Handler) { h.pods, h.runner = p, runner }
}

// LockSweepEvery is how often the handler looks for locks whose holder's pod is gone, and so the
// bound on how long such a lock stays held.
const LockSweepEvery = 10 * time.Second

// lockSweepGrace spares locks taken moments ago, whose pod the informer may not show yet.
const lockSweepGrace = 10 * time.Second

// holderPod is the pod of holder's attempt, or "" (best effort: a lock is not refused for it).
func (h *Handler) holderPod(ctx context.Context, holder string) string {
	dep, attempt := parseHolder(holder)
	if h.pods == nil || dep == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pod, err := h.pods.AttemptPod(ctx, dep, attempt)
	if err != nil {
		h.log.LogAttrs(ctx, slog.LevelDebug, "could not name the pod of a lock holder", slog.String("holder", holder), slog.Any("err", err))
	}
	return pod
}

// runLockSweep releases, every sweepEvery, the locks whose holder's pod is gone.
func (h *Handler) runLockSweep(ctx context.Context) {
	t := time.NewTicker(h.sweepEvery)
	defer t.Stop()
	var plansSwept time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.sweepLocks(ctx); err != nil && ctx.Err() == nil {
			h.log.LogAttrs(ctx, slog.LevelWarn, "could not look for locks whose holder is gone; trying again", slog.Any("err", err))
		}
		// Expired plan files go within PlanSweepEvery of their expiry.
		if time.Since(plansSwept) >= PlanSweepEvery {
			plansSwept = time.Now()
			h.sweepPlans(ctx)
		}
	}
}

// sweepLocks releases the locks of attempts this agent does not hold whose pod is gone.
func (h *Handler) sweepLocks(ctx context.Context) error {
	locks, err := h.store.ListLocks(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	for _, l := range locks {
		info := l.Lock.Info
		dep, attempt := parseHolder(info.Holder)
		if dep == "" || l.Key == "" || info.Runner == "" || info.Runner != h.runner || now.Sub(l.Lock.AcquireTime) < lockSweepGrace {
			continue // an operator's lock, another runner's, one of an older agent, or one taken moments ago
		}
		if h.liveness != nil {
			if alive, err := h.liveness.HolderAlive(ctx, info.Holder); err != nil || alive {
				continue
			}
		}
		pod, err := h.pods.AttemptPod(ctx, dep, attempt)
		if err != nil || pod != "" {
			continue
		}
		// Unlock names the lock ID and holder, so a lock taken over meanwhile stays.
		err = h.store.Unlock(ctx, l.Key, info.ID, info.Holder)
		attrs := []slog.Attr{slog.String("state_key", l.Key), slog.String("lock_id", info.ID), slog.String("holder", info.Holder), slog.String("pod", info.Pod)}
		switch {
		case errors.Is(err, statestore.ErrNotLocked), errors.Is(err, statestore.ErrLockMismatch):
		case err != nil:
			h.log.LogAttrs(ctx, slog.LevelWarn, "could not release the lock of an attempt whose pod is gone", append(attrs, slog.Any("err", err))...)
		default:
			h.stopRenewal(l.Key, info.ID)
			h.log.LogAttrs(ctx, slog.LevelInfo, "released the lock of an attempt whose pod is gone", attrs...)
			h.stateChanged(l.Key)
		}
	}
	return nil
}
