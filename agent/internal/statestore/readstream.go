package statestore

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reads stream too: chunks are fetched in order, a few ahead (Parallelism), checked, opened and
// decompressed straight into the caller's writer, and the state's size and SHA-256 are checked
// at the end. A caller that cannot take back what it already passed on (an HTTP response) must
// treat an error after open as a broken stream: the state backend aborts the response, so the
// CLI sees a truncated body, never a complete-looking wrong one.

// Stream writes the current state of key (gen 0) or one kept generation to the writer that
// open returns. open is called once, with the generation, right before the first byte: an error
// found before (a missing state, a generation collected under a racing reader) leaves the
// caller free to answer it as a whole. It returns the generation streamed.
func (s *Store) Stream(ctx context.Context, key string, gen int64, open func(Generation) io.Writer) (Generation, error) {
	if err := ValidateKey(key); err != nil {
		return Generation{}, err
	}
	for attempt := 0; ; attempt++ {
		m, err := s.getManifest(ctx, key)
		if err != nil {
			return Generation{}, err
		}
		g := m.current
		if gen != 0 {
			var ok bool
			if g, ok = m.find(gen); !ok {
				return Generation{}, &GenerationNotFoundError{Key: key, Generation: gen, Kept: m.kept()}
			}
		}
		lw := &lazyWriter{open: func() io.Writer { return open(g) }}
		err = s.streamGeneration(ctx, key, m.hash, g, lw)
		if err != nil && !lw.opened && attempt == 0 && gen == 0 && errors.Is(err, ErrCorrupt) {
			// A writer may have committed and collected in between: look again once.
			if again, rerr := s.getManifest(ctx, key); rerr == nil && again.current.Generation != g.Generation {
				continue
			}
		}
		return g, err
	}
}

// lazyWriter opens its writer at the first byte.
type lazyWriter struct {
	open   func() io.Writer
	w      io.Writer
	opened bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.opened {
		l.w, l.opened = l.open(), true
	}
	return l.w.Write(p)
}

// streamGeneration decompresses one generation into w and checks it.
func (s *Store) streamGeneration(ctx context.Context, key, hash string, g Generation, w io.Writer) error {
	var opener *sealer
	switch g.Encryption {
	case "":
	case EncryptionAESGCM:
		if opener = s.openers[g.KeyID]; opener == nil {
			return fmt.Errorf("state %q generation %d is encrypted with key %s: %w", key, g.Generation, g.KeyID, ErrEncryption)
		}
	default:
		return fmt.Errorf("state %q generation %d: unknown encryption %q: %w", key, g.Generation, g.Encryption, ErrEncryption)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cr := &chunkReader{s: s, ctx: ctx, key: key, hash: hash, g: g, opener: opener}
	cr.start()
	defer cr.stop()
	corrupt := func(detail string) error {
		if cr.err != nil {
			return cr.err
		}
		return &CorruptError{Key: key, Generation: g.Generation, Chunk: -1, Reason: ErrChecksum, Detail: detail}
	}
	zr, err := gzip.NewReader(cr)
	if err != nil {
		return corrupt("compressed stream damaged: " + err.Error())
	}
	zr.Multistream(false)
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(callerWriter{w}, sum), io.LimitReader(zr, g.Size+1))
	var werr *writeError
	switch {
	case errors.As(err, &werr):
		return werr.err
	case err != nil:
		return corrupt("compressed stream damaged: " + err.Error())
	case n != g.Size:
		return corrupt(fmt.Sprintf("decompressed size %d, manifest says %d", n, g.Size))
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != g.SHA256 {
		return corrupt(fmt.Sprintf("SHA-256 of the state is %s, manifest says %s", got, g.SHA256))
	}
	return nil
}

// writeError marks an error of the caller's writer, so it is not taken for damage.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

// callerWriter wraps the errors of the caller's writer in *writeError.
type callerWriter struct{ w io.Writer }

func (c callerWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil {
		return n, &writeError{err}
	}
	return n, nil
}

// chunkReader reads the chunk payloads of one generation in order, fetching at most
// Parallelism chunks ahead of the reader.
type chunkReader struct {
	s      *Store
	ctx    context.Context
	key    string
	hash   string
	g      Generation
	opener *sealer

	results []chan chunkResult
	slots   chan struct{}
	stopped chan struct{}
	next    int
	cur     []byte
	err     error
}

type chunkResult struct {
	data []byte
	err  error
}

func (r *chunkReader) start() {
	r.results = make([]chan chunkResult, r.g.Chunks)
	for i := range r.results {
		r.results[i] = make(chan chunkResult, 1)
	}
	r.slots = make(chan struct{}, r.s.opts.Parallelism)
	r.stopped = make(chan struct{})
	go func() {
		for i := range r.g.Chunks {
			select {
			case r.slots <- struct{}{}:
			case <-r.stopped:
				return
			}
			go func() { r.results[i] <- r.fetch(i) }()
		}
	}()
}

func (r *chunkReader) stop() { close(r.stopped) }

// Read implements io.Reader over the payloads; a damaged chunk is a *CorruptError.
func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.next == r.g.Chunks {
			return 0, io.EOF
		}
		res := <-r.results[r.next]
		<-r.slots
		r.next++
		if res.err != nil {
			r.err = res.err
			return 0, r.err
		}
		r.cur = res.data
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// fetch reads, checks and opens chunk i.
func (r *chunkReader) fetch(i int) chunkResult {
	g, name := r.g, chunkName(r.hash, r.g.Generation, i)
	corrupt := func(reason error, detail string) chunkResult {
		return chunkResult{err: &CorruptError{Key: r.key, Generation: g.Generation, Chunk: i, Object: name, Reason: reason, Detail: detail}}
	}
	secrets := r.s.client.CoreV1().Secrets(r.s.namespace)
	sec, err := secrets.Get(r.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if i == 0 && !r.anyChunk() {
			return corrupt(ErrGenerationMissing, fmt.Sprintf("none of its %d chunk secrets exist (deleted generation?)", g.Chunks))
		}
		return corrupt(ErrChunkMissing, fmt.Sprintf("chunk secret %d of %d is missing", i, g.Chunks))
	}
	if err != nil {
		return chunkResult{err: fmt.Errorf("state %q: read chunk %d of generation %d: %w", r.key, i, g.Generation, err)}
	}
	data := sec.Data[chunkDataKey]
	if want := sec.Annotations[annotationChunkHash]; want != "" && want != sha256Hex(data) {
		return corrupt(ErrChecksum, "chunk content does not match its SHA-256")
	}
	position := chunkPosition(g.Format, i, g.Chunks)
	if sec.Labels[LabelGeneration] != strconv.FormatInt(g.Generation, 10) || sec.Annotations[annotationChunk] != position {
		return corrupt(ErrChecksum, "chunk belongs to another generation or position")
	}
	if r.opener != nil {
		plain, err := r.opener.open(data, chunkAAD(r.hash, g.Generation, position))
		if err != nil {
			return corrupt(ErrChecksum, "chunk fails authentication: "+err.Error())
		}
		data = plain
	}
	return chunkResult{data: data}
}

// anyChunk reports whether any chunk of the generation exists.
func (r *chunkReader) anyChunk() bool {
	sel := fmt.Sprintf("%s=%s,%s=%s,%s=%d", LabelState, r.hash, LabelRole, roleChunk, LabelGeneration, r.g.Generation)
	l, err := r.s.client.CoreV1().Secrets(r.s.namespace).List(r.ctx, metav1.ListOptions{LabelSelector: sel, Limit: 1})
	return err != nil || len(l.Items) > 0
}
