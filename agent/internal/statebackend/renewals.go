package statebackend

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

// renewal is one lock the handler keeps alive (see HolderLiveness).
type renewal struct {
	key, lockID, holder string
	cancel              context.CancelFunc
}

// ResumeRenewals adopts the unexpired locks found in the store whose holders HolderLiveness
// reports alive, and renews them from now on. An agent calls it after it starts (or becomes
// leader), so that locks of attempts that outlived the previous agent process do not expire
// under them. Without HolderLiveness it does nothing: locks of unknown liveness are left to expire.
func (h *Handler) ResumeRenewals(ctx context.Context) (int, error) {
	if h.liveness == nil {
		return 0, nil
	}
	locks, err := h.store.ListLocks(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	now := time.Now()
	for _, l := range locks {
		if l.Lock.Expired(now) || l.Key == "" {
			continue
		}
		alive, err := h.liveness.HolderAlive(ctx, l.Lock.Info.Holder)
		if err != nil || !alive {
			continue
		}
		h.startRenewal(l.Key, l.Lock.Info.ID, l.Lock.Info.Holder)
		n++
	}
	return n, nil
}

func (h *Handler) startRenewal(key, lockID, holder string) {
	ctx, cancel := context.WithCancel(h.baseCtx)
	r := &renewal{key: key, lockID: lockID, holder: holder, cancel: cancel}
	h.mu.Lock()
	if h.baseCtx.Err() != nil {
		h.mu.Unlock()
		cancel()
		return
	}
	if old := h.renewals[key]; old != nil {
		if old.lockID == lockID {
			h.mu.Unlock()
			cancel()
			return
		}
		old.cancel()
	}
	h.renewals[key] = r
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		defer h.forget(r)
		h.renew(ctx, r)
	}()
}

// releaseHolder unlocks, in the background, every lock holder still holds through this handler:
// its attempt has ended.
func (h *Handler) releaseHolder(holder string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.baseCtx.Err() != nil {
		return // closed: the locks are the next leader's to renew or release
	}
	for _, r := range h.renewals {
		if r.holder != holder {
			continue
		}
		r.cancel()
		delete(h.renewals, r.key)
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			ctx, cancel := context.WithTimeout(h.baseCtx, 30*time.Second)
			defer cancel()
			attrs := []slog.Attr{slog.String("state_key", r.key), slog.String("lock_id", r.lockID), slog.String("holder", r.holder)}
			if err := h.store.Unlock(ctx, r.key, r.lockID, r.holder); err != nil && !errors.Is(err, statestore.ErrNotLocked) && !errors.Is(err, statestore.ErrLockMismatch) {
				h.log.LogAttrs(ctx, slog.LevelWarn, "could not release the lock of a finished attempt; it expires instead", append(attrs, slog.Any("err", err))...)
				return
			}
			h.log.LogAttrs(ctx, slog.LevelInfo, "released the lock of a finished attempt", attrs...)
			h.stateChanged(r.key)
		}()
	}
}

func (h *Handler) stopRenewal(key, lockID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.renewals[key]; r != nil && (lockID == "" || r.lockID == lockID) {
		r.cancel()
		delete(h.renewals, key)
	}
}

func (h *Handler) forget(r *renewal) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.renewals[r.key] == r {
		delete(h.renewals, r.key)
	}
	r.cancel()
}

// renew keeps one lock alive while its holder is (see HolderLiveness and DefaultMaxLockHold).
func (h *Handler) renew(ctx context.Context, r *renewal) {
	t := time.NewTicker(h.renewEvery)
	defer t.Stop()
	started := time.Now()
	attrs := []slog.Attr{slog.String("state_key", r.key), slog.String("lock_id", r.lockID), slog.String("holder", r.holder)}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if h.liveness != nil {
			alive, err := h.liveness.HolderAlive(ctx, r.holder)
			if err == nil && !alive {
				h.log.LogAttrs(ctx, slog.LevelInfo, "lock holder is gone; its lock is left to expire", attrs...)
				return
			}
		} else if time.Since(started) > DefaultMaxLockHold {
			h.log.LogAttrs(ctx, slog.LevelWarn, "lock held longer than the maximum hold time; no longer renewed", attrs...)
			return
		}
		err := h.store.Renew(ctx, r.key, r.lockID)
		switch {
		case err == nil:
		case errors.Is(err, statestore.ErrLockMismatch):
			h.log.LogAttrs(ctx, slog.LevelWarn, "lock lost (force-unlocked or taken over); renewal stopped", attrs...)
			return
		case ctx.Err() != nil:
			return
		default:
			h.log.LogAttrs(ctx, slog.LevelWarn, "lock renewal failed; retrying", append(attrs, slog.Any("err", err))...)
		}
	}
}
