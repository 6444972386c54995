package statestore

// Reading states back: current and older generations, history, listing, restore and delete.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Read returns the current state of key and its generation. It returns ErrNotFound (wrapped)
// when the state does not exist and a *CorruptError when it cannot be reassembled exactly.
func (s *Store) Read(ctx context.Context, key string) ([]byte, Generation, error) {
	if err := ValidateKey(key); err != nil {
		return nil, Generation{}, err
	}
	for attempt := 0; ; attempt++ {
		m, err := s.getManifest(ctx, key)
		if err != nil {
			return nil, Generation{}, err
		}
		data, err := s.readGeneration(ctx, key, m.current)
		if err == nil {
			return data, m.current, nil
		}
		if attempt == 0 && errors.Is(err, ErrCorrupt) {
			// A writer may have committed and collected in between: look again once.
			if again, rerr := s.getManifest(ctx, key); rerr == nil && again.current.Generation != m.current.Generation {
				continue
			}
		}
		return nil, m.current, err
	}
}

// History returns the kept generations of key, newest (current) first.
func (s *Store) History(ctx context.Context, key string) ([]Generation, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	m, err := s.getManifest(ctx, key)
	if err != nil {
		return nil, err
	}
	return m.history, nil
}

// ReadGeneration returns one kept generation of key (see History), verified like Read.
func (s *Store) ReadGeneration(ctx context.Context, key string, gen int64) ([]byte, Generation, error) {
	if err := ValidateKey(key); err != nil {
		return nil, Generation{}, err
	}
	m, err := s.getManifest(ctx, key)
	if err != nil {
		return nil, Generation{}, err
	}
	g, ok := m.find(gen)
	if !ok {
		return nil, Generation{}, &GenerationNotFoundError{Key: key, Generation: gen, Kept: m.kept()}
	}
	data, err := s.readGeneration(ctx, key, g)
	return data, g, err
}

// Restore makes an old generation current again by writing its bytes as a new generation (the
// history is never rewritten, so a restore can itself be undone). It is refused while the state
// is locked by anyone: force-unlock first if the holder is gone.
func (s *Store) Restore(ctx context.Context, key string, gen int64) (Generation, error) {
	data, _, err := s.ReadGeneration(ctx, key, gen)
	if err != nil {
		return Generation{}, err
	}
	meta, err := ParseState(data)
	if err != nil {
		return Generation{}, err
	}
	if err := s.checkWriteLock(ctx, key, "", ""); err != nil {
		return Generation{}, err
	}
	return s.write(ctx, key, data, meta, WriteOptions{Source: fmt.Sprintf("restore of generation %d", gen)}, true)
}

// Delete removes the state (manifest, every chunk, the lock Lease). It is refused while the
// state is locked (unexpired); force-unlock first. Deleting the manifest first makes the state
// disappear atomically; chunks and the Lease follow. A missing state returns ErrNotFound after
// removing any leftover chunks.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := s.checkWriteLock(ctx, key, "", ""); err != nil {
		return err
	}
	hash := StateHash(key)
	secrets := s.client.CoreV1().Secrets(s.namespace)
	m, err := s.getManifest(ctx, key)
	found := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrCorrupt) {
		return err
	}
	if found {
		rv := m.obj.ResourceVersion
		err := secrets.Delete(ctx, m.obj.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		if apierrors.IsConflict(err) {
			return &ConflictError{Key: key, Expected: m.current.Generation}
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("state %q: delete manifest: %w", key, err)
		}
	} else if errors.Is(err, ErrCorrupt) {
		if err := secrets.Delete(ctx, "tfstate-"+hash, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("state %q: delete manifest: %w", key, err)
		}
		found = true
	}
	sel := fmt.Sprintf("%s=%s,%s=%s,%s=%s", LabelManagedBy, ManagedByValue, LabelState, hash, LabelRole, roleChunk)
	if err := secrets.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
		return fmt.Errorf("state %q: delete chunks: %w", key, err)
	}
	if err := s.client.CoordinationV1().Leases(s.namespace).Delete(ctx, "tflock-"+hash, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("state %q: delete lock: %w", key, err)
	}
	if !found {
		return fmt.Errorf("state %q: %w", key, ErrNotFound)
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "state deleted", slog.String("state_key", key))
	return nil
}

// StateInfo is one entry of List.
type StateInfo struct {
	Key     string
	Current Generation
	// Generations is how many generations are kept.
	Generations int
}

// List returns every state of the namespace, sorted by key. Only manifests are read (they are
// small); a manifest that cannot be parsed is logged and skipped.
func (s *Store) List(ctx context.Context) ([]StateInfo, error) {
	var out []StateInfo
	err := s.eachOfRole(ctx, roleManifest, 250, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return s.client.CoreV1().Secrets(s.namespace).List(ctx, opts)
	}, func(obj runtime.Object) error {
		sec, ok := obj.(*corev1.Secret)
		if !ok {
			return nil
		}
		key := sec.Annotations[AnnotationStateKey]
		m, err := parseManifest(key, sec)
		if err != nil || sec.Name != ManifestName(key) {
			s.log.LogAttrs(ctx, slog.LevelWarn, "skipping unreadable state manifest", slog.String("secret", sec.Name), slog.Any("error", err))
			return nil
		}
		out = append(out, StateInfo{Key: key, Current: m.current, Generations: len(m.history)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list states: %w", err)
	}
	slices.SortFunc(out, func(a, b StateInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

func (s *Store) getManifest(ctx context.Context, key string) (*manifest, error) {
	name := ManifestName(key)
	sec, err := s.client.CoreV1().Secrets(s.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("state %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("state %q: read manifest: %w", key, err)
	}
	return parseManifest(key, sec)
}

// readGeneration fetches, checks and reassembles the chunks of one generation.
func (s *Store) readGeneration(ctx context.Context, key string, g Generation) ([]byte, error) {
	hash := StateHash(key)
	corrupt := func(chunk int, object string, reason error, detail string) error {
		return &CorruptError{Key: key, Generation: g.Generation, Chunk: chunk, Object: object, Reason: reason, Detail: detail}
	}
	var opener *sealer
	switch g.Encryption {
	case "":
	case EncryptionAESGCM:
		opener = s.openers[g.KeyID]
		if opener == nil {
			return nil, fmt.Errorf("state %q generation %d is encrypted with key %s: %w", key, g.Generation, g.KeyID, ErrEncryption)
		}
	default:
		return nil, fmt.Errorf("state %q generation %d: unknown encryption %q: %w", key, g.Generation, g.Encryption, ErrEncryption)
	}

	parts := make([][]byte, g.Chunks)
	missing := make([]bool, g.Chunks)
	secrets := s.client.CoreV1().Secrets(s.namespace)
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(s.opts.Parallelism)
	for i := range g.Chunks {
		eg.Go(func() error {
			name := chunkName(hash, g.Generation, i)
			sec, err := secrets.Get(ectx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				missing[i] = true
				return nil
			}
			if err != nil {
				return fmt.Errorf("state %q: read chunk %d of generation %d: %w", key, i, g.Generation, err)
			}
			data := sec.Data[chunkDataKey]
			if want := sec.Annotations[annotationChunkHash]; want != "" && want != sha256Hex(data) {
				return corrupt(i, name, ErrChecksum, "chunk content does not match its SHA-256")
			}
			if sec.Labels[LabelGeneration] != strconv.FormatInt(g.Generation, 10) || sec.Annotations[annotationChunk] != fmt.Sprintf("%d/%d", i, g.Chunks) {
				return corrupt(i, name, ErrChecksum, "chunk belongs to another generation or position")
			}
			if opener != nil {
				plain, err := opener.open(data, chunkAAD(hash, g.Generation, i, g.Chunks))
				if err != nil {
					return corrupt(i, name, ErrChecksum, "chunk fails authentication: "+err.Error())
				}
				data = plain
			}
			parts[i] = data
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	var nmissing, first = 0, -1
	for i, m := range missing {
		if m {
			nmissing++
			if first < 0 {
				first = i
			}
		}
	}
	if nmissing == g.Chunks {
		return nil, corrupt(-1, chunkName(hash, g.Generation, 0), ErrGenerationMissing,
			fmt.Sprintf("none of its %d chunk secrets exist (deleted generation?)", g.Chunks))
	}
	if nmissing > 0 {
		return nil, corrupt(first, chunkName(hash, g.Generation, first), ErrChunkMissing,
			fmt.Sprintf("%d of %d chunk secrets missing", nmissing, g.Chunks))
	}
	state, err := decompress(bytes.Join(parts, nil), g.Size)
	if err != nil {
		return nil, corrupt(-1, "", ErrChecksum, "compressed stream damaged: "+err.Error())
	}
	if got := sha256Hex(state); got != g.SHA256 {
		return nil, corrupt(-1, "", ErrChecksum, fmt.Sprintf("SHA-256 of the state is %s, manifest says %s", got, g.SHA256))
	}
	return state, nil
}
