package sourcearchive

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/sourcearchive/archivetest"
)

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("%s should be untouched, holds %v", dir, entries)
	}
	parentEntries, _ := os.ReadDir(filepath.Dir(dir))
	for _, e := range parentEntries {
		if e.Name() != "src" && e.Name() != "outside" {
			t.Fatalf("extraction created %s next to the target", e.Name())
		}
	}
}

func TestExtractLaysOutFiles(t *testing.T) {
	dir, outside := archivetest.Sandbox(t)
	st, err := Extract(archivetest.Make(t,
		archivetest.Entry{Name: "./", Type: tar.TypeDir, Mode: 0o755},
		archivetest.Entry{Name: "./main.tf", Body: "output \"x\" { value = 1 }\n"},
		archivetest.Entry{Name: "modules/net/", Type: tar.TypeDir, Mode: 0o755},
		archivetest.Entry{Name: "modules/net/main.tf", Body: "# net\n"},
		archivetest.Entry{Name: "scripts/run.sh", Body: "#!/bin/sh\n", Mode: 0o4755},
		archivetest.Entry{Name: "shared.tf", Type: tar.TypeSymlink, Link: "modules/net/main.tf"},
		archivetest.Entry{Name: "modules/up", Type: tar.TypeSymlink, Link: ".."},
		archivetest.Entry{Name: "copy.tf", Type: tar.TypeLink, Link: "modules/net/main.tf"},
	), dir, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 4 || st.Symlinks != 2 {
		t.Fatalf("stats = %+v, want 4 files and 2 symlinks", st)
	}
	for name, want := range map[string]string{"main.tf": "output \"x\" { value = 1 }\n", "shared.tf": "# net\n", "copy.tf": "# net\n", "modules/up/main.tf": "output \"x\" { value = 1 }\n"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "scripts/run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSetuid != 0 || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("run.sh mode = %v, want executable without setuid", fi.Mode())
	}
	if fi, err := os.Lstat(filepath.Join(dir, "copy.tf")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("hard link should become a regular file copy: %v %v", fi, err)
	}
	assertEmpty(t, outside)
}

func TestExtractRefusesEscapes(t *testing.T) {
	cases := map[string]struct {
		entries []archivetest.Entry
		want    string
	}{
		"dot-dot":             {[]archivetest.Entry{{Name: "../evil.tf", Body: "x"}}, "'..'"},
		"dot-dot inside":      {[]archivetest.Entry{{Name: "a/../../evil.tf", Body: "x"}}, "'..'"},
		"absolute":            {[]archivetest.Entry{{Name: "/tmp/evil.tf", Body: "x"}}, "absolute"},
		"symlink absolute":    {[]archivetest.Entry{{Name: "l", Type: tar.TypeSymlink, Link: "/etc"}}, "absolute"},
		"symlink parent":      {[]archivetest.Entry{{Name: "l", Type: tar.TypeSymlink, Link: "../outside"}}, "outside the archive"},
		"symlink deep parent": {[]archivetest.Entry{{Name: "a/b/l", Type: tar.TypeSymlink, Link: "../../../outside"}}, "outside the archive"},
		// Each link alone stays inside; together they point to the parent directory.
		"symlink chain": {[]archivetest.Entry{
			{Name: "a/", Type: tar.TypeDir},
			{Name: "a/b", Type: tar.TypeSymlink, Link: ".."},
			{Name: "c", Type: tar.TypeSymlink, Link: "a/b/../outside"},
		}, "resolves outside"},
		// A file written through a link planted earlier in the archive.
		"write through symlink": {[]archivetest.Entry{
			{Name: "l", Type: tar.TypeSymlink, Link: "."},
			{Name: "l/x.tf", Body: "x"},
		}, "written through the symlink"},
		"symlink over directory": {[]archivetest.Entry{
			{Name: "d/x.tf", Body: "x"},
			{Name: "d", Type: tar.TypeSymlink, Link: "."},
		}, "clashes"},
		"dangling symlink":   {[]archivetest.Entry{{Name: "l", Type: tar.TypeSymlink, Link: "missing/file"}}, "does not resolve"},
		"hard link outside":  {[]archivetest.Entry{{Name: "h", Type: tar.TypeLink, Link: "../outside/secret"}}, "outside the archive"},
		"hard link absolute": {[]archivetest.Entry{{Name: "h", Type: tar.TypeLink, Link: "/etc/passwd"}}, "outside the archive"},
		"device":             {[]archivetest.Entry{{Name: "dev", Type: tar.TypeChar}}, "unsupported type"},
		"duplicate":          {[]archivetest.Entry{{Name: "a.tf", Body: "1"}, {Name: "a.tf", Body: "2"}}, "twice"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir, outside := archivetest.Sandbox(t)
			if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Extract(archivetest.Make(t, tc.entries...), dir, DefaultLimits)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
			entries, _ := os.ReadDir(outside)
			if len(entries) != 1 {
				t.Fatalf("outside directory changed: %v", entries)
			}
		})
	}
}

// The "write through symlink" case above fails on the file entry, which comes before the link
// exists. This one puts the link first in a directory that does exist when the file arrives.
func TestExtractNeverWritesThroughLinks(t *testing.T) {
	dir, outside := archivetest.Sandbox(t)
	if err := os.Symlink(outside, filepath.Join(dir, "planted")); err != nil {
		t.Fatal(err)
	}
	_, err := Extract(archivetest.Make(t, archivetest.Entry{Name: "planted/x.tf", Body: "x"}), dir, DefaultLimits)
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("err = %v, want refusal to write through a symlink", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("wrote through the link: %v", entries)
	}
}

func TestExtractCapsSize(t *testing.T) {
	small := Limits{Bytes: 1000, Entries: 5}

	dir, _ := archivetest.Sandbox(t)
	_, err := Extract(archivetest.Make(t, archivetest.Entry{Name: "a", Body: strings.Repeat("x", 600)}, archivetest.Entry{Name: "b", Body: strings.Repeat("x", 600)}), dir, small)
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("size cap: err = %v", err)
	}

	dir, _ = archivetest.Sandbox(t)
	var many []archivetest.Entry
	for i := range 6 {
		many = append(many, archivetest.Entry{Name: strings.Repeat("f", i+1), Body: "x"})
	}
	_, err = Extract(archivetest.Make(t, many...), dir, small)
	if err == nil || !strings.Contains(err.Error(), "more than 5 entries") {
		t.Fatalf("entry cap: err = %v", err)
	}

	dir, _ = archivetest.Sandbox(t)
	if _, err := Extract([]byte("not gzip"), dir, small); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Fatalf("not gzip: err = %v", err)
	}
}
