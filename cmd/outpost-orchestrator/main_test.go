package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

func noEnv(string) string { return "" }

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func get(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestRunGeneratesTokenServesAndStops(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	srv := startServe(t, dir, "--log-format", "json", "--log-cap", "1MiB")
	addr, logs := srv.addr, srv.logs
	tokenFile := filepath.Join(dir, "admin-token")
	st, err := os.Stat(tokenFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("admin token file %v (%v), want mode 0600", st, err)
	}
	raw, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(raw))
	if len(token) < 32 {
		t.Fatalf("generated token %q is too short", token)
	}
	if code := get(t, "http://"+addr+"/healthz", ""); code != http.StatusOK {
		t.Fatalf("healthz: HTTP %d", code)
	}
	// The token is taken (a refused one gets 401): on a fresh server organisation acme does not
	// exist yet, which is a 404 (org_not_found).
	if code := get(t, "http://"+addr+"/api/v1/orgs/acme/runners", token); code != http.StatusNotFound {
		t.Fatalf("admin request with the generated token: HTTP %d, want 404 (no such organisation)", code)
	}
	if code := get(t, "http://"+addr+"/api/v1/orgs/acme/runners", token+"x"); code != http.StatusUnauthorized {
		t.Fatalf("admin request with another token: HTTP %d, want 401", code)
	}
	if err := srv.stop(); err != nil {
		t.Fatalf("run after shutdown: %v", err)
	}
	out := logs.String()
	if strings.Contains(out, token) {
		t.Fatal("the admin token appeared in the logs")
	}
	if !strings.Contains(out, tokenFile) {
		t.Fatalf("the logs do not say where the token is:\n%s", out)
	}

	// A restart reuses the kept token.
	o := &options{dataDir: dir}
	again, err := adminToken(o, discardLogger())
	if err != nil || again != token {
		t.Fatalf("second start read token %q (%v), want the kept one", again, err)
	}
}

// served is the orchestrator command running in a test.
type served struct {
	addr string
	logs *clienttest.Buffer
	// stop ends it and returns what run returned.
	stop func() error
}

// startServe runs the orchestrator command on a free loopback port with data directory dir and
// the extra flags; it is stopped when the test ends, if the test did not stop it.
func startServe(t *testing.T, dir string, flags ...string) *served {
	t.Helper()
	return startServeEnv(t, dir, noEnv, flags...)
}

// startServeEnv is startServe with the environment getenv.
func startServeEnv(t *testing.T, dir string, getenv func(string) string, flags ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	s := &served{logs: &clienttest.Buffer{}}
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"--listen", "127.0.0.1:0", "--data-dir", dir}, flags...), getenv, s.logs, ready)
	}()
	var once sync.Once
	var runErr error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(20 * time.Second):
				runErr = errors.New("run did not stop within 20s")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("run: %v", err)
		}
	})
	select {
	case s.addr = <-ready:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	return s
}

func TestRunExplainsPortInUse(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	env := map[string]string{
		"OUTPOST_ORCHESTRATOR_LISTEN":      ln.Addr().String(),
		"OUTPOST_ORCHESTRATOR_DATA_DIR":    t.TempDir(),
		"OUTPOST_ORCHESTRATOR_ADMIN_TOKEN": "a-long-enough-admin-token",
	}
	err = run(t.Context(), nil, func(k string) string { return env[k] }, &clienttest.Buffer{}, nil)
	if err == nil || !strings.Contains(err.Error(), "port "+port+" is already in use") || !strings.Contains(err.Error(), "--listen") {
		t.Fatalf("error %v must name port %s and how to pick another", err, port)
	}
}

func TestRunExplainsUnusableDataDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(file, "data")
	err := run(t.Context(), []string{"--data-dir", dir, "--admin-token", "a-long-enough-admin-token", "--listen", "127.0.0.1:0"}, noEnv, &clienttest.Buffer{}, nil)
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("error %v must name the data directory %s", err, dir)
	}
}

func TestFlagsAndSizes(t *testing.T) {
	for in, want := range map[string]int64{"16MiB": 16 << 20, "512KiB": 512 << 10, "1048576": 1 << 20, "1GiB": 1 << 30} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "10MB", "lots"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) must fail", bad)
		}
	}
	o, err := parseFlags([]string{"--listen", ":9000"}, func(k string) string {
		return map[string]string{"OUTPOST_ORCHESTRATOR_LISTEN": ":1", "OUTPOST_ORCHESTRATOR_DATA_DIR": "/env/dir"}[k]
	}, &clienttest.Buffer{})
	if err != nil || o.listen != ":9000" || o.dataDir != "/env/dir" {
		t.Fatalf("flags %+v (%v): the flag must win over the env, the env over the default", o, err)
	}
	if err := run(t.Context(), []string{"--log-format", "xml"}, noEnv, &clienttest.Buffer{}, nil); err == nil || !strings.Contains(err.Error(), "json or text") {
		t.Fatalf("bad log format: %v", err)
	}
}

// TestSigningSecretFileFlag: the job-token secret goes where --signing-secret-file (or its
// variable) says, never into the data directory.
func TestSigningSecretFileFlag(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	secretFile := filepath.Join(t.TempDir(), "mounted", "signing-secret")
	env := map[string]string{"OUTPOST_ORCHESTRATOR_SIGNING_SECRET_FILE": secretFile}
	srv := startServeEnv(t, dir, func(k string) string { return env[k] }, "--admin-token", "a-long-enough-admin-token")
	if err := srv.stop(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(secretFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("signing secret %v (%v), want a 0600 file at %s", st, err, secretFile)
	}
	if _, err := os.Stat(filepath.Join(dir, "signing-secret")); err == nil {
		t.Fatal("a signing secret was written into the data directory too")
	}
	help := &clienttest.Buffer{}
	_, _ = parseFlags([]string{"--help"}, noEnv, help)
	if !strings.Contains(help.String(), "OUTPOST_ORCHESTRATOR_SIGNING_SECRET_FILE") {
		t.Fatal("--help does not show the signing secret's variable")
	}
}

// TestDatabaseURLWithoutVerifiedTLSIsRefused (N6): serve and migrate-store refuse a database URL
// off loopback without sslmode=verify-full, naming the opt-in, before connecting and without
// repeating the password.
func TestDatabaseURLWithoutVerifiedTLSIsRefused(t *testing.T) {
	env := map[string]string{
		"OUTPOST_ORCHESTRATOR_DATABASE_URL": "postgres://outpost:s3cret-pw@db.invalid:5432/outpost",
		"OUTPOST_ORCHESTRATOR_ADMIN_TOKEN":  "a-long-enough-admin-token",
		"OUTPOST_ORCHESTRATOR_LISTEN":       "127.0.0.1:0",
	}
	getenv := func(k string) string { return env[k] }
	err := run(t.Context(), nil, getenv, &clienttest.Buffer{}, nil)
	if err == nil || !strings.Contains(err.Error(), "--database-insecure-tls") || !strings.Contains(err.Error(), "verify-full") || strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("serve: %v", err)
	}
	t.Logf("serve: %v", err)
	err = runMigrateStore(t.Context(), []string{"--from", t.TempDir()}, getenv, &clienttest.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--database-insecure-tls") || strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("migrate-store: %v", err)
	}
}

// TestQuotaFlags: the per-organisation quotas come from flags or the environment, with defaults.
func TestQuotaFlags(t *testing.T) {
	o, err := parseFlags([]string{"--max-runners-per-org", "5"}, func(k string) string {
		return map[string]string{"OUTPOST_ORCHESTRATOR_MAX_QUEUED_DEPLOYMENTS_PER_ORG": "7"}[k]
	}, &clienttest.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.quotas.Runners != 5 || o.quotas.QueuedDeployments != 7 || o.quotas.StateStorages != store.DefaultMaxStateStorages || o.maxLogBytes != "10GiB" {
		t.Errorf("quotas %+v, log bytes %q", o.quotas, o.maxLogBytes)
	}
}
