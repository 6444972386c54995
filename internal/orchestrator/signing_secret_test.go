package orchestrator

import (
	"bytes"
	"encoding/hex"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/bolt"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/engines"
	"go.etcd.io/bbolt"
)

// dbSecret returns what the database file keeps under the legacy key; the server must be closed.
func dbSecret(t *testing.T, dir string, put []byte) []byte {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(dir, bolt.DBFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got []byte
	if err := db.Update(func(tx *bbolt.Tx) error {
		if put != nil {
			return tx.Bucket(bolt.BucketMeta).Put(bolt.LegacySecretKey, put)
		}
		got = bytes.Clone(tx.Bucket(bolt.BucketMeta).Get(bolt.LegacySecretKey))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func jobSpecCode(h *harness, token string) int {
	return h.job(token, http.MethodGet, "/api/v1/job/spec", "", nil).code
}

func TestSigningSecretIsKeptOutsideTheDatabase(t *testing.T) {
	t.Parallel()
	h := newHarness(t, onBolt)
	a := h.setupRunner("acme", "r1", 1)
	c := a.claim(h.deploy(api.OperationApply).ID, 1, "pod-a")
	file := filepath.Join(h.cfg.DataDir, store.SigningSecretFile)
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("signing secret file %v (%v), want mode 0600", st, err)
	}
	raw, _ := os.ReadFile(file)
	secret, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil || len(secret) != store.SigningSecretBytes {
		t.Fatalf("signing secret file holds %q, want %d bytes in hex", raw, store.SigningSecretBytes)
	}
	h.close()
	if got := dbSecret(t, h.cfg.DataDir, nil); got != nil {
		t.Fatal("the database still keeps a signing secret")
	}
	db, _ := os.ReadFile(filepath.Join(h.cfg.DataDir, bolt.DBFile))
	if bytes.Contains(db, secret) || bytes.Contains(db, raw[:64]) {
		t.Fatal("the database file contains the signing secret")
	}
	// The same secret after a restart: the job token issued before still works.
	h.open()
	if code := jobSpecCode(h, c.JobToken); code != http.StatusOK {
		t.Fatalf("job token after a restart: HTTP %d", code)
	}
	// Without the file a new secret is made, and tokens signed with the old one are refused.
	h.close()
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	h.open()
	if code := jobSpecCode(h, c.JobToken); code != http.StatusUnauthorized {
		t.Fatalf("job token signed with a deleted secret: HTTP %d, want 401", code)
	}
}

func TestSigningSecretFileElsewhere(t *testing.T) {
	t.Parallel()
	mounted := filepath.Join(t.TempDir(), "secret", "signing-key")
	if err := os.MkdirAll(filepath.Dir(mounted), 0o700); err != nil {
		t.Fatal(err)
	}
	given := strings.Repeat("ab", 40)
	if err := os.WriteFile(mounted, []byte(given+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(c *testConfig) { c.SigningSecretFile = mounted })
	signed := store.MintJobToken(bytes.Repeat([]byte{0xab}, 40), store.JobTokenPayload{Org: "acme", Deployment: "dep-x", Attempt: 1, Fencing: 1})
	if _, err := h.srv.store.ParseJobToken(signed); err != nil {
		t.Fatal("the server does not sign with the secret of --signing-secret-file")
	}
	if _, err := os.Stat(filepath.Join(h.cfg.DataDir, store.SigningSecretFile)); err == nil {
		t.Fatal("a signing secret was created in the data directory although another file was given")
	}
	a := h.setupRunner("acme", "r1", 1)
	c := a.claim(h.deploy(api.OperationApply).ID, 1, "pod-a")
	if code := jobSpecCode(h, c.JobToken); code != http.StatusOK {
		t.Fatalf("job token: HTTP %d", code)
	}
	h.close()
	// A file that does not hold a secret stops the start with a message naming it.
	for _, bad := range []string{"not hex", "abcd"} {
		if err := os.WriteFile(mounted, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		eng, err := engines.Open(t.Context(), engines.Options{DataDir: h.cfg.DataDir, DatabaseURL: h.cfg.DatabaseURL})
		if err != nil {
			t.Fatal(err)
		}
		cfg := h.cfg.Config
		cfg.Engine = eng
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), mounted) || !strings.Contains(err.Error(), "hex") {
			t.Fatalf("secret file %q: error %v, want one naming the file and its format", bad, err)
		}
	}
}

func TestSigningSecretMovesOutOfAnOlderDatabase(t *testing.T) {
	t.Parallel()
	logs := &bytes.Buffer{} // read only while the server is closed
	h := newHarness(t, onBolt, func(c *testConfig) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	a := h.setupRunner("acme", "r1", 1)
	c := a.claim(h.deploy(api.OperationApply).ID, 1, "pod-a")
	h.close()
	// Make the data directory of an older orchestrator: the secret in the database, no file.
	file := filepath.Join(h.cfg.DataDir, store.SigningSecretFile)
	raw, _ := os.ReadFile(file)
	secret, _ := hex.DecodeString(strings.TrimSpace(string(raw)))
	dbSecret(t, h.cfg.DataDir, secret)
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}

	h.open()
	if code := jobSpecCode(h, c.JobToken); code != http.StatusOK {
		t.Fatalf("a job token issued before the move: HTTP %d, want 200", code)
	}
	if moved, _ := os.ReadFile(file); !bytes.Equal(moved, raw) {
		t.Fatalf("the file holds %q, want the database's secret %q", moved, raw)
	}
	h.close()
	if !strings.Contains(logs.String(), "moved the signing secret out of the database") {
		t.Fatalf("the move is not logged:\n%s", logs)
	}
	if got := dbSecret(t, h.cfg.DataDir, nil); got != nil {
		t.Fatal("the secret is still in the database after the move")
	}
	if strings.Contains(logs.String(), strings.TrimSpace(string(raw))) {
		t.Fatal("the log holds the secret")
	}

	// A crash after the file was written and before the database forgot it: the next start
	// finishes the move, and nothing is lost.
	dbSecret(t, h.cfg.DataDir, secret)
	h.open()
	if code := jobSpecCode(h, c.JobToken); code != http.StatusOK {
		t.Fatalf("job token after a finished move: HTTP %d", code)
	}
	h.close()
	if got := dbSecret(t, h.cfg.DataDir, nil); got != nil {
		t.Fatal("the secret is still in the database")
	}
}
