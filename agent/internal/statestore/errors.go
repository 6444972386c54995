package statestore

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Every error returned by the Store that callers may want to act on matches one
// of these with errors.Is; the concrete types below carry the details (state key, generation,
// current lock holder) so that messages are actionable without extra lookups.
var (
	// ErrNotFound: the state (or the requested generation of it) does not exist.
	ErrNotFound = errors.New("state not found")
	// ErrCorrupt: the stored state cannot be reassembled into exactly what was written. The
	// concrete error is a *CorruptError; errors.Is also matches the more specific reasons
	// ErrChunkMissing, ErrGenerationMissing and ErrChecksum.
	ErrCorrupt = errors.New("state is corrupt")
	// ErrChunkMissing: one chunk Secret of the current generation is missing.
	ErrChunkMissing = errors.New("chunk missing")
	// ErrGenerationMissing: the manifest points at a generation whose chunks are all gone.
	ErrGenerationMissing = errors.New("generation missing")
	// ErrChecksum: a chunk or the reassembled state does not match its recorded digest, size or
	// authentication tag, or the compressed stream is damaged.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrInvalidState: the body is not a Terraform/OpenTofu state; nothing was written.
	ErrInvalidState = errors.New("not a Terraform state")
	// ErrInvalidKey: the state key is empty, too long or not valid UTF-8.
	ErrInvalidKey = errors.New("invalid state key")
	// ErrTooLarge: the state exceeds Options.MaxStateSize.
	ErrTooLarge = errors.New("state too large")
	// ErrConflict: another writer changed the state between our read and our compare-and-swap.
	ErrConflict = errors.New("concurrent modification of the state")
	// ErrAlreadyExists: an import would overwrite a different existing state.
	ErrAlreadyExists = errors.New("state already exists")
	// ErrLocked: the state is locked by someone else. The concrete error is a *LockedError.
	ErrLocked = errors.New("state is locked")
	// ErrLockMismatch: the given lock ID is not the one holding the lock. Concrete error:
	// *LockMismatchError, which carries the current lock (if any).
	ErrLockMismatch = errors.New("lock ID does not match the current lock")
	// ErrNotLocked: an operation needed a held lock, but the state is not locked (it was
	// unlocked, force-unlocked, or never locked).
	ErrNotLocked = errors.New("state is not locked")
	// ErrEncryption: the state is encrypted with a key this Store does not have (or it is
	// encrypted and the Store has no key at all).
	ErrEncryption = errors.New("state encryption key unavailable")
	// ErrClientEncrypted: the state is an OpenTofu client-side encryption envelope, so its
	// contents (and its serial) cannot be read in the cluster.
	ErrClientEncrypted = errors.New("state is encrypted by OpenTofu")
	// ErrKeyCollision: two different keys hash to the same object name. With 160 bits of hash
	// this is not expected to happen; it is checked so that it could never go unnoticed.
	ErrKeyCollision = errors.New("state key hash collision")
)

// CorruptError reports a state that cannot be read back intact. It names the key, the
// generation and (when known) the chunk, so that an operator can find the objects involved and
// restore an earlier generation with Restore.
type CorruptError struct {
	Key        string
	Generation int64
	// Chunk is the index of the chunk at fault, or -1 when the fault is not in one chunk.
	Chunk int
	// Object is the name of the Kubernetes object at fault, when there is one.
	Object string
	// Reason is one of ErrChunkMissing, ErrGenerationMissing or ErrChecksum.
	Reason error
	// Detail explains the fault in words.
	Detail string
}

func (e *CorruptError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "state %q generation %d is corrupt", e.Key, e.Generation)
	if e.Chunk >= 0 {
		fmt.Fprintf(&b, ": chunk %d", e.Chunk)
	}
	if e.Object != "" {
		fmt.Fprintf(&b, " (secret %s)", e.Object)
	}
	if e.Reason != nil {
		fmt.Fprintf(&b, ": %v", e.Reason)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, ": %s", e.Detail)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrCorrupt) true for every CorruptError.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap exposes the specific reason (ErrChunkMissing, ErrGenerationMissing, ErrChecksum).
func (e *CorruptError) Unwrap() error { return e.Reason }

// InvalidStateError explains why a body was refused as a state. Nothing is written when it is
// returned.
type InvalidStateError struct {
	Key    string
	Detail string
}

func (e *InvalidStateError) Error() string {
	return fmt.Sprintf("refusing to store state %q: not a Terraform state: %s", e.Key, e.Detail)
}

// Is makes errors.Is(err, ErrInvalidState) true.
func (e *InvalidStateError) Is(target error) bool { return target == ErrInvalidState }

// GenerationNotFoundError is returned by ReadGeneration and Restore for a generation that is not
// in the kept history. It matches ErrNotFound.
type GenerationNotFoundError struct {
	Key        string
	Generation int64
	Kept       []int64
}

func (e *GenerationNotFoundError) Error() string {
	kept := make([]string, len(e.Kept))
	for i, g := range e.Kept {
		kept[i] = fmt.Sprint(g)
	}
	return fmt.Sprintf("state %q has no generation %d (kept generations: %s)", e.Key, e.Generation, strings.Join(kept, ", "))
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *GenerationNotFoundError) Is(target error) bool { return target == ErrNotFound }

// ConflictError reports a lost compare-and-swap on the manifest: someone else committed a new
// generation after this writer read the manifest. The write is not retried automatically
// because that would silently discard the other writer's state.
type ConflictError struct {
	Key string
	// Expected is the generation this writer built upon; Current is what it found afterwards
	// (0 if it could not tell).
	Expected, Current int64
}

func (e *ConflictError) Error() string {
	if e.Current > 0 {
		return fmt.Sprintf("state %q was modified concurrently: expected generation %d, found %d", e.Key, e.Expected, e.Current)
	}
	return fmt.Sprintf("state %q was modified concurrently (expected generation %d)", e.Key, e.Expected)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// LockedError reports that the state is locked by someone else. Lock carries the current
// holder's lock info, so that the caller can show who holds it and since when (the http backend
// returns it to the CLI, which prints it).
type LockedError struct {
	Key  string
	Lock HeldLock
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("state %q is locked by %s (lock ID %s, operation %q, since %s, expires %s)",
		e.Key, orUnknown(e.Lock.Info.Holder), orUnknown(e.Lock.Info.ID), e.Lock.Info.Operation,
		e.Lock.AcquireTime.UTC().Format(time.RFC3339), e.Lock.Expires().UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// LockMismatchError reports an unlock, renewal or locked write with a lock ID that does not
// hold the lock. Lock is the current lock, or nil when the state is not locked at all (then the
// error also matches ErrNotLocked).
type LockMismatchError struct {
	Key    string
	LockID string
	Lock   *HeldLock
}

func (e *LockMismatchError) Error() string {
	if e.Lock == nil {
		return fmt.Sprintf("state %q: lock ID %s does not hold the lock: the state is not locked (it was unlocked or force-unlocked)", e.Key, e.LockID)
	}
	return fmt.Sprintf("state %q: lock ID %s does not hold the lock: it is held by %s (lock ID %s)",
		e.Key, e.LockID, orUnknown(e.Lock.Info.Holder), orUnknown(e.Lock.Info.ID))
}

// Is makes errors.Is(err, ErrLockMismatch) true, and ErrNotLocked when nobody holds the lock.
func (e *LockMismatchError) Is(target error) bool {
	return target == ErrLockMismatch || (target == ErrNotLocked && e.Lock == nil)
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
