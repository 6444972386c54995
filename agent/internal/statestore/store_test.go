package statestore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

const testNS = "states"

var quiet = slog.New(slog.DiscardHandler)

// testState returns a minimal valid state document with payload in an output.
func testState(lineage string, serial int, payload string) []byte {
	return fmt.Appendf(nil, `{"version":4,"terraform_version":"1.11.4","serial":%d,"lineage":%q,"outputs":{"p":{"value":%q,"type":"string"}},"resources":[],"check_results":null}`,
		serial, lineage, payload)
}

// randomHex returns n bytes of hex text: it compresses to about half, like real state with ids.
func randomHex(n int) string {
	b := make([]byte, n/2+1)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

func newTestStore(t *testing.T, opts Options) (*Store, kubernetes.Interface) {
	t.Helper()
	c := newFakeClient()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	return mustStore(New(c, testNS, opts)), c
}

func listChunks(t *testing.T, c kubernetes.Interface, key string) []string {
	t.Helper()
	l, err := c.CoreV1().Secrets(testNS).List(context.Background(), metav1.ListOptions{
		LabelSelector: LabelState + "=" + StateHash(key) + "," + LabelRole + "=chunk"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range l.Items {
		out = append(out, s.Name)
	}
	return out
}

func TestNames(t *testing.T) {
	keys := []string{"a", "team-a/prod/network", "UPPER_case with spaces", "ünïcødé/ключ", strings.Repeat("x", MaxKeyLength)}
	seen := map[string]string{}
	for _, k := range keys {
		h := StateHash(k)
		if len(h) != 32 {
			t.Errorf("hash %q of %q: length %d", h, k, len(h))
		}
		if errs := validation.IsDNS1123Label(h); len(errs) > 0 {
			t.Errorf("hash %q not a DNS-1123 label: %v", h, errs)
		}
		if errs := validation.IsValidLabelValue(h); len(errs) > 0 {
			t.Errorf("hash %q not a label value: %v", h, errs)
		}
		for _, n := range []string{ManifestName(k), ChunkName(k, 1<<40, 9999), LeaseName(k)} {
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 || len(n) > 253 {
				t.Errorf("name %q invalid: %v", n, errs)
			}
			if n == ManifestName(k) && len(n) > 63 {
				t.Errorf("manifest name %q longer than 63", n)
			}
		}
		if StateHash(k) != h {
			t.Error("hash not deterministic")
		}
		if other, dup := seen[h]; dup {
			t.Errorf("keys %q and %q share hash %s", k, other, h)
		}
		seen[h] = k
	}
	if got := ChunkName("a", 7, 2); got != "tfstate-"+StateHash("a")+"-g7-2" {
		t.Errorf("ChunkName = %s", got)
	}
	for _, bad := range []string{"", strings.Repeat("x", MaxKeyLength+1), "a\nb", string([]byte{0xff})} {
		if err := ValidateKey(bad); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v", bad, err)
		}
	}
}

func TestParseState(t *testing.T) {
	good := []string{
		string(testState("l-1", 0, "x")),
		`{"version":3,"serial":12,"lineage":"abc","modules":[]}`,
		`{"encrypted_data":"AAAA","encryption_version":"v0","meta":{}}`,
	}
	for _, g := range good {
		if _, err := ParseState([]byte(g)); err != nil {
			t.Errorf("ParseState(%s) = %v", g, err)
		}
	}
	m, _ := ParseState(testState("lin", 42, ""))
	if m.Lineage != "lin" || m.Serial != 42 || m.Version != 4 || m.TerraformVersion != "1.11.4" {
		t.Errorf("meta = %+v", m)
	}
	bad := []string{
		"", "null", "[]", `"x"`, "<html>502 Bad Gateway</html>", `{"version":4,"serial":1}`,
		`{"version":4,"lineage":"x"}`, `{"serial":1,"lineage":"x"}`, `{"version":"4","serial":1,"lineage":"x"}`,
		`{"version":4,"serial":1.5,"lineage":"x"}`, `{"version":4,"serial":-1,"lineage":"x"}`,
		`{"version":4,"serial":1,"lineage":""}`, `{"version":4,"serial":1,"lineage":7}`,
		`{"version":4,"serial":1,"lineage":"x"`, `{"encrypted_data":"AAAA"}`,
	}
	for _, b := range bad {
		if _, err := ParseState([]byte(b)); !errors.Is(err, ErrInvalidState) {
			t.Errorf("ParseState(%q) = %v, want ErrInvalidState", b, err)
		}
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, c := newTestStore(t, Options{ChunkSize: 64 << 10})
	key := "team-a/prod/network"
	if _, _, err := s.Read(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read of absent state = %v, want ErrNotFound", err)
	}
	state := testState("lin-1", 1, randomHex(400<<10))
	g, err := s.Write(ctx, key, state, WriteOptions{Writer: "job/1/1"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Generation != 1 || g.Chunks < 3 || g.Size != int64(len(state)) || g.Serial != 1 || g.Lineage != "lin-1" || g.Writer != "job/1/1" {
		t.Errorf("generation = %+v", g)
	}
	got, rg, err := s.Read(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, state) || rg.Generation != 1 || rg.SHA256 != g.SHA256 {
		t.Fatalf("read back %d bytes (gen %d), want %d bytes", len(got), rg.Generation, len(state))
	}
	if n := len(listChunks(t, c, key)); n != g.Chunks {
		t.Errorf("%d chunk secrets, manifest says %d", n, g.Chunks)
	}
	man, err := c.CoreV1().Secrets(testNS).Get(ctx, ManifestName(key), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if man.Annotations[AnnotationStateKey] != key || man.Labels[LabelManagedBy] != ManagedByValue || man.Labels[LabelState] != StateHash(key) {
		t.Errorf("manifest metadata: %v %v", man.Labels, man.Annotations)
	}
	for _, k := range []string{"generation", "sha256", "size", "chunks", "encoding", "serial", "lineage", "updated-at"} {
		if len(man.Data[k]) == 0 {
			t.Errorf("manifest lacks %q", k)
		}
	}
	ch, err := c.CoreV1().Secrets(testNS).Get(ctx, ChunkName(key, 1, 0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Immutable == nil || !*ch.Immutable || len(ch.Data[chunkDataKey]) > 64<<10 || ch.Type != SecretTypeChunk {
		t.Errorf("chunk 0: immutable=%v size=%d type=%s", ch.Immutable, len(ch.Data[chunkDataKey]), ch.Type)
	}

	// Same bytes again: no new generation.
	if g2, err := s.Write(ctx, key, state, WriteOptions{}); err != nil || g2.Generation != 1 {
		t.Errorf("identical write: gen %d, %v", g2.Generation, err)
	}
	state2 := testState("lin-1", 2, "small now")
	if g3, err := s.Write(ctx, key, state2, WriteOptions{}); err != nil || g3.Generation != 2 || g3.Chunks != 1 {
		t.Fatalf("second write: %+v, %v", g3, err)
	}
	if got, _, _ := s.Read(ctx, key); !bytes.Equal(got, state2) {
		t.Error("second generation not read back")
	}
}

func TestWriteRefusesNonState(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestStore(t, Options{})
	key := "k"
	good := testState("l", 1, "keep me")
	if _, err := s.Write(ctx, key, good, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"", "not json", "<html>oops</html>", `{"version":4}`, "[1,2]"} {
		_, err := s.Write(ctx, key, []byte(body), WriteOptions{})
		if !errors.Is(err, ErrInvalidState) || !strings.Contains(err.Error(), `"k"`) {
			t.Errorf("Write(%q) = %v, want ErrInvalidState naming the key", body, err)
		}
	}
	got, g, err := s.Read(ctx, key)
	if err != nil || !bytes.Equal(got, good) || g.Generation != 1 {
		t.Errorf("state after refused writes: gen %d err %v", g.Generation, err)
	}
}

func TestCorruption(t *testing.T) {
	ctx := context.Background()
	key := "team/corrupt"
	setup := func(t *testing.T) (*Store, kubernetes.Interface) {
		s, c := newTestStore(t, Options{ChunkSize: 16 << 10})
		if _, err := s.Write(ctx, key, testState("l", 1, randomHex(100<<10)), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		return s, c
	}
	check := func(t *testing.T, s *Store, reason error, wantChunk string) {
		t.Helper()
		_, _, err := s.Read(ctx, key)
		var ce *CorruptError
		if !errors.Is(err, ErrCorrupt) || !errors.Is(err, reason) || !errors.As(err, &ce) {
			t.Fatalf("Read = %v, want ErrCorrupt/%v", err, reason)
		}
		msg := err.Error()
		if !strings.Contains(msg, `"team/corrupt"`) || !strings.Contains(msg, "generation 1") || !strings.Contains(msg, wantChunk) {
			t.Errorf("message %q should name the key, generation 1 and %q", msg, wantChunk)
		}
	}
	t.Run("flipped byte", func(t *testing.T) {
		s, c := setup(t)
		sec, _ := c.CoreV1().Secrets(testNS).Get(ctx, ChunkName(key, 1, 1), metav1.GetOptions{})
		sec.Data[chunkDataKey][100] ^= 0xff
		if _, err := c.CoreV1().Secrets(testNS).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		check(t, s, ErrChecksum, "chunk 1")
	})
	t.Run("flipped byte with rewritten chunk digest", func(t *testing.T) {
		s, c := setup(t)
		sec, _ := c.CoreV1().Secrets(testNS).Get(ctx, ChunkName(key, 1, 2), metav1.GetOptions{})
		sec.Data[chunkDataKey][5] ^= 0x01
		sec.Annotations[annotationChunkHash] = sha256Hex(sec.Data[chunkDataKey])
		if _, err := c.CoreV1().Secrets(testNS).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		check(t, s, ErrChecksum, "")
	})
	t.Run("missing chunk", func(t *testing.T) {
		s, c := setup(t)
		if err := c.CoreV1().Secrets(testNS).Delete(ctx, ChunkName(key, 1, 2), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		check(t, s, ErrChunkMissing, "chunk 2")
	})
	t.Run("manifest points at deleted generation", func(t *testing.T) {
		s, c := setup(t)
		for _, n := range listChunks(t, c, key) {
			_ = c.CoreV1().Secrets(testNS).Delete(ctx, n, metav1.DeleteOptions{})
		}
		check(t, s, ErrGenerationMissing, ChunkName(key, 1, 0))
	})
	t.Run("chunk of another generation", func(t *testing.T) {
		s, c := setup(t)
		sec, _ := c.CoreV1().Secrets(testNS).Get(ctx, ChunkName(key, 1, 0), metav1.GetOptions{})
		sec.Labels[LabelGeneration] = "7"
		_, _ = c.CoreV1().Secrets(testNS).Update(ctx, sec, metav1.UpdateOptions{})
		check(t, s, ErrChecksum, "chunk 0")
	})
}

func TestCrashBeforeSwapKeepsPreviousGeneration(t *testing.T) {
	ctx := context.Background()
	crash := errors.New("simulated crash")
	var crashNext bool
	s, c := newTestStore(t, Options{ChunkSize: 16 << 10, BeforeManifestSwap: func(context.Context, string, int64) error {
		if crashNext {
			return crash
		}
		return nil
	}})
	key := "crashy"
	v1 := testState("l", 1, randomHex(50<<10))
	if _, err := s.Write(ctx, key, v1, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	crashNext = true
	if _, err := s.Write(ctx, key, testState("l", 2, randomHex(60<<10)), WriteOptions{}); !errors.Is(err, crash) {
		t.Fatalf("crashing write = %v", err)
	}
	got, g, err := s.Read(ctx, key)
	if err != nil || !bytes.Equal(got, v1) || g.Generation != 1 {
		t.Fatalf("after crash: gen %d, err %v, equal %v", g.Generation, err, bytes.Equal(got, v1))
	}
	orphans := 0
	for _, n := range listChunks(t, c, key) {
		if strings.Contains(n, "-g2-") {
			orphans++
		}
	}
	if orphans == 0 {
		t.Fatal("expected orphan chunks of generation 2 after the crash")
	}
	crashNext = false
	v3 := testState("l", 3, "after")
	g3, err := s.Write(ctx, key, v3, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g3.Generation != 3 {
		t.Errorf("write after crash got generation %d, want 3 (2 is taken by the orphan)", g3.Generation)
	}
	for _, n := range listChunks(t, c, key) {
		if strings.Contains(n, "-g2-") {
			t.Errorf("orphan %s not collected", n)
		}
	}
	if got, _, _ := s.Read(ctx, key); !bytes.Equal(got, v3) {
		t.Error("state after recovery wrong")
	}
	if _, _, err := s.ReadGeneration(ctx, key, 1); err != nil {
		t.Errorf("generation 1 should still be kept: %v", err)
	}
}

func TestHistoryGCRestore(t *testing.T) {
	ctx := context.Background()
	s, c := newTestStore(t, Options{KeepGenerations: 3, ChunkSize: 8 << 10})
	key := "hist"
	states := map[int64][]byte{}
	for i := 1; i <= 7; i++ {
		st := testState("l", i, randomHex(10<<10))
		g, err := s.Write(ctx, key, st, WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		states[g.Generation] = st
	}
	h, err := s.History(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 3 || h[0].Generation != 7 || h[2].Generation != 5 || h[1].Serial != 6 {
		t.Fatalf("history = %+v", h)
	}
	for _, n := range listChunks(t, c, key) {
		if !strings.Contains(n, "-g5-") && !strings.Contains(n, "-g6-") && !strings.Contains(n, "-g7-") {
			t.Errorf("chunk %s of a dropped generation not collected", n)
		}
	}
	got, g, err := s.ReadGeneration(ctx, key, 5)
	if err != nil || !bytes.Equal(got, states[5]) || g.Serial != 5 {
		t.Fatalf("ReadGeneration(5): %v", err)
	}
	if _, _, err := s.ReadGeneration(ctx, key, 2); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "5, 6, 7") && !strings.Contains(err.Error(), "7, 6, 5") {
		t.Errorf("ReadGeneration(2) = %v", err)
	}
	rg, err := s.Restore(ctx, key, 5)
	if err != nil {
		t.Fatal(err)
	}
	if rg.Generation != 8 || !strings.Contains(rg.Source, "restore of generation 5") {
		t.Errorf("restore generation = %+v", rg)
	}
	if got, _, _ := s.Read(ctx, key); !bytes.Equal(got, states[5]) {
		t.Error("restored state differs")
	}
	if _, _, err := s.ReadGeneration(ctx, key, 7); err != nil {
		t.Errorf("generation 7 must survive the restore: %v", err)
	}

	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].Key != key || list[0].Current.Generation != 8 || list[0].Generations != 3 {
		t.Errorf("List = %+v, %v", list, err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := listChunks(t, c, key); len(n) != 0 {
		t.Errorf("chunks left after delete: %v", n)
	}
	if _, _, err := s.Read(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Errorf("read after delete = %v", err)
	}
	if err := s.Delete(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete = %v", err)
	}
}

func TestConcurrentWriterLosesCAS(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient()
	other := mustStore(New(c, testNS, Options{Logger: quiet}))
	key := "race"
	if _, err := other.Write(ctx, key, testState("l", 1, "base"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	winner := testState("l", 2, "winner")
	// A's swap window: B commits in between.
	a := mustStore(New(c, testNS, Options{Logger: quiet, BeforeManifestSwap: func(ctx context.Context, k string, gen int64) error {
		if _, err := other.Write(ctx, k, winner, WriteOptions{}); err != nil {
			t.Errorf("B's write: %v", err)
		}
		return nil
	}}))
	_, err := a.Write(ctx, key, testState("l", 2, "loser"), WriteOptions{})
	var ce *ConflictError
	if !errors.Is(err, ErrConflict) || !errors.As(err, &ce) || ce.Expected != 1 || ce.Current != 3 {
		t.Fatalf("A's write = %v (%+v)", err, ce)
	}
	got, g, err := other.Read(ctx, key)
	if err != nil || !bytes.Equal(got, winner) || g.Generation != 3 {
		t.Errorf("after race: gen %d, %v", g.Generation, err)
	}
	for _, n := range listChunks(t, c, key) {
		if strings.Contains(n, "-g2-") {
			t.Errorf("loser's chunk %s left behind", n)
		}
	}
}

func TestEncryption(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient()
	k1 := bytes.Repeat([]byte{1}, 32)
	k2 := bytes.Repeat([]byte{2}, 32)
	s1 := mustStore(New(c, testNS, Options{Logger: quiet, EncryptionKey: k1, ChunkSize: 16 << 10}))
	key := "secret/state"
	secretPayload := "TOP-SECRET-" + randomHex(40<<10)
	st := testState("l", 1, secretPayload)
	g, err := s1.Write(ctx, key, st, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g.Encryption != EncryptionAESGCM || g.KeyID != KeyID(k1) || g.Chunks < 2 {
		t.Errorf("generation = %+v", g)
	}
	for _, n := range listChunks(t, c, key) {
		sec, _ := c.CoreV1().Secrets(testNS).Get(ctx, n, metav1.GetOptions{})
		if len(sec.Data[chunkDataKey]) > 16<<10 {
			t.Errorf("sealed chunk %s is %d bytes, over the chunk size", n, len(sec.Data[chunkDataKey]))
		}
	}
	if got, _, err := s1.Read(ctx, key); err != nil || !bytes.Equal(got, st) {
		t.Fatalf("encrypted round trip: %v", err)
	}
	plain := mustStore(New(c, testNS, Options{Logger: quiet}))
	if _, _, err := plain.Read(ctx, key); !errors.Is(err, ErrEncryption) || !strings.Contains(err.Error(), KeyID(k1)) {
		t.Errorf("read without key = %v", err)
	}
	wrong := mustStore(New(c, testNS, Options{Logger: quiet, EncryptionKey: k2}))
	if _, _, err := wrong.Read(ctx, key); !errors.Is(err, ErrEncryption) {
		t.Errorf("read with the wrong key = %v", err)
	}
	// Rotation: k2 with k1 as a decryption key reads, and the next write re-seals with k2.
	rot := mustStore(New(c, testNS, Options{Logger: quiet, EncryptionKey: k2, DecryptionKeys: [][]byte{k1}, ChunkSize: 16 << 10}))
	if got, _, err := rot.Read(ctx, key); err != nil || !bytes.Equal(got, st) {
		t.Fatalf("rotated read: %v", err)
	}
	g2, err := rot.Write(ctx, key, st, WriteOptions{})
	if err != nil || g2.KeyID != KeyID(k2) || g2.Generation != 2 {
		t.Fatalf("re-seal: %+v %v", g2, err)
	}
	// Swapping two sealed chunks (each authentic on its own) is detected.
	a, _ := c.CoreV1().Secrets(testNS).Get(ctx, ChunkName(key, 2, 0), metav1.GetOptions{})
	b, _ := c.CoreV1().Secrets(testNS).Get(ctx, ChunkName(key, 2, 1), metav1.GetOptions{})
	a.Data, b.Data = b.Data, a.Data
	a.Annotations[annotationChunkHash], b.Annotations[annotationChunkHash] = sha256Hex(a.Data[chunkDataKey]), sha256Hex(b.Data[chunkDataKey])
	_, _ = c.CoreV1().Secrets(testNS).Update(ctx, a, metav1.UpdateOptions{})
	_, _ = c.CoreV1().Secrets(testNS).Update(ctx, b, metav1.UpdateOptions{})
	if _, _, err := rot.Read(ctx, key); !errors.Is(err, ErrCorrupt) {
		t.Errorf("swapped chunks read = %v, want ErrCorrupt", err)
	}
	if _, err := New(c, testNS, Options{EncryptionKey: []byte("short")}); err == nil {
		t.Error("short key accepted")
	}
}

func TestKeyCollisionDetected(t *testing.T) {
	ctx := context.Background()
	s, c := newTestStore(t, Options{})
	if _, err := s.Write(ctx, "a", testState("l", 1, ""), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	sec, _ := c.CoreV1().Secrets(testNS).Get(ctx, ManifestName("a"), metav1.GetOptions{})
	sec.Annotations[AnnotationStateKey] = "b"
	_, _ = c.CoreV1().Secrets(testNS).Update(ctx, sec, metav1.UpdateOptions{})
	if _, _, err := s.Read(ctx, "a"); !errors.Is(err, ErrKeyCollision) {
		t.Errorf("Read = %v", err)
	}
	if _, err := s.Write(ctx, "a", testState("l", 2, ""), WriteOptions{}); !errors.Is(err, ErrKeyCollision) {
		t.Errorf("Write = %v", err)
	}
}

// ChunkName is the name of chunk i of generation gen of a state.
func ChunkName(key string, gen int64, i int) string {
	return chunkName(StateHash(key), gen, i)
}

// mustStore is New for tests: a configuration error panics.
func mustStore(s *Store, err error) *Store {
	if err != nil {
		panic(err)
	}
	return s
}
