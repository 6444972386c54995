package sourcearchive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// write creates files (path → content) under dir.
func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type entry struct {
	typ      byte
	mode     int64
	body     string
	linkname string
	uid      int
	mtime    time.Time
}

// entries unpacks an archive into name → entry, in archive order.
func entries(t *testing.T, data []byte) ([]string, map[string]entry) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var order []string
	out := map[string]entry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		order = append(order, h.Name)
		out[h.Name] = entry{typ: h.Typeflag, mode: h.Mode, body: string(b), linkname: h.Linkname, uid: h.Uid, mtime: h.ModTime}
	}
	return order, out
}

func TestPackLeavesOutWhatMustNotTravelAndIsDeterministic(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"main.tf":                        `resource "terraform_data" "x" {}`,
		".terraform.lock.hcl":            "# lock file: packed",
		"modules/net/main.tf":            "# module",
		"modules/net/.terraform/x":       "downloaded module cache",
		".terraform/providers/p":         "provider binary",
		".git/HEAD":                      "ref: refs/heads/main",
		"terraform.tfstate":              `{"secret": "in local state"}`,
		"terraform.tfstate.backup":       `{}`,
		"env/prod.tfvars":                `size = 3`,
		"scripts/run.sh":                 "#!/bin/sh\necho hi\n",
		"scripts/a-file-before-run.sh.d": "",
	})
	if err := os.Chmod(filepath.Join(dir, "scripts/run.sh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("modules/net", filepath.Join(dir, "net")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "env", "prod.tfvars"), filepath.Join(dir, "prod.auto.tfvars")); err != nil {
		t.Fatal(err)
	}
	a, err := Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	order, got := entries(t, a.Data)
	want := []string{".terraform.lock.hcl", "env/", "env/prod.tfvars", "main.tf", "modules/", "modules/net/", "modules/net/main.tf",
		"net", "prod.auto.tfvars", "scripts/", "scripts/a-file-before-run.sh.d", "scripts/run.sh"}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Fatalf("entries\n got %v\nwant %v", order, want)
	}
	if e := got["scripts/run.sh"]; e.mode != 0o755 || e.body != "#!/bin/sh\necho hi\n" {
		t.Errorf("executable: %+v", e)
	}
	if e := got["main.tf"]; e.mode != 0o644 || e.uid != 0 || !e.mtime.Equal(time.Unix(0, 0)) {
		t.Errorf("regular file: %+v", e)
	}
	if e := got["net"]; e.typ != tar.TypeSymlink || e.linkname != "modules/net" {
		t.Errorf("relative link: %+v", e)
	}
	if e := got["prod.auto.tfvars"]; e.typ != tar.TypeSymlink || e.linkname != "env/prod.tfvars" {
		t.Errorf("absolute link inside the directory must become relative: %+v", e)
	}
	if a.Files != 6 || a.Dirs != 4 || a.Symlinks != 2 {
		t.Errorf("counts: %d files, %d dirs, %d symlinks", a.Files, a.Dirs, a.Symlinks)
	}
	if want := []string{".git/", ".terraform/", "modules/net/.terraform/", "terraform.tfstate", "terraform.tfstate.backup"}; strings.Join(a.Skipped, " ") != strings.Join(want, " ") {
		t.Errorf("skipped %v, want %v", a.Skipped, want)
	}

	// Touching every file, and packing again, gives the same bytes.
	later := time.Now().Add(time.Hour)
	_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, later, later) })
	again, err := Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Data, again.Data) {
		t.Error("packing the same files twice gave different archives")
	}
	if err := a.Check(); err != nil {
		t.Error(err)
	}
}

func TestPackRefusesWhatTheJobRunnerWouldRefuse(t *testing.T) {
	outside := t.TempDir()
	write(t, outside, map[string]string{"secrets.tf": "x"})
	cases := map[string]struct {
		setup func(dir string) error
		want  string
	}{
		"link out": {func(dir string) error {
			return os.Symlink(filepath.Join(outside, "secrets.tf"), filepath.Join(dir, "s.tf"))
		},
			"points to " + outside},
		"relative link out": {func(dir string) error {
			rel, err := filepath.Rel(dir, filepath.Join(outside, "secrets.tf"))
			if err != nil {
				return err
			}
			return os.Symlink(rel, filepath.Join(dir, "p"))
		}, "outside"},
		"dangling": {func(dir string) error { return os.Symlink("missing.tf", filepath.Join(dir, "m.tf")) }, "which does not exist"},
		"into .terraform": {func(dir string) error {
			write(t, dir, map[string]string{".terraform/modules/m/main.tf": "x"})
			return os.Symlink(".terraform/modules/m", filepath.Join(dir, "m"))
		}, "which is not packed"},
		"fifo": {func(dir string) error { return syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600) }, "pipe is a named pipe"},
		// Found by FuzzPackRoundTrip (agent/internal/jobrun): Pack took it, the job runner did not.
		"backslash": {func(dir string) error { return os.Mkdir(filepath.Join(dir, `e\f`), 0o755) }, `e\f has a backslash`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, map[string]string{"main.tf": "x"})
			if err := tc.setup(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := Pack(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Pack: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := Pack(filepath.Join(outside, "secrets.tf")); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("a file as the source: %v", err)
	}
}

func TestCheckRefusesAnArchiveTheAPIWouldRefuse(t *testing.T) {
	a := &Archive{Data: make([]byte, MaxBytes+1)}
	if err := a.Check(); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "--git") {
		t.Fatalf("Check: %v", err)
	}
}
