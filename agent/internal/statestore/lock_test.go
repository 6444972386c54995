package statestore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func lockInfo(id, holder string) LockInfo {
	return LockInfo{ID: id, Operation: "OperationTypeApply", Who: "runner@pod", Version: "1.11.4",
		Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Holder: holder}
}

func TestLocking(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	s, c := newTestStore(t, Options{LockDuration: 60 * time.Second, Now: clock.Now})
	key := "team-a/prod"

	if l, err := s.LockInfo(ctx, key); err != nil || l != nil {
		t.Fatalf("LockInfo of unlocked state = %v, %v", l, err)
	}
	if err := s.Lock(ctx, key, lockInfo("id-1", "job/a/1")); err != nil {
		t.Fatal(err)
	}
	lease, err := c.CoordinationV1().Leases(testNS).Get(ctx, LeaseName(key), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *lease.Spec.HolderIdentity != "job/a/1" || *lease.Spec.LeaseDurationSeconds != 60 || lease.Spec.RenewTime == nil ||
		!strings.Contains(lease.Annotations[AnnotationLockInfo], `"ID":"id-1"`) || lease.Annotations[AnnotationStateKey] != key {
		t.Errorf("lease = %+v %v", lease.Spec, lease.Annotations)
	}
	// Idempotent for the same ID.
	if err := s.Lock(ctx, key, lockInfo("id-1", "job/a/1")); err != nil {
		t.Errorf("re-lock with the same ID: %v", err)
	}
	// Conflict carries the holder's info.
	err = s.Lock(ctx, key, lockInfo("id-2", "job/b/1"))
	var le *LockedError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &le) || le.Lock.Info.ID != "id-1" || le.Lock.Info.Holder != "job/a/1" ||
		le.Lock.Info.Operation != "OperationTypeApply" || le.Lock.Info.Who != "runner@pod" {
		t.Fatalf("competing lock = %v (%+v)", err, le)
	}
	// Writes: without an ID refused, with the wrong ID refused, with the right one allowed.
	if _, err := s.Write(ctx, key, testState("l", 1, ""), WriteOptions{}); !errors.Is(err, ErrLocked) {
		t.Errorf("unlocked write while locked = %v", err)
	}
	if _, err := s.Write(ctx, key, testState("l", 1, ""), WriteOptions{LockID: "id-2"}); !errors.Is(err, ErrLockMismatch) {
		t.Errorf("write with wrong ID = %v", err)
	}
	if _, err := s.Write(ctx, key, testState("l", 1, ""), WriteOptions{LockID: "id-1"}); err != nil {
		t.Errorf("write with the lock ID = %v", err)
	}
	if err := s.Delete(ctx, key); !errors.Is(err, ErrLocked) {
		t.Errorf("delete while locked = %v", err)
	}
	// Wrong unlock ID.
	err = s.Unlock(ctx, key, "id-2", "")
	var lme *LockMismatchError
	if !errors.Is(err, ErrLockMismatch) || !errors.As(err, &lme) || lme.Lock == nil || lme.Lock.Info.ID != "id-1" {
		t.Errorf("unlock with the wrong ID = %v", err)
	}
	// Renewal keeps it alive past the original expiry.
	clock.Add(50 * time.Second)
	if err := s.Renew(ctx, key, "id-1"); err != nil {
		t.Fatal(err)
	}
	clock.Add(50 * time.Second)
	if err := s.Lock(ctx, key, lockInfo("id-2", "job/b/1")); !errors.Is(err, ErrLocked) {
		t.Errorf("lock of a renewed lease = %v", err)
	}
	// Expiry: the holder stops renewing, another takes over.
	clock.Add(11 * time.Second)
	if held, _ := s.LockInfo(ctx, key); held == nil || !held.Expired(clock.Now()) {
		t.Errorf("lock should be expired: %+v", held)
	}
	if err := s.Lock(ctx, key, lockInfo("id-2", "job/b/1")); err != nil {
		t.Fatalf("take over an expired lock: %v", err)
	}
	lease, _ = c.CoordinationV1().Leases(testNS).Get(ctx, LeaseName(key), metav1.GetOptions{})
	if *lease.Spec.HolderIdentity != "job/b/1" || *lease.Spec.LeaseTransitions != 1 {
		t.Errorf("after takeover: %+v", lease.Spec)
	}
	// The zombie can neither renew nor write.
	if err := s.Renew(ctx, key, "id-1"); !errors.Is(err, ErrLockMismatch) {
		t.Errorf("zombie renew = %v", err)
	}
	if _, err := s.Write(ctx, key, testState("l", 2, ""), WriteOptions{LockID: "id-1"}); !errors.Is(err, ErrLockMismatch) {
		t.Errorf("zombie write = %v", err)
	}
	// Force-unlock, then the old holder's write is refused as not locked.
	prev, err := s.ForceUnlock(ctx, key)
	if err != nil || prev == nil || prev.Info.ID != "id-2" {
		t.Fatalf("force-unlock = %+v, %v", prev, err)
	}
	if _, err := s.Write(ctx, key, testState("l", 2, ""), WriteOptions{LockID: "id-2"}); !errors.Is(err, ErrNotLocked) {
		t.Errorf("write after force-unlock = %v", err)
	}
	if _, err := s.ForceUnlock(ctx, key); !errors.Is(err, ErrNotLocked) {
		t.Errorf("second force-unlock = %v", err)
	}
	if err := s.Unlock(ctx, key, "id-2", ""); !errors.Is(err, ErrNotLocked) {
		t.Errorf("unlock of an unlocked state = %v", err)
	}
	// Lock, unlock, lock again.
	if err := s.Lock(ctx, key, lockInfo("id-3", "")); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.LockInfo(ctx, key); l == nil || l.Info.Holder != "id-3" {
		t.Errorf("holder defaults to the ID: %+v", l)
	}
	if err := s.Unlock(ctx, key, "id-3", ""); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.LockInfo(ctx, key); l != nil {
		t.Errorf("still locked after unlock: %+v", l)
	}
	locks, err := s.ListLocks(ctx)
	if err != nil || len(locks) != 0 {
		t.Errorf("ListLocks = %v, %v", locks, err)
	}
	if err := s.Lock(ctx, key, LockInfo{}); err == nil {
		t.Error("lock without an ID accepted")
	}
}

func TestKeepAlive(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestStore(t, Options{LockDuration: time.Second})
	key := "ka"
	if err := s.Lock(ctx, key, lockInfo("id", "h")); err != nil {
		t.Fatal(err)
	}
	before, _ := s.LockInfo(ctx, key)
	kctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.KeepAlive(kctx, key, "id", 20*time.Millisecond) }()
	time.Sleep(1500 * time.Millisecond)
	after, _ := s.LockInfo(ctx, key)
	if after == nil || !after.RenewTime.After(before.RenewTime) || after.Expired(time.Now()) {
		t.Errorf("not renewed: before %v after %+v", before.RenewTime, after)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("KeepAlive after cancel = %v", err)
	}
	// Lost lock ends the loop with the mismatch.
	go func() { done <- s.KeepAlive(ctx, key, "id", 20*time.Millisecond) }()
	if _, err := s.ForceUnlock(ctx, key); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrLockMismatch) {
			t.Errorf("KeepAlive after force-unlock = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("KeepAlive did not stop after losing the lock")
	}
}

func TestLockRace(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestStore(t, Options{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Lock(ctx, "race", lockInfo(string(rune('a'+i)), ""))
			if err == nil {
				mu.Lock()
				won++
				mu.Unlock()
			} else if !errors.Is(err, ErrLocked) {
				t.Errorf("lock %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d lockers won, want exactly 1", won)
	}
}

// A writer whose lock is force-unlocked and taken by someone else while it lays down its
// chunks does not commit: the lock is checked again right before the swap.
func TestLockLostDuringWrite(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient()
	admin := mustStore(New(c, testNS, Options{Logger: quiet}))
	key := "fenced"
	v1 := testState("l", 1, "v1")
	if _, err := admin.Write(ctx, key, v1, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Lock(ctx, key, lockInfo("slow", "job/slow/1")); err != nil {
		t.Fatal(err)
	}
	slow := mustStore(New(c, testNS, Options{Logger: quiet, BeforeManifestSwap: func(ctx context.Context, k string, _ int64) error {
		if _, err := admin.ForceUnlock(ctx, k); err != nil {
			return err
		}
		return admin.Lock(ctx, k, lockInfo("fast", "job/fast/1"))
	}}))
	_, err := slow.Write(ctx, key, testState("l", 2, "v2"), WriteOptions{LockID: "slow"})
	if !errors.Is(err, ErrLockMismatch) {
		t.Fatalf("write after losing the lock = %v", err)
	}
	if got, g, _ := admin.Read(ctx, key); !bytes.Equal(got, v1) || g.Generation != 1 {
		t.Errorf("state changed by a writer that lost its lock (generation %d)", g.Generation)
	}
	if n := listChunks(t, c, key); len(n) != 1 {
		t.Errorf("chunks of the refused write left behind: %v", n)
	}
}

// KeepAlive renews the lock held by lockID every interval until ctx is done (then it returns
// nil) or the lock is lost (then it returns the *LockMismatchError of Renew). Transient API
// errors are logged and retried at the next tick; the lock duration should cover a few missed
// renewals (interval ≤ duration/3).
func (s *Store) KeepAlive(ctx context.Context, key, lockID string, interval time.Duration) error {
	if interval <= 0 {
		interval = s.opts.LockDuration / 3
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := s.Renew(ctx, key, lockID)
		switch {
		case err == nil:
		case errors.Is(err, ErrLockMismatch), errors.Is(err, ErrKeyCollision):
			return err
		case ctx.Err() != nil:
			return nil
		default:
			s.log.LogAttrs(ctx, slog.LevelWarn, "lock renewal failed; retrying", slog.String("state_key", key),
				slog.String("lock_id", lockID), slog.Any("err", err))
		}
	}
}
