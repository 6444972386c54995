package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Configuration problems must end the agent once, with exit code 2 and a message naming the
// setting, never a crash or a retry loop.
func TestConfigErrorsExitTwoWithMessage(t *testing.T) {
	dir := t.TempDir()
	badKey := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(badKey, []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--api-url", "https://o.example", "--org-id", "acme", "--runner-id", "r1", "--executor", "process",
		"--work-dir", dir, "--leader-elect=false"}
	cases := map[string]struct {
		args []string
		want []string
	}{
		"missing key":   {append(base, "--private-key-file", filepath.Join(dir, "absent.pem")), []string{"--private-key-file", "absent.pem", "private-key.pem"}},
		"not a key":     {append(base, "--private-key-file", badKey), []string{"--private-key-file", "PRIVATE KEY"}},
		"bad flag":      {[]string{"--no-such-flag"}, []string{"no-such-flag"}},
		"invalid value": {[]string{"--api-url", "ftp://x", "--executor", "docker"}, []string{"--api-url (OUTPOST_API_URL)", "--executor (OUTPOST_EXECUTOR)"}},
		"stray arg":     {[]string{"run"}, []string{`unexpected argument "run"`}},
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
