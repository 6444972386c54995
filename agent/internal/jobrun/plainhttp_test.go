package jobrun

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
)

// TestPlainHTTPRefusedUnlessAllowed: the job runner will not send its job token to an http://
// orchestrator that is not loopback unless the agent handed its opt-in on; it says why and
// exits 2 before any request.
func TestPlainHTTPRefusedUnlessAllowed(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("opj_secret.mac"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{jobenv.APIURL: "http://orchestrator.example.com:8700", jobenv.TokenFile: tokenFile}
	getenv := func(k string) string { return env[k] }
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), nil, getenv, nil, &stdout, &stderr)
	if code != ExitRunnerError || stdout.Len() != 0 {
		t.Fatalf("exit %d, stdout %q; want 2 before anything ran", code, stdout.String())
	}
	for _, want := range []string{jobenv.APIURL, "unencrypted", "use https://", jobenv.InsecureAllowHTTP + "=true"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	t.Logf("what the job runner says: %s", strings.TrimSpace(stderr.String()))

	for value, ok := range map[string]bool{"true": true, "false": false, "yes-please": false} {
		env[jobenv.InsecureAllowHTTP] = value
		cfg, err := loadConfig(nil, getenv, &stderr)
		switch {
		case ok && (err != nil || !cfg.InsecureAllowHTTP):
			t.Errorf("%s=%s: %v, opt-in %v", jobenv.InsecureAllowHTTP, value, err, cfg.InsecureAllowHTTP)
		case !ok && err == nil:
			t.Errorf("%s=%s accepted", jobenv.InsecureAllowHTTP, value)
		}
	}
	env[jobenv.APIURL], env[jobenv.InsecureAllowHTTP] = "http://127.0.0.1:8700", ""
	if _, err := loadConfig(nil, getenv, &stderr); err != nil {
		t.Errorf("loopback http refused: %v", err)
	}
}

// TestPlainStateURLRefusedOffLoopback: the job runner will not hand the CLI its state credential
// for an http:// state URL whose host is not loopback (the credential and the state would cross
// the pod network in clear), unless the agent handed its opt-in on; it says why and exits 2
// before any request. https:// and loopback pass.
func TestPlainStateURLRefusedOffLoopback(t *testing.T) {
	dir := t.TempDir()
	tokenFile, stateFile := filepath.Join(dir, "token"), filepath.Join(dir, "state-token")
	for _, f := range []string{tokenFile, stateFile} {
		if err := os.WriteFile(f, []byte("opj_secret.mac"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{jobenv.APIURL: "https://orchestrator.example.com", jobenv.TokenFile: tokenFile, jobenv.StateTokenFile: stateFile,
		jobenv.StateURL: "http://outpost-agent.outpost-system.svc:8080"}
	getenv := func(k string) string { return env[k] }
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), nil, getenv, nil, &stdout, &stderr); code != ExitRunnerError || stdout.Len() != 0 {
		t.Fatalf("exit %d, stdout %q; want 2 before anything ran", code, stdout.String())
	}
	for _, want := range []string{jobenv.StateURL, "unencrypted", "https://", jobenv.InsecureAllowHTTP + "=true"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	t.Logf("what the job runner says: %s", strings.TrimSpace(stderr.String()))
	for url, ok := range map[string]bool{
		"https://outpost-agent.outpost-system.svc:8443": true, "http://127.0.0.1:8080": true, "http://localhost:8080": true,
		"http://[::1]:8080": true, "http://10.96.0.12:8080": false,
	} {
		env[jobenv.StateURL] = url
		if _, err := loadConfig(nil, getenv, &stderr); (err == nil) != ok {
			t.Errorf("state URL %s: %v, want accepted %v", url, err, ok)
		}
	}
	env[jobenv.StateURL], env[jobenv.InsecureAllowHTTP] = "http://10.96.0.12:8080", "true"
	if _, err := loadConfig(nil, getenv, &stderr); err != nil {
		t.Errorf("with the opt-in, plain HTTP is refused: %v", err)
	}
}
