package statestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxLockInfoSize bounds the lock info kept in the Lease annotation (objects allow 256 KiB of
// annotations in total; a lock info is normally ~300 bytes).
const maxLockInfoSize = 16 << 10

const lockRetries = 8

// LockInfo is the Terraform/OpenTofu lock info. Its JSON has exactly the field names the CLIs
// send in a LOCK request and parse from a 409/423 response, so it passes through unchanged.
type LockInfo struct {
	// ID is the lock ID the CLI generated (a UUID); it must be presented to unlock, and with
	// locked writes (`?ID=`).
	ID        string
	Operation string
	Info      string
	Who       string
	Version   string
	Created   time.Time
	Path      string
	// Holder is Outpost's addition: who holds the lock in the agent's terms (the deployment id
	// and attempt, as returned by the state backend's Authorizer). It becomes the Lease's
	// holderIdentity; when empty, ID is used. The CLIs ignore the extra JSON field.
	Holder string `json:",omitempty"`
	// Pod is Outpost's addition too: the job pod the holder runs in, as the agent found it
	// (never what the CLI sent), when it took the lock.
	Pod string `json:",omitempty"`
	// Runner is the runner whose agent granted the lock: only that agent can tell whether the
	// holder's attempt still runs (agents of two runners may keep states in one namespace).
	Runner string `json:",omitempty"`
}

// HeldLock is a lock as stored in the Lease.
type HeldLock struct {
	Info        LockInfo
	AcquireTime time.Time
	RenewTime   time.Time
	Duration    time.Duration
}

// Expires is when the lock expires unless renewed.
func (h HeldLock) Expires() time.Time { return h.RenewTime.Add(h.Duration) }

// Expired reports whether the lock has expired at now (and may be taken over).
func (h HeldLock) Expired(now time.Time) bool { return now.After(h.Expires()) }

// Lock takes the lock of key for info (info.ID is required). It succeeds if the state is
// unlocked, if the previous lock expired (renewTime + leaseDurationSeconds < now: the holder
// died or stopped renewing), or if info.ID already holds it (idempotent). Otherwise it returns a
// *LockedError (errors.Is ErrLocked) carrying the current holder's lock info. Every change of
// the Lease is a resourceVersion compare-and-swap, so two racing lockers cannot both win.
func (s *Store) Lock(ctx context.Context, key string, info LockInfo) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if info.ID == "" {
		return fmt.Errorf("state %q: lock info has no ID", key)
	}
	holder := info.Holder
	if holder == "" {
		holder = info.ID
	}
	raw, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if len(raw) > maxLockInfoSize {
		return fmt.Errorf("state %q: lock info is %d bytes, at most %d allowed", key, len(raw), maxLockInfoSize)
	}
	leases := s.client.CoordinationV1().Leases(s.namespace)
	for range lockRetries {
		lease, held, err := s.getLease(ctx, key)
		if err != nil {
			return err
		}
		now := s.opts.Now()
		create, what, previous := lease == nil, "take lock", held
		switch {
		case held != nil && held.Info.ID == info.ID:
			// Already ours (a retried LOCK): refresh it, so that it is good for a whole lock
			// duration from now like a fresh lock.
			mt := metav1.NewMicroTime(now)
			lease.Spec.RenewTime = &mt
			what, previous = "refresh lock", nil
		case held != nil && !held.Expired(now):
			return &LockedError{Key: key, Lock: *held}
		default:
			if create {
				what = "create lock"
			}
			lease = s.grantLease(lease, key, holder, raw, held != nil, now)
		}
		if create {
			_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		} else {
			_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		}
		switch {
		case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
			continue // another locker changed the Lease first: look again
		case err != nil:
			return fmt.Errorf("state %q: %s: %w", key, what, err)
		case what != "refresh lock":
			s.logLock(ctx, "state locked", key, info, previous)
		}
		return nil
	}
	return fmt.Errorf("state %q: lock: %w (gave up after %d tries)", key, ErrConflict, lockRetries)
}

// grantLease makes lease (a new one when nil) say that holder holds the lock of key from now,
// with the lock info info; takeover counts a transition from an earlier holder.
func (s *Store) grantLease(lease *coordinationv1.Lease, key, holder string, info []byte, takeover bool, now time.Time) *coordinationv1.Lease {
	if lease == nil {
		hash := s.hash(key)
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name:        "tflock-" + hash,
			Namespace:   s.namespace,
			Labels:      s.labels(hash, roleLock),
			Annotations: map[string]string{AnnotationStateKey: key},
		}}
	}
	transitions := int32(0)
	if lease.Spec.LeaseTransitions != nil {
		transitions = *lease.Spec.LeaseTransitions
	}
	if takeover {
		transitions++
	}
	mt := metav1.NewMicroTime(now)
	secs := int32(s.opts.LockDuration.Round(time.Second) / time.Second)
	lease.Spec.HolderIdentity = &holder
	lease.Spec.LeaseDurationSeconds = &secs
	lease.Spec.AcquireTime, lease.Spec.RenewTime = &mt, &mt
	lease.Spec.LeaseTransitions = &transitions
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[AnnotationLockInfo] = string(info)
	return lease
}

func (s *Store) logLock(ctx context.Context, msg, key string, info LockInfo, previous *HeldLock) {
	attrs := []slog.Attr{slog.String("state_key", key), slog.String("lock_id", info.ID),
		slog.String("holder", info.Holder), slog.String("operation", info.Operation)}
	if previous != nil {
		msg += " (took over an expired lock)"
		attrs = append(attrs, slog.String("previous_holder", previous.Info.Holder),
			slog.String("previous_lock_id", previous.Info.ID), slog.Time("previous_expired_at", previous.Expires()))
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, msg, attrs...)
}

// Renew extends the lock held by lockID by another lock duration. It returns a
// *LockMismatchError when lockID no longer holds the lock (it was force-unlocked, or it expired
// and was taken over), which tells a renewal loop to stop.
func (s *Store) Renew(ctx context.Context, key, lockID string) error {
	return s.updateHeld(ctx, key, lockID, "", func(l *coordinationv1.Lease) {
		mt := metav1.NewMicroTime(s.opts.Now())
		l.Spec.RenewTime = &mt
	})
}

// Unlock releases the lock held by lockID. A different ID, or a holder that is not the lock's
// (when holder is set), gets a *LockMismatchError carrying the current lock; an unlocked state
// gets ErrNotLocked.
func (s *Store) Unlock(ctx context.Context, key, lockID, holder string) error {
	err := s.updateHeld(ctx, key, lockID, holder, release)
	if err == nil {
		s.log.LogAttrs(ctx, slog.LevelInfo, "state unlocked", slog.String("state_key", key), slog.String("lock_id", lockID))
	}
	var lme *LockMismatchError
	if errors.As(err, &lme) && lme.Lock == nil {
		return fmt.Errorf("state %q: %w", key, ErrNotLocked)
	}
	return err
}

// checkWriteLock enforces the locking rules of writes (see WriteOptions.LockID and Holder).
func (s *Store) checkWriteLock(ctx context.Context, key, lockID, holder string) error {
	_, held, err := s.getLease(ctx, key)
	if err != nil {
		return err
	}
	if lockID == "" {
		if held != nil && !held.Expired(s.opts.Now()) {
			return &LockedError{Key: key, Lock: *held}
		}
		return nil
	}
	if held == nil || held.Info.ID != lockID || (holder != "" && held.Info.Holder != holder) {
		return &LockMismatchError{Key: key, LockID: lockID, Lock: held}
	}
	return nil
}

// updateHeld applies change to the Lease if lockID holds it (for holder, when set), with
// compare-and-swap retries.
func (s *Store) updateHeld(ctx context.Context, key, lockID, holder string, change func(*coordinationv1.Lease)) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	leases := s.client.CoordinationV1().Leases(s.namespace)
	for range lockRetries {
		lease, held, err := s.getLease(ctx, key)
		if err != nil {
			return err
		}
		if held == nil || held.Info.ID != lockID || (holder != "" && held.Info.Holder != holder) {
			return &LockMismatchError{Key: key, LockID: lockID, Lock: held}
		}
		change(lease)
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("state %q: update lock: %w", key, err)
		}
		return nil
	}
	return fmt.Errorf("state %q: update lock: %w (gave up after %d tries)", key, ErrConflict, lockRetries)
}

func release(l *coordinationv1.Lease) {
	l.Spec.HolderIdentity = nil
	l.Spec.AcquireTime, l.Spec.RenewTime = nil, nil
	delete(l.Annotations, AnnotationLockInfo)
}

// getLease returns the Lease of key (nil if absent) and the lock it holds (nil if free).
func (s *Store) getLease(ctx context.Context, key string) (*coordinationv1.Lease, *HeldLock, error) {
	l, err := s.client.CoordinationV1().Leases(s.namespace).Get(ctx, s.leaseName(key), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("state %q: read lock: %w", key, err)
	}
	if got := l.Annotations[AnnotationStateKey]; got != key {
		return nil, nil, fmt.Errorf("%w: lease %s belongs to state key %q, not %q", ErrKeyCollision, l.Name, got, key)
	}
	return l, heldFromLease(l), nil
}

func heldFromLease(l *coordinationv1.Lease) *HeldLock {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return nil
	}
	h := &HeldLock{}
	if raw := l.Annotations[AnnotationLockInfo]; raw != "" {
		// An unreadable annotation still leaves a held lock (with only the holder known):
		// treating it as free would let a second writer in.
		_ = json.Unmarshal([]byte(raw), &h.Info)
	}
	h.Info.Holder = *l.Spec.HolderIdentity
	if l.Spec.AcquireTime != nil {
		h.AcquireTime = l.Spec.AcquireTime.Time
	}
	switch {
	case l.Spec.RenewTime != nil:
		h.RenewTime = l.Spec.RenewTime.Time
	default:
		h.RenewTime = h.AcquireTime // zero if both are missing: expired long ago
	}
	if l.Spec.LeaseDurationSeconds != nil {
		h.Duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return h
}
