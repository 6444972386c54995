package statestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
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
	// Writer and Source are recorded in the generation's history entry for audit.
	Writer string
	Source string
}

// Write stores state as the new current generation of key and returns it. The body must be a
// Terraform/OpenTofu state (see ParseState); otherwise ErrInvalidState is returned and nothing
// is written. Writing the same bytes as the current generation is a no-op that returns the
// current generation. See the package documentation for the write protocol and its crash
// safety.
func (s *Store) Write(ctx context.Context, key string, state []byte, opts WriteOptions) (Generation, error) {
	if err := ValidateKey(key); err != nil {
		return Generation{}, err
	}
	if int64(len(state)) > s.opts.MaxStateSize {
		return Generation{}, fmt.Errorf("state %q: %w: %d bytes, at most %d allowed", key, ErrTooLarge, len(state), s.opts.MaxStateSize)
	}
	meta, err := ParseState(state)
	if err != nil {
		var ise *InvalidStateError
		if errors.As(err, &ise) {
			ise.Key = key
		}
		return Generation{}, err
	}
	if err := s.checkWriteLock(ctx, key, opts.LockID, opts.Holder); err != nil {
		return Generation{}, err
	}
	if opts.Source == "" {
		opts.Source = "write"
	}
	return s.write(ctx, key, state, meta, opts, false)
}

func (s *Store) write(ctx context.Context, key string, state []byte, meta StateMeta, opts WriteOptions, forceNew bool) (Generation, error) {
	hash := StateHash(key)
	cur, err := s.getManifest(ctx, key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Generation{}, err
	}
	sum := sha256Hex(state)
	if cur != nil && !forceNew && cur.current.SHA256 == sum && cur.current.Size == int64(len(state)) && s.sealedAsConfigured(cur.current) {
		return cur.current, nil
	}

	stream, err := compress(state, s.opts.CompressionLevel)
	if err != nil {
		return Generation{}, fmt.Errorf("state %q: compress: %w", key, err)
	}
	payload := s.opts.ChunkSize
	if s.sealer != nil {
		payload -= gcmNonceSize + gcmTagSize
	}
	plain := split(stream, payload)

	var base int64
	if cur != nil {
		base = cur.current.Generation
	}
	g := Generation{
		SHA256: sum, Size: int64(len(state)), Chunks: len(plain), Encoding: EncodingGzip,
		Lineage: meta.Lineage, Serial: meta.Serial, TerraformVersion: meta.TerraformVersion,
		ClientEncrypted: meta.ClientEncrypted, UpdatedAt: s.opts.Now().UTC(),
		Writer: opts.Writer, Source: opts.Source,
	}
	if s.sealer != nil {
		g.Encryption, g.KeyID = EncryptionAESGCM, s.sealer.keyID
	}
	gen, stored, err := s.layDown(ctx, key, hash, base+1, plain)
	if err != nil {
		return Generation{}, err
	}
	g.Generation, g.StoredSize = gen, stored

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
	if cur != nil {
		history = append(history, cur.history...)
	}
	if len(history) > s.opts.KeepGenerations {
		history = history[:s.opts.KeepGenerations]
	}
	sec, err := s.manifestSecret(key, hash, g, history)
	if err != nil {
		return Generation{}, err
	}
	if cur == nil {
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
			slog.String("state_key", key), slog.Int64("generation", gen), slog.String("error", err.Error()))
	}
	return g, nil
}

// sealedAsConfigured reports whether a generation is stored the way this Store would store it
// now (so an identical rewrite can be skipped); a key change forces a re-seal.
func (s *Store) sealedAsConfigured(g Generation) bool {
	if s.sealer == nil {
		return g.Encryption == ""
	}
	return g.Encryption == EncryptionAESGCM && g.KeyID == s.sealer.keyID
}

// layDown writes the chunks of a new generation, starting at generation first. Chunk 0 is
// created first: whoever creates it owns the generation number, so a generation left behind by
// a crashed writer (or taken by a concurrent one) is skipped, never shared.
func (s *Store) layDown(ctx context.Context, key, hash string, first int64, plain [][]byte) (int64, int64, error) {
	secrets := s.client.CoreV1().Secrets(s.namespace)
	n := len(plain)
	for gen := first; gen < first+maxLayDownAttempts; gen++ {
		sealed := make([][]byte, n)
		var stored int64
		for i, p := range plain {
			if s.sealer != nil {
				b, err := s.sealer.seal(p, chunkAAD(hash, gen, i, n))
				if err != nil {
					return 0, 0, err
				}
				sealed[i] = b
			} else {
				sealed[i] = p
			}
			stored += int64(len(sealed[i]))
		}
		_, err := secrets.Create(ctx, s.chunkSecret(key, hash, gen, 0, n, sealed[0]), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			s.log.LogAttrs(ctx, slog.LevelDebug, "generation taken, trying the next",
				slog.String("state_key", key), slog.Int64("generation", gen))
			continue
		}
		if err != nil {
			return 0, 0, fmt.Errorf("state %q: write chunk 0 of generation %d: %w", key, gen, err)
		}
		eg, ectx := errgroup.WithContext(ctx)
		eg.SetLimit(s.opts.Parallelism)
		for i := 1; i < n; i++ {
			eg.Go(func() error {
				sec := s.chunkSecret(key, hash, gen, i, n, sealed[i])
				_, err := secrets.Create(ectx, sec, metav1.CreateOptions{})
				if apierrors.IsAlreadyExists(err) {
					// A leftover of a dead writer of this generation whose chunk 0 was
					// already collected; we own the generation now (we created chunk 0).
					if err = secrets.Delete(ectx, sec.Name, metav1.DeleteOptions{}); err == nil || apierrors.IsNotFound(err) {
						_, err = secrets.Create(ectx, sec, metav1.CreateOptions{})
					}
				}
				if err != nil {
					return fmt.Errorf("state %q: write chunk %d of generation %d: %w", key, i, gen, err)
				}
				return nil
			})
		}
		if err := eg.Wait(); err != nil {
			s.deleteGeneration(context.WithoutCancel(ctx), key, hash, gen)
			return 0, 0, err
		}
		return gen, stored, nil
	}
	return 0, 0, fmt.Errorf("state %q: %w: generations %d to %d are all taken", key, ErrConflict, first, first+maxLayDownAttempts-1)
}

func (s *Store) chunkSecret(key, hash string, gen int64, i, n int, data []byte) *corev1.Secret {
	labels := baseLabels(hash, roleChunk)
	labels[LabelGeneration] = strconv.FormatInt(gen, 10)
	immutable := true
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      chunkName(hash, gen, i),
			Namespace: s.namespace,
			Labels:    labels,
			Annotations: map[string]string{
				AnnotationStateKey:  key,
				annotationChunk:     fmt.Sprintf("%d/%d", i, n),
				annotationChunkHash: sha256Hex(data),
			},
		},
		Type:      SecretTypeChunk,
		Immutable: &immutable,
		Data:      map[string][]byte{chunkDataKey: data},
	}
}

// deleteGeneration removes every chunk of one generation (best effort; failures are logged and
// left to garbage collection).
func (s *Store) deleteGeneration(ctx context.Context, key, hash string, gen int64) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sel := fmt.Sprintf("%s=%s,%s=%s,%s=%s,%s=%d", LabelManagedBy, ManagedByValue, LabelState, hash, LabelRole, roleChunk, LabelGeneration, gen)
	if err := s.client.CoreV1().Secrets(s.namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "could not delete chunks of an abandoned generation; garbage collection will",
			slog.String("state_key", key), slog.Int64("generation", gen), slog.String("error", err.Error()))
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
