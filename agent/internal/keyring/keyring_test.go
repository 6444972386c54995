package keyring

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

func newKey(t *testing.T) (ed25519.PrivateKey, []byte) {
	t.Helper()
	_, priv, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	p, err := keys.EncodePrivatePEM(priv)
	if err != nil {
		t.Fatal(err)
	}
	return priv, []byte(p)
}

func TestRingKeepsTheKeysItReplaced(t *testing.T) {
	a, _ := newKey(t)
	b, _ := newKey(t)
	c, _ := newKey(t)
	d, _ := newKey(t)
	r := New()
	var seen [][]ed25519.PrivateKey
	r.Subscribe(func(ks []ed25519.PrivateKey) { seen = append(seen, ks) })
	select {
	case <-r.Loaded():
		t.Fatal("an empty ring says it is loaded")
	default:
	}
	if !r.Set(a) || r.Set(a) {
		t.Fatal("Set must report a change once, then none for the same key")
	}
	<-r.Loaded()
	r.Set(b)
	if ks := r.Keys(); len(ks) != 2 || !ks[0].Equal(b) || !ks[1].Equal(a) {
		t.Fatalf("after a rotation: %d keys, want b then a", len(ks))
	}
	// The source's previous key goes right behind the current one; the ring keeps maxKeys.
	r.Set(d, c)
	ks := r.Keys()
	if len(ks) != maxKeys || !ks[0].Equal(d) || !ks[1].Equal(c) || !ks[2].Equal(b) {
		t.Fatalf("keys = %v, want d, c, b", r.Fingerprints())
	}
	if len(seen) != 3 {
		t.Fatalf("subscribers were told %d times, want 3 (one per change)", len(seen))
	}
	if Fingerprint(d) != r.Fingerprints()[0] || !strings.HasPrefix(Fingerprint(d), "SHA256:") {
		t.Fatalf("fingerprint %q", Fingerprint(d))
	}
}

// collect records the reports of a source.
type collect struct {
	mu   sync.Mutex
	errs []error
}

func (c *collect) report(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

func (c *collect) last() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) == 0 {
		return 0, nil
	}
	return len(c.errs), c.errs[len(c.errs)-1]
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFileSource(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "private-key.pem")
	if err := os.WriteFile(path, []byte("SECRET-MATERIAL"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, c := New(), &collect{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go FileSource{Path: path, Interval: 10 * time.Millisecond}.Run(ctx, r, c.report)
	waitUntil(t, "a report", func() bool { n, _ := c.last(); return n > 0 })
	_, err := c.last()
	if err == nil || strings.Contains(err.Error(), "SECRET-MATERIAL") || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "--private-key-file") {
		t.Fatalf("a file without a key: %v (must name the file and the flag, never the content)", err)
	}

	k1, p1 := newKey(t)
	k2, p2 := newKey(t)
	// The previous key of a mounted Secret sits next to the current one.
	if err := os.WriteFile(filepath.Join(dir, keys.SecretKeyPrevious), p1, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, p2, 0o600); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the keys", func() bool { return len(r.Keys()) == 2 })
	if ks := r.Keys(); !ks[0].Equal(k2) || !ks[1].Equal(k1) {
		t.Fatal("want the current key, then the previous one")
	}
	if _, err := c.last(); err != nil {
		t.Fatalf("last report %v after the keys were loaded", err)
	}
	n, _ := c.last()
	time.Sleep(50 * time.Millisecond)
	if m, _ := c.last(); m != n {
		t.Fatalf("%d more reports with nothing changed; a report is for a change of outcome", m-n)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the missing file to be reported", func() bool { _, err := c.last(); return err != nil })
	if ks := r.Keys(); len(ks) != 2 {
		t.Fatal("a key file that went away must leave the keys held in place")
	}
}

func TestSecretSourceFollowsTheSecret(t *testing.T) {
	k1, p1 := newKey(t)
	k2, p2 := newKey(t)
	cs := fake.NewClientset()
	src := SecretSource{Client: cs.CoreV1(), Namespace: "outpost", Name: "runner-key"}
	r, c := New(), &collect{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go src.Run(ctx, r, c.report)

	waitUntil(t, "a report", func() bool { n, _ := c.last(); return n > 0 })
	if _, err := c.last(); err == nil || !strings.Contains(err.Error(), "outpost/runner-key does not exist") || !strings.Contains(err.Error(), "privateKey.existingSecret") {
		t.Fatalf("a missing Secret: %v", err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "runner-key", Namespace: "outpost"}, Data: map[string][]byte{"private-key.pem": p1}}
	if _, err := cs.CoreV1().Secrets("outpost").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first key", func() bool { return r.Current() != nil })
	if !r.Current().Equal(k1) {
		t.Fatal("wrong key loaded")
	}

	// outpost_key_pair's rotation: the new key, and the one it replaced under keys.SecretKeyPrevious.
	sec.Data = map[string][]byte{"private-key.pem": p2, keys.SecretKeyPrevious: p1}
	if _, err := cs.CoreV1().Secrets("outpost").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the rotated key", func() bool { return r.Current().Equal(k2) })
	if ks := r.Keys(); len(ks) != 2 || !ks[1].Equal(k1) {
		t.Fatalf("after the rotation %d keys; want the new, then the old", len(ks))
	}

	// A bad write and a delete are reported; the keys held stay.
	sec.Data = map[string][]byte{"private-key.pem": []byte("SECRET-MATERIAL")}
	if _, err := cs.CoreV1().Secrets("outpost").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the bad key to be reported", func() bool { _, err := c.last(); return err != nil })
	if _, err := c.last(); strings.Contains(err.Error(), "SECRET-MATERIAL") || !strings.Contains(err.Error(), `data key "private-key.pem"`) {
		t.Fatalf("a Secret without a key: %v", err)
	}
	if err := cs.CoreV1().Secrets("outpost").Delete(ctx, "runner-key", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the delete to be reported", func() bool { _, err := c.last(); return err != nil && strings.Contains(err.Error(), "deleted") })
	if !r.Current().Equal(k2) {
		t.Fatal("the keys held must stay when the Secret goes")
	}
}
