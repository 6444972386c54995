package main

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/health"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/keyring"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/metrics"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statecmd"
	"github.com/outpost-dev/terraform-provider-outpost/internal/gctarget"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// Configuration problems must end the agent once, with exit code 2 and a message naming the
// setting, never a crash or a retry loop.
func TestConfigErrorsExitTwoWithMessage(t *testing.T) {
	badConfig := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(badConfig, []byte("jobs:\n  resources:\n    limits: {cpu: lots}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args []string
		want []string
	}{
		"bad flag":      {[]string{"--no-such-flag"}, []string{"no-such-flag"}},
		"invalid value": {[]string{"--api-url", "ftp://x", "--executor", "docker"}, []string{"apiUrl (chart value apiUrl; --api-url, OUTPOST_API_URL)", "executor (--executor, OUTPOST_EXECUTOR)"}},
		"stray arg":     {[]string{"run"}, []string{`unexpected argument "run"`}},
		"plain http":    {[]string{"--api-url", "http://orchestrator.example.com:8700"}, []string{"apiUrl (chart value apiUrl; --api-url, OUTPOST_API_URL)", "unencrypted", "insecureAllowHttp: true (the chart value, or --insecure-allow-http)"}},
		"bad file":      {[]string{"--config", badConfig}, []string{"configuration file " + badConfig, "jobs.resources.limits.cpu (chart value jobs.resources)"}},
		"missing file":  {[]string{"--config", "/does/not/exist.yaml"}, []string{"--config, OUTPOST_CONFIG", "/does/not/exist.yaml"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := dispatch(tc.args, &stdout, &stderr); code != exitConfigError {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitConfigError, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}

// --log-format picks the handler of the agent's one log stream.
func TestLogFormat(t *testing.T) {
	for format, want := range map[string]string{"json": `"level":"ERROR","msg":"invalid configuration; fix it and restart"`,
		"text": `level=ERROR msg="invalid configuration; fix it and restart"`} {
		var stdout, stderr bytes.Buffer
		if code := dispatch([]string{"--log-format", format, "--executor", "docker"}, &stdout, &stderr); code != exitConfigError {
			t.Fatalf("exit code %d", code)
		}
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("--log-format %s: stderr lacks %s:\n%s", format, want, stderr.String())
		}
	}
}

// The agent sets the garbage collector's target (gctarget.Percent) as it starts, before its
// configuration is checked, unless GOGC is set (gctarget's own test).
func TestAgentSetsGCTarget(t *testing.T) {
	t.Setenv("GOGC", "")
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	var stdout, stderr bytes.Buffer
	if code := dispatch([]string{"--executor", "docker"}, &stdout, &stderr); code != exitConfigError {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitConfigError, stderr.String())
	}
	if got := debug.SetGCPercent(100); got != gctarget.Percent {
		t.Errorf("GC percent %d after the agent started, want %d", got, gctarget.Percent)
	}
}

// An unreadable key file is not a crash: the agent says why on /readyz and in its log, and
// starts as soon as the file holds a key (a Secret mounted late, or a rotation).
func TestWaitsForAReadableKey(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "private-key.pem")
	if err := os.WriteFile(keyFile, []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))

	// The health server runs from the start (as run starts it); the wait shows up on its /readyz.
	readiness := health.NewState(time.Second, nil)
	go func() {
		_ = serve(t.Context(), "health", addr, health.Handler(readiness, metrics.New("test").Registry), healthServerLimits, log, nil)
	}()

	ring := keyring.New()
	go runKeySource(t.Context(), keyring.FileSource{Path: keyFile, Interval: 50 * time.Millisecond}, ring, readiness, log)

	var body string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				body = string(b)
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(body, "private_key") || !strings.Contains(body, "PRIVATE KEY") {
		t.Fatalf("/readyz while waiting must say why: %q", body)
	}
	if !strings.Contains(logs.String(), "cannot load the runner's private key") {
		t.Fatalf("log lacks the reason: %s", logs.String())
	}

	_, priv, _ := keys.Generate()
	pemText, _ := keys.EncodePrivatePEM(priv)
	if err := os.WriteFile(keyFile, []byte(pemText), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ring.Loaded():
		if !ring.Current().Equal(priv) {
			t.Fatal("the ring holds another key than the one written")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the key source did not pick up the key")
	}
	if ok, checks := readiness.Ready(t.Context()); !ok {
		t.Fatalf("not ready after the key was read: %v", checks)
	}

	// A rotation: the file gets a new key, which the ring takes within an interval, keeping the
	// one it replaced (Jobs sealed with it stay the agent's).
	_, next, _ := keys.Generate()
	pemText, _ = keys.EncodePrivatePEM(next)
	if err := os.WriteFile(keyFile, []byte(pemText), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for !ring.Current().Equal(next) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if ks := ring.Keys(); len(ks) != 2 || !ks[0].Equal(next) || !ks[1].Equal(priv) {
		t.Fatalf("after the rotation the ring holds %d keys; want the new one, then the old one", len(ks))
	}
}

// Inside the agent's pod, `outpost-agent state` takes the namespace, the organisation and the
// key file from the agent's configuration file, and the environment wins over it.
func TestStateDefaultsFromConfigFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(file, []byte("orgId: acme\nstate: {namespace: outpost-state, encryptionKeyFile: /etc/outpost/state-key/key}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OUTPOST_CONFIG", file)
	t.Setenv("OUTPOST_ORG_ID", "")
	t.Setenv("OUTPOST_STATE_ENCRYPTION_KEY_FILE", "")
	t.Setenv("OUTPOST_STATE_NAMESPACE", "")
	if got, want := stateDefaults(), (statecmd.Defaults{Namespace: "outpost-state", OrgID: "acme", EncryptionKeyFile: "/etc/outpost/state-key/key", KeepVersions: 10}); got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	t.Setenv("OUTPOST_STATE_NAMESPACE", "other")
	if got := stateDefaults(); got.Namespace != "other" {
		t.Errorf("OUTPOST_STATE_NAMESPACE=other gave namespace %q", got.Namespace)
	}
}
