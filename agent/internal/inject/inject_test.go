package inject

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCopyIsCompleteAndExecutableByAll(t *testing.T) {
	src := filepath.Join(t.TempDir(), "agent")
	want := bytes.Repeat([]byte("outpost"), 100_000)
	if err := os.WriteFile(src, want, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// A stale copy from an earlier run of the init container is replaced.
	if err := os.WriteFile(filepath.Join(dir, BinaryName), []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	n, err := Copy(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, BinaryName))
	if err != nil || !bytes.Equal(got, want) || n != int64(len(want)) {
		t.Fatalf("copy differs from the source (%d bytes copied, err %v)", n, err)
	}
	fi, _ := os.Stat(filepath.Join(dir, BinaryName))
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755 (main may run as another user)", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

func TestMainRefusesBadArguments(t *testing.T) {
	for _, args := range [][]string{nil, {""}, {"--help"}, {"a", "b"}} {
		var out, errb bytes.Buffer
		if code := Main(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage: outpost-agent inject DIR") {
			t.Errorf("Main(%q) = %d, stderr %q", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	missing := filepath.Join(t.TempDir(), "missing")
	if code := Main([]string{missing}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "emptyDir") {
		t.Errorf("missing dir: code %d, stderr %q", code, errb.String())
	}
}

func TestMainCopiesTheRunningBinary(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := Main([]string{dir}, &out, &errb); code != 0 {
		t.Fatalf("code %d: %s", code, errb.String())
	}
	self, _ := os.Executable()
	a, _ := os.ReadFile(self)
	b, _ := os.ReadFile(filepath.Join(dir, BinaryName))
	if !bytes.Equal(a, b) {
		t.Error("the copy is not this binary")
	}
}
