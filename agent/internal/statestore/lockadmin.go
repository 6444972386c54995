package statestore

// What an operator sees of the locks and does with them: a lock's holder, its last break,
// every lock of the namespace, and force-unlock with a record of who broke whose lock and why.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// LockBreak records a force-unlock: whose lock was broken (Holder), who broke it and why, and
// when. It stays on the lock's Lease until the next break.
type LockBreak struct {
	Holder string    `json:"holder"`
	Pod    string    `json:"pod,omitempty"`
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Live is whether the lock had not expired when it was broken: its holder may still have
	// been running.
	Live bool `json:"live"`
}

// ForceUnlock releases the lock of key whoever holds it (ForceUnlockFor with no one named).
func (s *Store) ForceUnlock(ctx context.Context, key string) (*HeldLock, error) {
	return s.ForceUnlockFor(ctx, key, LockBreak{})
}

// ForceUnlockFor releases the lock of key whoever holds it and returns the lock that was released
// (nil and ErrNotLocked when the state was not locked), recording brk (its By and Reason; the
// rest is filled in) on the Lease in the same update. It is the recovery path the CLIs'
// force-unlock command reaches; the previous holder's later writes are refused because its
// lock ID no longer holds the lock.
func (s *Store) ForceUnlockFor(ctx context.Context, key string, brk LockBreak) (*HeldLock, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	leases := s.client.CoordinationV1().Leases(s.namespace)
	for range lockRetries {
		lease, held, err := s.getLease(ctx, key)
		if err != nil {
			return nil, err
		}
		if held == nil {
			return nil, fmt.Errorf("state %q: %w", key, ErrNotLocked)
		}
		now := s.opts.Now()
		brk.Holder, brk.Pod, brk.At, brk.Live = held.Info.Holder, held.Info.Pod, now.UTC(), !held.Expired(now)
		raw, err := json.Marshal(brk)
		if err != nil {
			return nil, err
		}
		release(lease)
		lease.Annotations[AnnotationLockBreak] = string(raw)
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("state %q: force-unlock: %w", key, err)
		}
		s.log.LogAttrs(ctx, slog.LevelWarn, "state force-unlocked", slog.String("state_key", key),
			slog.String("lock_id", held.Info.ID), slog.String("holder", held.Info.Holder),
			slog.String("by", brk.By), slog.String("reason", brk.Reason), slog.Bool("live", brk.Live))
		return held, nil
	}
	return nil, fmt.Errorf("state %q: force-unlock: %w (gave up after %d tries)", key, ErrConflict, lockRetries)
}

// LockInfo returns the current lock of key, or nil when it is not locked. An expired lock that
// nobody took over is still returned (check HeldLock.Expired).
func (s *Store) LockInfo(ctx context.Context, key string) (*HeldLock, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	_, held, err := s.getLease(ctx, key)
	return held, err
}

// LastBreak returns the last force-unlock recorded on key's lock, or nil when there was none.
func (s *Store) LastBreak(ctx context.Context, key string) (*LockBreak, error) {
	_, b, err := s.LockRecord(ctx, key)
	return b, err
}

// LockRecord returns, from one read of key's Lease, its lock (nil when not locked) and the last
// force-unlock recorded on it (nil when there was none).
func (s *Store) LockRecord(ctx context.Context, key string) (*HeldLock, *LockBreak, error) {
	if err := ValidateKey(key); err != nil {
		return nil, nil, err
	}
	l, held, err := s.getLease(ctx, key)
	if err != nil || l == nil || l.Annotations[AnnotationLockBreak] == "" {
		return held, nil, err
	}
	var b LockBreak
	if err := json.Unmarshal([]byte(l.Annotations[AnnotationLockBreak]), &b); err != nil {
		return held, nil, fmt.Errorf("state %q: lock break record unreadable: %w", key, err)
	}
	return held, &b, nil
}

// KeyedLock is one entry of ListLocks.
type KeyedLock struct {
	Key  string
	Lock HeldLock
}

// ListLocks returns every held lock of the namespace (expired ones included), for an agent
// that restarts and has to decide which locks to keep renewing.
func (s *Store) ListLocks(ctx context.Context) ([]KeyedLock, error) {
	var out []KeyedLock
	err := s.eachOfRole(ctx, roleLock, 500, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return s.client.CoordinationV1().Leases(s.namespace).List(ctx, opts)
	}, func(obj runtime.Object) error {
		if l, ok := obj.(*coordinationv1.Lease); ok && s.inScope(l.Labels) {
			if held := heldFromLease(l); held != nil {
				out = append(out, KeyedLock{Key: l.Annotations[AnnotationStateKey], Lock: *held})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	return out, nil
}
