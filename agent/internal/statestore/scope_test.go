package statestore

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Two organisations' agents keep the same state key in one namespace: each sees only its own,
// and neither can lock, overwrite or delete the other's.
func TestScopesShareANamespaceWithoutMeeting(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient()
	acme := mustStore(New(c, testNS, Options{Scope: "acme", Logger: quiet, ChunkSize: 8 << 10}))
	beta := mustStore(New(c, testNS, Options{Scope: "beta", Logger: quiet, ChunkSize: 8 << 10}))
	key := "prod/network"
	va, vb := testState("a", 1, randomHex(40<<10)), testState("b", 1, "beta's")
	if _, err := acme.Write(ctx, key, va, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := beta.Read(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("beta reads acme's state: %v", err)
	}
	if _, err := beta.Write(ctx, key, vb, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := beta.Lock(ctx, key, LockInfo{ID: "beta-lock"}); err != nil {
		t.Fatal(err)
	}
	if err := acme.Lock(ctx, key, LockInfo{ID: "acme-lock"}); err != nil {
		t.Fatalf("beta's lock blocks acme: %v", err)
	}
	if got, _, _ := acme.Read(ctx, key); !bytes.Equal(got, va) {
		t.Error("acme's state changed")
	}
	if got, _, _ := beta.Read(ctx, key); !bytes.Equal(got, vb) {
		t.Error("beta's state changed")
	}
	for _, s := range []*Store{acme, beta} {
		list, err := s.List(ctx)
		if err != nil || len(list) != 1 || list[0].Key != key {
			t.Errorf("%s lists %+v, %v", s.opts.Scope, list, err)
		}
		locks, err := s.ListLocks(ctx)
		if err != nil || len(locks) != 1 || locks[0].Lock.Info.ID != s.opts.Scope+"-lock" {
			t.Errorf("%s lists locks %+v, %v", s.opts.Scope, locks, err)
		}
	}
	_, _ = beta.ForceUnlock(ctx, key)
	if err := beta.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if got, _, err := acme.Read(ctx, key); err != nil || !bytes.Equal(got, va) {
		t.Errorf("beta's delete touched acme's state: %v", err)
	}
	objs, _ := c.CoreV1().Secrets(testNS).List(ctx, metav1.ListOptions{LabelSelector: LabelOrg + "=acme"})
	for _, o := range objs.Items {
		if !strings.Contains(o.Name, ScopedHash("acme", key)) {
			t.Errorf("acme's object %s is not named by its scoped hash", o.Name)
		}
	}
}

// A state written before states were scoped stays readable by a scoped Store, moves to the
// scoped names on its next write, and its unscoped objects go.
func TestLegacyStateMovesToItsScope(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient()
	old := mustStore(New(c, testNS, Options{Logger: quiet, ChunkSize: 8 << 10}))
	key := "prod/app"
	v1 := testState("l", 1, randomHex(30<<10))
	if _, err := old.Write(ctx, key, v1, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	scoped := mustStore(New(c, testNS, Options{Scope: "acme", Logger: quiet, ChunkSize: 8 << 10}))
	if got, _, err := scoped.Read(ctx, key); err != nil || !bytes.Equal(got, v1) {
		t.Fatalf("the legacy state is not readable: %v", err)
	}
	if list, _ := scoped.List(ctx); len(list) != 1 || list[0].Key != key {
		t.Errorf("List = %+v", list)
	}
	v2 := testState("l", 2, "moved")
	if _, err := scoped.Write(ctx, key, v2, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := scoped.Read(ctx, key); err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("read after the move: %v", err)
	}
	if _, _, err := old.Read(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Errorf("the unscoped copy is still there: %v", err)
	}
	if n := len(listChunks(t, c, key)); n != 0 {
		t.Errorf("%d unscoped chunks left", n)
	}
	// Another organisation never sees it.
	other := mustStore(New(c, testNS, Options{Scope: "beta", Logger: quiet}))
	if _, _, err := other.Read(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Errorf("beta reads acme's moved state: %v", err)
	}
}

// Generations written before streaming (every chunk "i/n", sealed with n) still read, with and
// without encryption.
func TestCountedFormatStillReads(t *testing.T) {
	ctx := context.Background()
	for _, key := range [][]byte{nil, bytes.Repeat([]byte{7}, 32)} {
		s, c := newTestStore(t, Options{ChunkSize: 8 << 10, EncryptionKey: key})
		state := testState("l", 1, randomHex(40<<10))
		g, err := s.Write(ctx, "k", state, WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Rewrite the generation as the counted format stores it.
		hash := StateHash("k")
		for i := range g.Chunks {
			sec, _ := c.CoreV1().Secrets(testNS).Get(ctx, ChunkName("k", 1, i), metav1.GetOptions{})
			data := sec.Data[chunkDataKey]
			if s.sealer != nil {
				plain, err := s.sealer.open(data, chunkAAD(hash, 1, chunkPosition(FormatStreamed, i, g.Chunks)))
				if err != nil {
					t.Fatal(err)
				}
				data, _ = s.sealer.seal(plain, chunkAAD(hash, 1, chunkPosition(FormatCounted, i, g.Chunks)))
			}
			sec.Data[chunkDataKey] = data
			sec.Annotations[annotationChunk] = chunkPosition(FormatCounted, i, g.Chunks)
			sec.Annotations[annotationChunkHash] = sha256Hex(data)
			_, _ = c.CoreV1().Secrets(testNS).Update(ctx, sec, metav1.UpdateOptions{})
		}
		man, _ := c.CoreV1().Secrets(testNS).Get(ctx, ManifestName("k"), metav1.GetOptions{})
		delete(man.Data, keyFormat)
		man.Data[keyHistory] = bytes.ReplaceAll(man.Data[keyHistory], []byte(`"format":1,`), nil)
		_, _ = c.CoreV1().Secrets(testNS).Update(ctx, man, metav1.UpdateOptions{})
		if got, rg, err := s.Read(ctx, "k"); err != nil || !bytes.Equal(got, state) || rg.Format != FormatCounted {
			t.Fatalf("counted generation (encrypted %v): format %d, %v", key != nil, rg.Format, err)
		}
		// A streamed chunk's marker is not accepted in the counted format, and the other way round.
		sec, _ := c.CoreV1().Secrets(testNS).Get(ctx, ChunkName("k", 1, 0), metav1.GetOptions{})
		sec.Annotations[annotationChunk] = chunkPosition(FormatStreamed, 0, g.Chunks)
		_, _ = c.CoreV1().Secrets(testNS).Update(ctx, sec, metav1.UpdateOptions{})
		if _, _, err := s.Read(ctx, "k"); !errors.Is(err, ErrCorrupt) {
			t.Errorf("a chunk in the wrong format read: %v", err)
		}
	}
}

// A streamed generation whose last chunk is dropped, and its manifest made to count one chunk
// less, does not read: the new last chunk says more follow.
func TestStreamedChunksCannotBeDroppedFromTheEnd(t *testing.T) {
	ctx := context.Background()
	s, c := newTestStore(t, Options{ChunkSize: 8 << 10})
	g, err := s.Write(ctx, "k", testState("l", 1, randomHex(40<<10)), WriteOptions{})
	if err != nil || g.Chunks < 3 {
		t.Fatalf("write: %+v, %v", g, err)
	}
	_ = c.CoreV1().Secrets(testNS).Delete(ctx, ChunkName("k", 1, g.Chunks-1), metav1.DeleteOptions{})
	man, _ := c.CoreV1().Secrets(testNS).Get(ctx, ManifestName("k"), metav1.GetOptions{})
	man.Data[keyChunks] = []byte(strconv.Itoa(g.Chunks - 1))
	_, _ = c.CoreV1().Secrets(testNS).Update(ctx, man, metav1.UpdateOptions{})
	if _, _, err := s.Read(ctx, "k"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("truncated generation read: %v", err)
	}
}
