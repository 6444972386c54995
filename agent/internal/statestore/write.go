package statestore

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The write path: a new generation's chunks are laid down first, then the manifest is swapped
// with a compare-and-swap, then generations that fell out of the history are collected (see the
// package documentation).

// WriteOptions qualify a Write.
type WriteOptions struct {
	// LockID, when set, must be the ID of the lock currently held on the state (the `?ID=`
	// the CLI sends with a locked write). A lock that expired but was not taken over still
	// counts. When empty, the write is refused while anyone holds an unexpired lock.
	LockID string
	// Holder, when set, must be the holder of that lock: a lock ID learned from another
	// holder's lock (another attempt's) does not let a write through.
	Holder string
	// Verify, when set, runs once the whole body has been read and before anything is committed
	// (the state backend checks the body's Content-MD5 with it); an error aborts the write.
	Verify func() error
	// Writer and Source are recorded in the generation's history entry for audit.
	Writer string
	Source string
}

// Write stores state as the new current generation of key and returns it (WriteFrom over
// the bytes).
func (s *Store) Write(ctx context.Context, key string, state []byte, opts WriteOptions) (Generation, error) {
	return s.WriteFrom(ctx, key, bytes.NewReader(state), opts)
}

// WriteFrom stores the state read from body as the new current generation of key and returns
// it. The body is streamed: checked, hashed, compressed and laid down chunk by chunk as it
// arrives, so the memory of a write does not grow with the state. The body must be a
// Terraform/OpenTofu state (see ParseState) of at most MaxStateSize bytes; otherwise
// ErrInvalidState or ErrTooLarge is returned and nothing is written. Writing the same bytes as
// the current generation is a no-op that returns the current generation (a state larger than
// one chunk has its chunks laid down, and removed again, before the end of the body tells). See
// the package documentation for the write protocol and its crash safety.
func (s *Store) WriteFrom(ctx context.Context, key string, body io.Reader, opts WriteOptions) (Generation, error) {
	if err := ValidateKey(key); err != nil {
		return Generation{}, err
	}
	if err := s.checkWriteLock(ctx, key, opts.LockID, opts.Holder); err != nil {
		return Generation{}, err
	}
	if opts.Source == "" {
		opts.Source = "write"
	}
	return s.write(ctx, key, body, opts, false)
}

func (s *Store) write(ctx context.Context, key string, body io.Reader, opts WriteOptions, forceNew bool) (Generation, error) {
	hash := s.hash(key)
	cur, err := s.getManifest(ctx, key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Generation{}, err
	}
	var base int64
	if cur != nil {
		base = cur.current.Generation
	}
	lw := s.newLayWriter(ctx, key, hash, base+1)
	zw, err := gzip.NewWriterLevel(lw, s.opts.CompressionLevel)
	if err != nil {
		return Generation{}, err
	}
	scan, sum, size := newStateScanner(), sha256.New(), &counter{}
	_, err = io.CopyBuffer(io.MultiWriter(size, sum, scan, zw), io.LimitReader(body, s.opts.MaxStateSize+1), make([]byte, 32<<10))
	var meta StateMeta
	switch {
	case size.n > s.opts.MaxStateSize:
		err = fmt.Errorf("state %q: %w: more than %d bytes", key, ErrTooLarge, s.opts.MaxStateSize)
	case scan.err != nil || err == nil:
		if meta, err = scan.meta(); err != nil {
			var ise *InvalidStateError
			if errors.As(err, &ise) {
				ise.Key = key
			}
		}
	}
	if err == nil && opts.Verify != nil {
		err = opts.Verify()
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		lw.abort()
		return Generation{}, err
	}
	digest := hex.EncodeToString(sum.Sum(nil))
	if cur != nil && !cur.legacy && !forceNew && cur.current.SHA256 == digest && cur.current.Size == size.n && s.sealedAsConfigured(cur.current) {
		// The same bytes again: no new generation. A state larger than one chunk had chunks
		// laid down before the end told; they go again.
		lw.abort()
		return cur.current, nil
	}
	g := Generation{
		SHA256: digest, Size: size.n, Encoding: EncodingGzip, Format: FormatStreamed,
		Lineage: meta.Lineage, Serial: meta.Serial, TerraformVersion: meta.TerraformVersion,
		ClientEncrypted: meta.ClientEncrypted, Resources: meta.Resources, UpdatedAt: s.opts.Now().UTC(),
		Writer: opts.Writer, Source: opts.Source,
	}
	if s.sealer != nil {
		g.Encryption, g.KeyID = EncryptionAESGCM, s.sealer.keyID
	}
	gen, chunks, stored, err := lw.finish()
	if err != nil {
		lw.abort()
		return Generation{}, err
	}
	g.Generation, g.Chunks, g.StoredSize = gen, chunks, stored
	return s.commit(ctx, key, hash, cur, g, opts)
}

// counter counts the bytes written to it.
type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// commit makes a laid-down generation current: the manifest compare-and-swap, then garbage
// collection of what fell out of the history.
func (s *Store) commit(ctx context.Context, key, hash string, cur *manifest, g Generation, opts WriteOptions) (Generation, error) {
	gen, sum := g.Generation, g.SHA256
	var base int64
	if cur != nil {
		base = cur.current.Generation
	}
	if hook := s.opts.BeforeManifestSwap; hook != nil {
		if err := hook(ctx, key, gen); err != nil {
			return Generation{}, err
		}
	}
	// Check the lock again right before the swap: laying down a large state takes seconds,
	// during which an expired lock may have been taken over or force-unlocked. This narrows
	// the window in which a writer that lost its lock can still commit to one API round trip.
	if err := s.checkWriteLock(ctx, key, opts.LockID, opts.Holder); err != nil {
		s.deleteGeneration(context.WithoutCancel(ctx), key, hash, gen)
		return Generation{}, err
	}

	history := []Generation{g}
	if cur != nil && !cur.legacy {
		history = append(history, cur.history...)
	}
	history = s.prune(history)
	sec, err := s.manifestSecret(key, hash, g, history)
	if err != nil {
		return Generation{}, err
	}
	if cur == nil || cur.legacy {
		_, err = s.client.CoreV1().Secrets(s.namespace).Create(ctx, sec, metav1.CreateOptions{})
	} else {
		sec.ResourceVersion = cur.obj.ResourceVersion
		_, err = s.client.CoreV1().Secrets(s.namespace).Update(ctx, sec, metav1.UpdateOptions{})
	}
	if err != nil {
		// Did our swap land after all (a retried request whose first attempt succeeded)?
		now, rerr := s.getManifest(context.WithoutCancel(ctx), key)
		switch landed := rerr == nil && now.current.Generation == gen && now.current.SHA256 == sum; {
		case landed:
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			// Definitely lost: our chunks are referenced by nobody; remove them now rather
			// than leaving them to the next write's garbage collection.
			s.deleteGeneration(context.WithoutCancel(ctx), key, hash, gen)
			ce := &ConflictError{Key: key, Expected: base}
			if now != nil {
				ce.Current = now.current.Generation
			}
			return Generation{}, ce
		default:
			// Unknown outcome: leave the chunks; if the swap did not land they are orphans
			// that the next successful write removes.
			return Generation{}, fmt.Errorf("state %q: swap manifest to generation %d: %w", key, gen, err)
		}
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "state written",
		slog.String("state_key", key), slog.Int64("generation", gen), slog.Int64("size", g.Size),
		slog.Int64("stored_size", g.StoredSize), slog.Int("chunks", g.Chunks), slog.String("writer", g.Writer))

	kept := make([]int64, len(history))
	for i, h := range history {
		kept[i] = h.Generation
	}
	if err := s.collect(ctx, hash, gen, kept); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "state garbage collection failed; it is retried after the next write",
			slog.String("state_key", key), slog.Int64("generation", gen), slog.Any("err", err))
	}
	if cur != nil && cur.legacy {
		s.removeLegacy(ctx, key, cur)
	}
	return g, nil
}

// prune cuts a history (newest first, the new current generation first of all) down to what the
// Store keeps: KeepGenerations entries, none older than MaxGenerationAge but the current one.
func (s *Store) prune(history []Generation) []Generation {
	if len(history) > s.opts.KeepGenerations {
		history = history[:s.opts.KeepGenerations]
	}
	if s.opts.MaxGenerationAge <= 0 {
		return history
	}
	cutoff := s.opts.Now().Add(-s.opts.MaxGenerationAge)
	for i := 1; i < len(history); i++ {
		if history[i].UpdatedAt.Before(cutoff) {
			return history[:i]
		}
	}
	return history
}

// sealedAsConfigured reports whether a generation is stored the way this Store would store it
// now (so an identical rewrite can be skipped); a key change forces a re-seal.
func (s *Store) sealedAsConfigured(g Generation) bool {
	if s.sealer == nil {
		return g.Encryption == ""
	}
	return g.Encryption == EncryptionAESGCM && g.KeyID == s.sealer.keyID
}

// deleteGeneration removes every chunk of one generation (best effort; failures are logged and
// left to garbage collection).
func (s *Store) deleteGeneration(ctx context.Context, key, hash string, gen int64) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sel := fmt.Sprintf("%s=%s,%s=%s,%s=%s,%s=%d", LabelManagedBy, ManagedByValue, LabelState, hash, LabelRole, roleChunk, LabelGeneration, gen)
	if err := s.client.CoreV1().Secrets(s.namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "could not delete chunks of an abandoned generation; garbage collection will",
			slog.String("state_key", key), slog.Int64("generation", gen), slog.Any("err", err))
	}
}

// collect deletes the chunks of every generation below current that is not kept: generations
// that fell out of the history and orphans of failed writes. Generations above current are never
// touched (they may be a concurrent writer's work in progress; see the package documentation).
// One DeleteCollection call with a label selector does it without reading any chunk data.
func (s *Store) collect(ctx context.Context, hash string, current int64, kept []int64) error {
	var old []string
	for _, g := range kept {
		if g < current {
			old = append(old, strconv.FormatInt(g, 10))
		}
	}
	sel := fmt.Sprintf("%s=%s,%s=%s,%s=%s,%s<%d", LabelManagedBy, ManagedByValue, LabelState, hash, LabelRole, roleChunk, LabelGeneration, current)
	if len(old) > 0 {
		sel += fmt.Sprintf(",%s notin (%s)", LabelGeneration, strings.Join(old, ","))
	}
	return s.client.CoreV1().Secrets(s.namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel})
}
