package statestore

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzParseManifest decodes manifest Secrets with fuzzed data keys. A manifest Secret lives in
// the state namespace, where anyone with Secret write access could have edited it, so the decoder
// trusts nothing: it refuses with a *CorruptError (or ErrKeyCollision), never panics, and every
// generation it returns (current and history) has the sizes and chunk count a reader can act on
// without crashing: sizes not negative, 1 ≤ chunks ≤ max(1, stored size), a 64-character
// digest for the current one. An accepted manifest written back by manifestSecret decodes to the
// same generations.
// Seeds: testdata/fuzz/FuzzParseManifest (a real manifest, negative and huge sizes and chunk
// counts in the keys and in the history, bad history JSON, unknown formats and encodings).
func FuzzParseManifest(f *testing.F) {
	f.Add("3", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "0", "23", "1", "", "gzip", "7", "2026-11-23T17:00:00Z",
		`[{"generation":3,"writer":"job/d/1"},{"generation":2,"sha256":"x","size":5,"stored_size":30,"chunks":1,"encoding":"gzip"}]`)
	f.Fuzz(func(t *testing.T, gen, sha, size, stored, chunks, format, encoding, serial, updated, history string) {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tfstate-x", Annotations: map[string]string{AnnotationStateKey: "k"}},
			Data: map[string][]byte{keyGeneration: []byte(gen), keySHA256: []byte(sha), keySize: []byte(size), keyStoredSize: []byte(stored),
				keyChunks: []byte(chunks), keyFormat: []byte(format), keyEncoding: []byte(encoding), keySerial: []byte(serial),
				keyUpdatedAt: []byte(updated), keyHistory: []byte(history)}}
		m, err := parseManifest("k", sec)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) && !errors.Is(err, ErrKeyCollision) {
				t.Fatalf("refusal %v (%T) is not a *CorruptError", err, err)
			}
			return
		}
		if len(m.history) == 0 || !sameGenerations(m.history[:1], []Generation{m.current}) || len(m.current.SHA256) != 64 {
			t.Fatalf("current %+v, history %+v", m.current, m.history)
		}
		for _, g := range m.history {
			if g.Size < 0 || g.StoredSize < 0 || g.Chunks < 1 || int64(g.Chunks) > max(1, g.StoredSize) {
				t.Fatalf("accepted generation %d: size %d, stored %d, chunks %d", g.Generation, g.Size, g.StoredSize, g.Chunks)
			}
		}
		s := &Store{}
		m.current.UpdatedAt = m.current.UpdatedAt.Truncate(time.Nanosecond)
		back, err := s.manifestSecret("k", "x", m.current, m.history)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseManifest("k", back)
		if err != nil {
			t.Fatalf("a manifest written from an accepted one is refused: %v", err)
		}
		if !sameGenerations(again.history, m.history) {
			t.Fatalf("written back and read again:\n%+v\nwant\n%+v", again.history, m.history)
		}
	})
}

func sameGenerations(a, b []Generation) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !x.UpdatedAt.Equal(y.UpdatedAt) {
			return false
		}
		x.UpdatedAt, y.UpdatedAt = time.Time{}, time.Time{}
		if x != y {
			return false
		}
	}
	return true
}
