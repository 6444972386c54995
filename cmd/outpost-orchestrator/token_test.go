package main

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// tokenCmd runs `outpost-orchestrator token args…` and returns stdout, stderr and the error.
func tokenCmd(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := runToken(t.Context(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

// TestTokenCommands creates, lists and revokes an organisation token through a running
// orchestrator, with the bootstrap token the orchestrator generated, and uses the token.
func TestTokenCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	srv := startServe(t, dir)
	url := "http://" + srv.addr
	env := map[string]string{"OUTPOST_ORCHESTRATOR_URL": url, "OUTPOST_ORCHESTRATOR_DATA_DIR": dir}

	out, msg, err := tokenCmd(t, env, "create", "--org", "acme", "--name", "ci")
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	tok := strings.TrimSpace(out)
	if !strings.HasPrefix(tok, "opo_") || strings.Count(out, "\n") != 1 || !strings.Contains(msg, "shown this once") || strings.Contains(msg, tok) {
		t.Fatalf("token create printed %q on stdout and %q on stderr; want the token alone on stdout", out, msg)
	}
	if code := get(t, url+"/api/v1/orgs/acme/runners", tok); code != http.StatusOK {
		t.Fatalf("the new token on its organisation: HTTP %d", code)
	}
	if code := get(t, url+"/api/v1/orgs/beta/runners", tok); code != http.StatusNotFound {
		t.Fatalf("the new token on another organisation: HTTP %d, want 404", code)
	}

	out, _, err = tokenCmd(t, env, "list", "--org", "acme")
	if err != nil || !strings.Contains(out, "ci") || strings.Contains(out, tok) {
		t.Fatalf("token list: %v\n%s", err, out)
	}
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	t.Logf("token list:\n%s", out)

	// The organisation token cannot manage tokens, and the command says what it needs.
	_, _, err = tokenCmd(t, map[string]string{"OUTPOST_ORCHESTRATOR_URL": url, "OUTPOST_ORCHESTRATOR_ADMIN_TOKEN": tok}, "list", "--org", "acme")
	if err == nil || !strings.Contains(err.Error(), "bootstrap admin token") {
		t.Fatalf("token list with an organisation token: %v", err)
	}

	if _, msg, err := tokenCmd(t, env, "revoke", "--org", "acme", id); err != nil || !strings.Contains(msg, id) {
		t.Fatalf("token revoke: %v %s", err, msg)
	}
	if code := get(t, url+"/api/v1/orgs/acme/runners", tok); code != http.StatusUnauthorized {
		t.Fatalf("the revoked token: HTTP %d, want 401", code)
	}
	if out, _, err := tokenCmd(t, env, "list", "--org", "acme"); err != nil || strings.Contains(out, id) {
		t.Fatalf("token list after the revoke: %v\n%s", err, out)
	}
	// The orchestrator's log names the token by id, never by value.
	if err := srv.stop(); err != nil {
		t.Fatal(err)
	}
	if logs := srv.logs.String(); strings.Contains(logs, tok) || !strings.Contains(logs, id) {
		t.Fatalf("the log must name token %s and never hold the token itself:\n%s", id, logs)
	}
}

func TestTokenCommandErrors(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	withToken := map[string]string{"OUTPOST_ORCHESTRATOR_ADMIN_TOKEN": "a-long-enough-admin-token"}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"no verb", nil, nil, []string{"create, list or revoke"}},
		{"unknown verb", withToken, []string{"rotate", "--org", "acme"}, []string{"rotate", "create, list or revoke"}},
		{"no org", withToken, []string{"list"}, []string{"--org"}},
		{"no name", withToken, []string{"create", "--org", "acme"}, []string{"--name"}},
		{"no bootstrap token", nil, []string{"list", "--org", "acme", "--data-dir", t.TempDir()}, []string{"OUTPOST_ORCHESTRATOR_ADMIN_TOKEN", "admin-token"}},
		{"server not running", withToken, []string{"list", "--org", "acme", "--url", closed}, []string{"is the orchestrator running at " + closed}},
		{"plain http elsewhere", withToken, []string{"list", "--org", "acme", "--url", "http://orchestrator.example.com:8700"}, []string{"unencrypted", "--insecure-allow-http"}},
	}
	for _, tc := range cases {
		_, _, err := tokenCmd(t, tc.env, tc.args...)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not mention %q", tc.name, err, w)
			}
		}
	}
	if _, _, err := tokenCmd(t, nil, "--help"); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("token --help: %v", err)
	}
}

// TestHelpDocumentsTheFlags: --help names every flag with its environment variable and says
// what the admin token is.
func TestHelpDocumentsTheFlags(t *testing.T) {
	var out clienttest.Buffer
	if _, err := parseFlags([]string{"--help"}, noEnv, &out); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, f := range []string{"max-connections", "read-header-timeout", "read-timeout", "write-timeout", "idle-timeout",
		"source-retention", "log-retention", "deployment-retention", "admin-token"} {
		if !strings.Contains(out.String(), "-"+f+" ") || !strings.Contains(out.String(), envName(f)) {
			t.Errorf("--help does not document -%s with %s", f, envName(f))
		}
	}
	for _, w := range []string{"bootstrap", "token create", "default 30d", "default 90d"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("--help lacks %q:\n%s", w, out.String())
		}
	}
}

func TestRetentionAndLimitFlags(t *testing.T) {
	env := map[string]string{"OUTPOST_ORCHESTRATOR_LOG_RETENTION": "7d", "OUTPOST_ORCHESTRATOR_SOURCE_RETENTION": "forever", "OUTPOST_ORCHESTRATOR_READ_TIMEOUT": "30s"}
	o, err := parseFlags([]string{"--deployment-retention", "2160h", "--max-connections", "64"}, func(k string) string { return env[k] }, &clienttest.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := store.Retention{Sources: store.KeepForever, Logs: 7 * 24 * time.Hour, Deployments: 90 * 24 * time.Hour}
	if o.retention != want || o.limits.MaxConnections != 64 || o.limits.ReadTimeout != 30*time.Second {
		t.Fatalf("retention %+v limits %+v", o.retention, o.limits)
	}
	for flagArgs, wantErr := range map[string]string{
		"--log-retention 0":      "forever",
		"--log-retention 3w":     "30d",
		"--log-retention 1.5d":   "number of days",
		"--write-timeout 20s":    "long poll",
		"--max-connections many": "max-connections",
	} {
		if _, err := parseFlags(strings.Fields(flagArgs), noEnv, &clienttest.Buffer{}); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: %v, want an error mentioning %q", flagArgs, err, wantErr)
		}
	}
	bad := map[string]string{"OUTPOST_ORCHESTRATOR_LOG_RETENTION": "a month"}
	if _, err := parseFlags(nil, func(k string) string { return bad[k] }, &clienttest.Buffer{}); err == nil || !strings.Contains(err.Error(), "OUTPOST_ORCHESTRATOR_LOG_RETENTION") {
		t.Errorf("a bad environment value: %v, want the variable named", err)
	}
}
