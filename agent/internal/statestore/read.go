package statestore

// Reading states back: current and older generations, history, listing, restore and delete.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Read returns the current state of key and its generation (Stream into memory). It returns
// ErrNotFound (wrapped) when the state does not exist and a *CorruptError when it cannot be
// reassembled exactly.
func (s *Store) Read(ctx context.Context, key string) ([]byte, Generation, error) {
	return s.readAll(ctx, key, 0)
}

func (s *Store) readAll(ctx context.Context, key string, gen int64) ([]byte, Generation, error) {
	var buf bytes.Buffer
	g, err := s.Stream(ctx, key, gen, func(g Generation) io.Writer {
		buf.Grow(int(min(g.Size, 1<<30)))
		return &buf
	})
	if err != nil {
		return nil, g, err
	}
	return buf.Bytes(), g, nil
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
	if gen <= 0 {
		return nil, Generation{}, &GenerationNotFoundError{Key: key, Generation: gen}
	}
	return s.readAll(ctx, key, gen)
}

// Restore makes an old generation current again by writing its bytes as a new generation (the
// history is never rewritten, so a restore can itself be undone). It is refused while the state
// is locked by anyone: force-unlock first if the holder is gone.
func (s *Store) Restore(ctx context.Context, key string, gen int64) (Generation, error) {
	data, _, err := s.ReadGeneration(ctx, key, gen)
	if err != nil {
		return Generation{}, err
	}
	if err := s.checkWriteLock(ctx, key, "", ""); err != nil {
		return Generation{}, err
	}
	return s.write(ctx, key, bytes.NewReader(data), WriteOptions{Source: fmt.Sprintf("restore of generation %d", gen)}, true)
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
		if err := secrets.Delete(ctx, s.manifestName(key), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("state %q: delete manifest: %w", key, err)
		}
		found = true
	}
	hashes := []string{s.hash(key)}
	if m != nil && m.legacy {
		hashes = append(hashes, m.hash)
	}
	for _, hash := range hashes {
		sel := fmt.Sprintf("%s=%s,%s=%s,%s=%s", LabelManagedBy, ManagedByValue, LabelState, hash, LabelRole, roleChunk)
		if err := secrets.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
			return fmt.Errorf("state %q: delete chunks: %w", key, err)
		}
	}
	if err := s.client.CoordinationV1().Leases(s.namespace).Delete(ctx, s.leaseName(key), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
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

// List returns every state of the Store's scope in the namespace, sorted by key: its scoped
// states and the legacy (unscoped) ones not yet moved. Only manifests are read (they are small);
// a manifest that cannot be parsed is logged and skipped.
func (s *Store) List(ctx context.Context) ([]StateInfo, error) {
	byKey := map[string]StateInfo{}
	scoped := map[string]bool{}
	err := s.eachOfRole(ctx, roleManifest, 250, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return s.client.CoreV1().Secrets(s.namespace).List(ctx, opts)
	}, func(obj runtime.Object) error {
		sec, ok := obj.(*corev1.Secret)
		if !ok {
			return nil
		}
		_, labelled := sec.Labels[LabelOrg]
		mine := s.inScope(sec.Labels)
		if !mine && labelled {
			return nil // another organisation's
		}
		key := sec.Annotations[AnnotationStateKey]
		want := s.manifestName(key)
		if !mine {
			want = ManifestName(key)
		}
		m, err := parseManifest(key, sec)
		if err != nil || sec.Name != want {
			s.log.LogAttrs(ctx, slog.LevelWarn, "skipping unreadable state manifest", slog.String("secret", sec.Name), slog.Any("err", err))
			return nil
		}
		if scoped[key] {
			return nil
		}
		scoped[key] = mine
		byKey[key] = StateInfo{Key: key, Current: m.current, Generations: len(m.history)}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list states: %w", err)
	}
	out := make([]StateInfo, 0, len(byKey))
	for _, v := range byKey {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b StateInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// getManifest reads the manifest of key: the scoped one, else (for a scoped Store) the legacy
// unscoped one of a state written before states were scoped.
func (s *Store) getManifest(ctx context.Context, key string) (*manifest, error) {
	m, err := s.manifestAt(ctx, key, s.manifestName(key), s.hash(key))
	if !errors.Is(err, ErrNotFound) || s.opts.Scope == "" {
		return m, err
	}
	legacy, lerr := s.manifestAt(ctx, key, ManifestName(key), StateHash(key))
	if lerr != nil || legacy.obj.Labels[LabelOrg] != "" {
		return nil, err
	}
	legacy.legacy = true
	return legacy, nil
}

func (s *Store) manifestAt(ctx context.Context, key, name, hash string) (*manifest, error) {
	sec, err := s.client.CoreV1().Secrets(s.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("state %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("state %q: read manifest: %w", key, err)
	}
	m, err := parseManifest(key, sec)
	if err != nil {
		return nil, err
	}
	m.hash = hash
	return m, nil
}

// removeLegacy deletes the objects of a legacy state once its first scoped generation is
// current (best effort: leftovers are only ever shadowed by the scoped state).
func (s *Store) removeLegacy(ctx context.Context, key string, legacy *manifest) {
	ctx = context.WithoutCancel(ctx)
	secrets := s.client.CoreV1().Secrets(s.namespace)
	rv := legacy.obj.ResourceVersion
	err := secrets.Delete(ctx, legacy.obj.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	if err == nil || apierrors.IsNotFound(err) {
		sel := fmt.Sprintf("%s=%s,%s=%s,%s=%s,!%s", LabelManagedBy, ManagedByValue, LabelState, legacy.hash, LabelRole, roleChunk, LabelOrg)
		err = secrets.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel})
	}
	attrs := []slog.Attr{slog.String("state_key", key), slog.String("from", legacy.obj.Name), slog.String("to", s.manifestName(key))}
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "could not remove the unscoped copy of a state moved to its organisation's names", append(attrs, slog.Any("err", err))...)
		return
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "moved a state to its organisation's names", attrs...)
}
