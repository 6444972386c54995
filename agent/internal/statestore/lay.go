package statestore

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Chunk formats. A generation's chunks are immutable Secrets; how each is bound to its place is
// its format (Generation.Format):
//
//   - FormatCounted (0, written before streaming): every chunk is "i/n", sealed with n.
//   - FormatStreamed (1): a write streams the body into chunks before it knows their number, so
//     every chunk but the last is "i/+" (more follow) and the last is "i/n", each sealed with
//     that marker. Dropping chunks from the end is still detected: the chunk before a dropped
//     last one says more follow.
const (
	FormatCounted  = 0
	FormatStreamed = 1
	moreFollow     = "+"
)

// chunkPosition is the annotation (and, sealed, the AAD part) of chunk i of n.
func chunkPosition(format, i, n int) string {
	if format == FormatStreamed && i < n-1 {
		return strconv.Itoa(i) + "/" + moreFollow
	}
	return strconv.Itoa(i) + "/" + strconv.Itoa(n)
}

// layWriter is the write end of a generation being laid down: the gzip stream of the state is
// written into it, and it creates a chunk Secret as soon as a full chunk is known not to be the
// last. Chunk 0 is created first and alone: whoever creates it owns the generation number, so a
// generation left behind by a crashed writer (or taken by a concurrent one) is skipped, never
// shared. Later chunks are created concurrently, at most Parallelism at a time, which bounds the
// memory of a write whatever the size of the state.
type layWriter struct {
	s       *Store
	ctx     context.Context
	key     string
	hash    string
	next    int64 // the generation chunk 0 tries next
	payload int

	gen    int64 // owned generation, 0 until chunk 0 exists
	buf    []byte
	chunks int
	stored atomic.Int64
	eg     *errgroup.Group
	ectx   context.Context
}

func (s *Store) newLayWriter(ctx context.Context, key, hash string, first int64) *layWriter {
	payload := s.opts.ChunkSize
	if s.sealer != nil {
		payload -= gcmNonceSize + gcmTagSize
	}
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(s.opts.Parallelism)
	return &layWriter{s: s, ctx: ctx, key: key, hash: hash, next: first, payload: payload, eg: eg, ectx: ectx}
}

// Write buffers p and lays down every full chunk that more data follows.
func (w *layWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for len(w.buf) > w.payload {
		chunk := make([]byte, w.payload)
		copy(chunk, w.buf)
		w.buf = append(w.buf[:0], w.buf[w.payload:]...)
		if err := w.emit(chunk, false); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// finish lays down the last chunk and waits for every chunk: the generation, its chunk count
// and stored size.
func (w *layWriter) finish() (int64, int, int64, error) {
	last := w.buf
	w.buf = nil
	if err := w.emit(last, true); err != nil {
		return 0, 0, 0, err
	}
	if err := w.eg.Wait(); err != nil {
		return 0, 0, 0, err
	}
	return w.gen, w.chunks, w.stored.Load(), nil
}

// abort waits for the chunks in flight and deletes the generation laid down so far.
func (w *layWriter) abort() {
	_ = w.eg.Wait()
	if w.gen != 0 {
		w.s.deleteGeneration(context.WithoutCancel(w.ctx), w.key, w.hash, w.gen)
	}
}

func (w *layWriter) emit(plain []byte, last bool) error {
	i := w.chunks
	w.chunks++
	n := i + 1 // the count, for the last chunk; other chunks say more follow
	if !last {
		n = i + 2
	}
	if i == 0 {
		return w.claim(plain, n)
	}
	secrets := w.s.client.CoreV1().Secrets(w.s.namespace)
	w.eg.Go(func() error {
		sealed, err := w.s.sealChunk(plain, w.hash, w.gen, FormatStreamed, i, n)
		if err != nil {
			return err
		}
		w.stored.Add(int64(len(sealed)))
		sec := w.s.chunkSecret(w.key, w.hash, w.gen, i, chunkPosition(FormatStreamed, i, n), sealed)
		_, err = secrets.Create(w.ectx, sec, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// A leftover of a dead writer of this generation whose chunk 0 was already
			// collected; we own the generation now (we created chunk 0).
			if err = secrets.Delete(w.ectx, sec.Name, metav1.DeleteOptions{}); err == nil || apierrors.IsNotFound(err) {
				_, err = secrets.Create(w.ectx, sec, metav1.CreateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("state %q: write chunk %d of generation %d: %w", w.key, i, w.gen, err)
		}
		return nil
	})
	return nil
}

// claim creates chunk 0, taking the first free generation number from w.next on.
func (w *layWriter) claim(plain []byte, n int) error {
	secrets := w.s.client.CoreV1().Secrets(w.s.namespace)
	for gen := w.next; gen < w.next+maxLayDownAttempts; gen++ {
		sealed, err := w.s.sealChunk(plain, w.hash, gen, FormatStreamed, 0, n)
		if err != nil {
			return err
		}
		_, err = secrets.Create(w.ctx, w.s.chunkSecret(w.key, w.hash, gen, 0, chunkPosition(FormatStreamed, 0, n), sealed), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			w.s.log.LogAttrs(w.ctx, slog.LevelDebug, "generation taken, trying the next",
				slog.String("state_key", w.key), slog.Int64("generation", gen))
			continue
		}
		if err != nil {
			return fmt.Errorf("state %q: write chunk 0 of generation %d: %w", w.key, gen, err)
		}
		w.gen = gen
		w.stored.Add(int64(len(sealed)))
		return nil
	}
	return fmt.Errorf("state %q: %w: generations %d to %d are all taken", w.key, ErrConflict, w.next, w.next+maxLayDownAttempts-1)
}

// sealChunk encrypts a chunk when encryption is on, bound to its state, generation and place.
func (s *Store) sealChunk(plain []byte, hash string, gen int64, format, i, n int) ([]byte, error) {
	if s.sealer == nil {
		return plain, nil
	}
	return s.sealer.seal(plain, chunkAAD(hash, gen, chunkPosition(format, i, n)))
}

func (s *Store) chunkSecret(key, hash string, gen int64, i int, position string, data []byte) *corev1.Secret {
	labels := s.labels(hash, roleChunk)
	labels[LabelGeneration] = strconv.FormatInt(gen, 10)
	immutable := true
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      chunkName(hash, gen, i),
			Namespace: s.namespace,
			Labels:    labels,
			Annotations: map[string]string{
				AnnotationStateKey:  key,
				annotationChunk:     position,
				annotationChunkHash: sha256Hex(data),
			},
		},
		Type:      SecretTypeChunk,
		Immutable: &immutable,
		Data:      map[string][]byte{chunkDataKey: data},
	}
}
