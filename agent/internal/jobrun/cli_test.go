package jobrun

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBin puts an executable named name into dir.
func fakeBin(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho "+name+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// An unset CLI is whichever of tofu and terraform the image has, tofu first; an image with
// neither fails with the image's name and what to do.
func TestResolveCLIDetectsTheImagesCLI(t *testing.T) {
	both, onlyTF, none := t.TempDir(), t.TempDir(), t.TempDir()
	tofu := fakeBin(t, both, "tofu")
	fakeBin(t, both, "terraform")
	tf := fakeBin(t, onlyTF, "terraform")
	for _, tc := range []struct{ path, want string }{{both, tofu}, {onlyTF, tf}, {none + ":" + onlyTF, tf}} {
		t.Setenv("PATH", tc.path)
		if got, err := resolveCLI("", "img:1"); err != nil || got != tc.want {
			t.Errorf("PATH %s: %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
	t.Setenv("PATH", none)
	_, err := resolveCLI("", "ghcr.io/acme/tools:1")
	if err == nil {
		t.Fatal("no CLI found, no error")
	}
	for _, want := range []string{"neither tofu nor terraform", "image ghcr.io/acme/tools:1", none, "jobs.image", "OUTPOST_CLI"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	// An explicit choice is not second-guessed.
	t.Setenv("PATH", both)
	if got, err := resolveCLI("terraform", ""); err != nil || filepath.Base(got) != "terraform" {
		t.Errorf("terraform: %q, %v", got, err)
	}
	t.Setenv("PATH", none)
	if _, err := resolveCLI("tofu", "img:2"); err == nil || !strings.Contains(err.Error(), "image img:2") {
		t.Errorf("tofu missing: %v", err)
	}
}

// A job runner error is left as the container's termination message, so the finished event
// says why main failed.
func TestRunnerErrorBecomesTerminationMessage(t *testing.T) {
	msgFile := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(msgFile, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	old := terminationMessageFile
	terminationMessageFile = msgFile
	t.Cleanup(func() { terminationMessageFile = old })
	t.Setenv("PATH", t.TempDir())
	h := newHarness(t, "")
	r := h.runJob(fakeDeploy(t, h), runOptions{env: map[string]string{"OUTPOST_IMAGE": "ghcr.io/acme/no-cli:1"}})
	if r.Code != ExitRunnerError {
		t.Fatalf("exit %d:\n%s", r.Code, r.Log)
	}
	msg, _ := os.ReadFile(msgFile)
	if !strings.Contains(string(msg), "neither tofu nor terraform") || !strings.Contains(string(msg), "ghcr.io/acme/no-cli:1") || !strings.Contains(r.Log, string(msg)) {
		t.Fatalf("termination message %q; log:\n%s", msg, r.Log)
	}
}
