// Package integration runs the state store against a real kube-apiserver (the project's test
// bed), where resourceVersion compare-and-swap, label selectors with "<", DeleteCollection,
// immutable Secrets and the Secret size limit are enforced by the real thing rather than by
// assumptions in a fake. The unit tests next to the store use a fake clientset and need no
// test bed.
package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m, testbed.Options{}) }

var quiet = slog.New(slog.DiscardHandler)

func state(lineage string, serial int, payload string) []byte {
	return fmt.Appendf(nil, `{"version":4,"terraform_version":"1.11.4","serial":%d,"lineage":%q,"outputs":{"p":{"value":%q,"type":"string"}},"resources":[],"check_results":null}`,
		serial, lineage, payload)
}

func randomHex(n int) string {
	b := make([]byte, n/2+1)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

func setup(t *testing.T) (kubernetes.Interface, string) {
	c := testbed.Shared(t)
	return c.Client(), testbed.NewNamespace(t, c)
}

func chunkNames(t *testing.T, c kubernetes.Interface, ns, key string) []string {
	t.Helper()
	l, err := c.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: statestore.LabelState + "=" + statestore.StateHash(key) + "," + statestore.LabelRole + "=chunk"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range l.Items {
		out = append(out, s.Name)
	}
	return out
}

// A 20 MiB state of hex text (≈10 MiB of gzip, a dozen chunks) goes through the real API
// server's 1 MiB Secret limit and comes back byte-identical.
func TestLargeStateRoundTrip(t *testing.T) {
	c, ns := setup(t)
	ctx := context.Background()
	s := mustStore(statestore.New(c, ns, statestore.Options{Logger: quiet}))
	big := state("big", 1, randomHex(20<<20))
	start := time.Now()
	g, err := s.Write(ctx, "big/state", big, statestore.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d MiB as %d chunks (%d KiB stored) in %v", len(big)>>20, g.Chunks, g.StoredSize>>10, time.Since(start))
	if g.Chunks < 10 {
		t.Errorf("only %d chunks for %d bytes", g.Chunks, len(big))
	}
	start = time.Now()
	got, _, err := s.Read(ctx, "big/state")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read back in %v", time.Since(start))
	if !bytes.Equal(got, big) {
		t.Fatal("20 MiB state not read back byte-identical")
	}
	// And once more with encryption on.
	es := mustStore(statestore.New(c, ns, statestore.Options{Logger: quiet, EncryptionKey: bytes.Repeat([]byte{7}, 32)}))
	if _, err := es.Write(ctx, "big/encrypted", big, statestore.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := es.Read(ctx, "big/encrypted"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("encrypted 20 MiB round trip: %v", err)
	}
}

// A write that dies between laying down its chunks and swapping the manifest leaves the
// previous generation current and intact; the next write collects the orphans (through a real
// DeleteCollection with a "generation<N" selector).
func TestCrashBetweenChunksAndSwap(t *testing.T) {
	c, ns := setup(t)
	ctx := context.Background()
	key := "crash/me"
	good := mustStore(statestore.New(c, ns, statestore.Options{Logger: quiet, ChunkSize: 256 << 10}))
	v1 := state("l", 1, randomHex(2<<20))
	if _, err := good.Write(ctx, key, v1, statestore.WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The "crash": the writer's context is cancelled right before the swap, as when the agent
	// process is killed; the hook reports it the way a dead process would (no cleanup).
	wctx, cancel := context.WithCancel(ctx)
	dying := mustStore(statestore.New(c, ns, statestore.Options{Logger: quiet, ChunkSize: 256 << 10,
		BeforeManifestSwap: func(ctx context.Context, key string, gen int64) error {
			cancel()
			return fmt.Errorf("killed before swapping to generation %d: %w", gen, context.Canceled)
		}}))
	if _, err := dying.Write(wctx, key, state("l", 2, randomHex(3<<20)), statestore.WriteOptions{}); err == nil {
		t.Fatal("the dying write succeeded")
	}
	got, g, err := good.Read(ctx, key)
	if err != nil || g.Generation != 1 || !bytes.Equal(got, v1) {
		t.Fatalf("after the crash: generation %d, err %v, intact %v", g.Generation, err, bytes.Equal(got, v1))
	}
	orphans := 0
	for _, n := range chunkNames(t, c, ns, key) {
		if strings.Contains(n, "-g2-") {
			orphans++
		}
	}
	if orphans == 0 {
		t.Fatal("no orphan chunks of generation 2: the crash came too late to test anything")
	}
	v3 := state("l", 3, "recovered")
	g3, err := good.Write(ctx, key, v3, statestore.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g3.Generation != 3 {
		t.Errorf("generation after the crash = %d, want 3", g3.Generation)
	}
	for _, n := range chunkNames(t, c, ns, key) {
		if strings.Contains(n, "-g2-") {
			t.Errorf("orphan %s not collected", n)
		}
	}
	if got, _, err := good.ReadGeneration(ctx, key, 1); err != nil || !bytes.Equal(got, v1) {
		t.Errorf("generation 1 lost: %v", err)
	}
}

// Writers racing without a lock: the manifest compare-and-swap lets each write either commit
// whole or fail with ErrConflict; the state is always one of the committed writes, never a mix.
func TestConcurrentWritersCAS(t *testing.T) {
	c, ns := setup(t)
	ctx := context.Background()
	key := "race"
	s := mustStore(statestore.New(c, ns, statestore.Options{Logger: quiet, ChunkSize: 64 << 10}))
	if _, err := s.Write(ctx, key, state("l", 0, "base"), statestore.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	const writers = 6
	var wg sync.WaitGroup
	var mu sync.Mutex
	committed := map[string][]byte{}
	conflicts := 0
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := state("l", i+1, randomHex(300<<10))
			g, err := s.Write(ctx, key, body, statestore.WriteOptions{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				committed[g.SHA256] = body
			case errors.Is(err, statestore.ErrConflict):
				conflicts++
			default:
				t.Errorf("writer %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d committed, %d conflicts", len(committed), conflicts)
	if len(committed) == 0 {
		t.Fatal("no writer committed")
	}
	got, g, err := s.Read(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if want, ok := committed[g.SHA256]; !ok || !bytes.Equal(got, want) {
		t.Fatal("current state is not one of the committed writes")
	}
	// One more write collects everything not kept.
	if _, err := s.Write(ctx, key, state("l", 99, "final"), statestore.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	h, _ := s.History(ctx, key)
	kept := map[string]bool{}
	for _, g := range h {
		kept[fmt.Sprintf("-g%d-", g.Generation)] = true
	}
	for _, n := range chunkNames(t, c, ns, key) {
		ok := false
		for k := range kept {
			ok = ok || strings.Contains(n, k)
		}
		if !ok {
			t.Errorf("chunk %s belongs to no kept generation", n)
		}
	}
}

// Locks on real Leases: conflict, expiry after the holder stops renewing, takeover, and
// renewals keeping a lock past its duration.
func TestLeaseLocks(t *testing.T) {
	c, ns := setup(t)
	ctx := context.Background()
	s := mustStore(statestore.New(c, ns, statestore.Options{Logger: quiet, LockDuration: 2 * time.Second}))
	key := "locks/a"
	a := statestore.LockInfo{ID: "a-1", Operation: "OperationTypeApply", Who: "a@pod", Holder: "job/a/1", Created: time.Now()}
	b := statestore.LockInfo{ID: "b-1", Operation: "OperationTypePlan", Who: "b@pod", Holder: "job/b/1", Created: time.Now()}
	if err := s.Lock(ctx, key, a); err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- keepAlive(kctx, s, key, a.ID, 300*time.Millisecond) }()
	time.Sleep(3 * time.Second) // longer than the lock duration: only renewals keep it
	var le *statestore.LockedError
	if err := s.Lock(ctx, key, b); !errors.As(err, &le) || le.Lock.Info.ID != "a-1" || le.Lock.Info.Who != "a@pod" {
		t.Fatalf("lock while renewed = %v", err)
	}
	stop() // the holder "dies"
	if err := <-done; err != nil {
		t.Errorf("renewals after cancel = %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.Lock(ctx, key, b)
		if err == nil {
			break
		}
		if !errors.Is(err, statestore.ErrLocked) || time.Now().After(deadline) {
			t.Fatalf("lock after the holder died = %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := s.Renew(ctx, key, a.ID); !errors.Is(err, statestore.ErrLockMismatch) {
		t.Errorf("dead holder's renewal = %v", err)
	}
	if _, err := s.ForceUnlock(ctx, key); err != nil {
		t.Fatal(err)
	}
	if l, err := s.LockInfo(ctx, key); err != nil || l != nil {
		t.Errorf("after force-unlock: %+v %v", l, err)
	}
}

// mustStore is statestore.New for tests: a configuration error panics.
func mustStore(s *statestore.Store, err error) *statestore.Store {
	if err != nil {
		panic(err)
	}
	return s
}

// keepAlive renews the lock held by lockID every interval until ctx is done (then it returns
// nil) or the lock is lost (then it returns the error of Renew), as the state backend does for
// the locks it granted.
func keepAlive(ctx context.Context, s *statestore.Store, key, lockID string, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := s.Renew(ctx, key, lockID); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// Fifteen writes with the default options keep ten versions, newest first, each readable byte for
// byte with its serial and resource count, and the chunks of the five dropped ones are gone from
// the API server. A maximum age then drops every kept version older than it, but never the
// current one.
func TestVersionsKeptAndPruned(t *testing.T) {
	c, ns := setup(t)
	ctx := context.Background()
	now := time.Now()
	clock := func() time.Time { return now }
	s := mustStore(statestore.New(c, ns, statestore.Options{Logger: quiet, Now: clock}))
	const key = "team/versions"
	var written [][]byte
	for i := 1; i <= 15; i++ {
		body := fmt.Appendf(nil, `{"version":4,"serial":%d,"lineage":"L","resources":[%s],"outputs":{}}`, i,
			strings.TrimSuffix(strings.Repeat(`{"mode":"managed","type":"terraform_data","name":"x","instances":[]},`, i), ","))
		written = append(written, body)
		if _, err := s.Write(ctx, key, body, statestore.WriteOptions{Writer: fmt.Sprintf("job/dep-%d/1", i)}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Hour)
	}
	h, err := s.History(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 10 {
		t.Fatalf("%d versions kept, want 10", len(h))
	}
	for i, g := range h {
		serial := int64(15 - i)
		if g.Serial != serial || g.Resources != serial || g.Writer != fmt.Sprintf("job/dep-%d/1", serial) {
			t.Errorf("version %d: serial %d, %d resources, writer %q; want serial %d", i, g.Serial, g.Resources, g.Writer, serial)
		}
		got, _, err := s.ReadGeneration(ctx, key, g.Generation)
		if err != nil || !bytes.Equal(got, written[serial-1]) {
			t.Errorf("generation %d (serial %d): err %v, same bytes %v", g.Generation, serial, err, bytes.Equal(got, written[serial-1]))
		}
	}
	if n := len(chunkNames(t, c, ns, key)); n != 10 {
		t.Errorf("%d chunk Secrets left, want the 10 of the kept versions", n)
	}

	// Versions are an hour apart: a 3h30m maximum age keeps the new one and the three before it.
	aged := mustStore(statestore.New(c, ns, statestore.Options{Logger: quiet, Now: clock, MaxGenerationAge: 3*time.Hour + 30*time.Minute}))
	if _, err := aged.Write(ctx, key, state("L", 16, "x"), statestore.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if h, _ = aged.History(ctx, key); len(h) != 4 || h[0].Serial != 16 || h[3].Serial != 13 {
		t.Errorf("after a write with a maximum age: %d versions (serials %d…%d), want 16…13", len(h), h[0].Serial, h[len(h)-1].Serial)
	}
	if n := len(chunkNames(t, c, ns, key)); n != 4 {
		t.Errorf("%d chunk Secrets left, want 4", n)
	}
	// Long after: the current version alone stays.
	now = now.Add(48 * time.Hour)
	if _, err := aged.Write(ctx, key, state("L", 17, "y"), statestore.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if h, _ = aged.History(ctx, key); len(h) != 1 || h[0].Serial != 17 {
		t.Errorf("two days later: %d versions, want only the current one", len(h))
	}
}
