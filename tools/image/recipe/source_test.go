package recipe

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDescribeSource(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
			"GIT_COMMITTER_EMAIL=t@example.com", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	noEnv := func(string) string { return "" }

	// Not a checkout, no licence: the epoch, no revision, NOASSERTION, and warnings saying so.
	f, err := DescribeSource(context.Background(), dir, noEnv)
	if err != nil || f.Revision != "" || !f.Created.Equal(time.Unix(0, 0)) || f.Licenses != "NOASSERTION" || len(f.Warnings) != 2 {
		t.Errorf("bare directory: %+v, %v", f, err)
	}

	if err := os.WriteFile(filepath.Join(dir, "LICENSE"), []byte("Mozilla Public License Version 2.0\n==================================\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("init", "-q")
	git("add", "LICENSE")
	git("commit", "-q", "-m", "licence")
	f, err = DescribeSource(context.Background(), dir, noEnv)
	if err != nil || len(f.Revision) != 40 || f.Dirty || f.Licenses != "MPL-2.0" || !f.Created.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("clean checkout: %+v, %v", f, err)
	}

	if err := os.WriteFile(filepath.Join(dir, "LICENSE"), []byte("Apache License\n Version 2.0, January 2004\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err = DescribeSource(context.Background(), dir, func(k string) string {
		return map[string]string{"SOURCE_DATE_EPOCH": "1700000000"}[k]
	})
	if err != nil || !f.Dirty || f.Licenses != "Apache-2.0" || !f.Created.Equal(time.Unix(1700000000, 0)) ||
		!strings.Contains(strings.Join(f.Warnings, " "), "uncommitted") {
		t.Errorf("dirty checkout with SOURCE_DATE_EPOCH: %+v, %v", f, err)
	}
	if _, err := DescribeSource(context.Background(), dir, func(string) string { return "yesterday" }); err == nil {
		t.Error("a SOURCE_DATE_EPOCH that is not a number was accepted")
	}
}
