package jobrun

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// entry is one tar entry for tests: a file (Body), a directory (Dir), a symlink or hard link
// (Link with Type), or any raw type.
type entry struct {
	Name string
	Body string
	Type byte
	Link string
	Mode int64
}

func makeArchive(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Typeflag: e.Type, Linkname: e.Link, Mode: e.Mode}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.Body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sandbox returns a target directory inside a parent that also holds an "outside" directory, so
// a test can check that nothing escaped.
func sandbox(t *testing.T) (dir, outside string) {
	parent := t.TempDir()
	dir = filepath.Join(parent, "src")
	outside = filepath.Join(parent, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return dir, outside
}

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

func TestExtractArchiveLaysOutFiles(t *testing.T) {
	dir, outside := sandbox(t)
	st, err := extractArchive(makeArchive(t,
		entry{Name: "./", Type: tar.TypeDir, Mode: 0o755},
		entry{Name: "./main.tf", Body: "output \"x\" { value = 1 }\n"},
		entry{Name: "modules/net/", Type: tar.TypeDir, Mode: 0o755},
		entry{Name: "modules/net/main.tf", Body: "# net\n"},
		entry{Name: "scripts/run.sh", Body: "#!/bin/sh\n", Mode: 0o4755},
		entry{Name: "shared.tf", Type: tar.TypeSymlink, Link: "modules/net/main.tf"},
		entry{Name: "modules/up", Type: tar.TypeSymlink, Link: ".."},
		entry{Name: "copy.tf", Type: tar.TypeLink, Link: "modules/net/main.tf"},
	), dir)
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

func TestExtractArchiveRefusesEscapes(t *testing.T) {
	cases := map[string]struct {
		entries []entry
		want    string
	}{
		"dot-dot":             {[]entry{{Name: "../evil.tf", Body: "x"}}, "'..'"},
		"dot-dot inside":      {[]entry{{Name: "a/../../evil.tf", Body: "x"}}, "'..'"},
		"absolute":            {[]entry{{Name: "/tmp/evil.tf", Body: "x"}}, "absolute"},
		"symlink absolute":    {[]entry{{Name: "l", Type: tar.TypeSymlink, Link: "/etc"}}, "absolute"},
		"symlink parent":      {[]entry{{Name: "l", Type: tar.TypeSymlink, Link: "../outside"}}, "outside the archive"},
		"symlink deep parent": {[]entry{{Name: "a/b/l", Type: tar.TypeSymlink, Link: "../../../outside"}}, "outside the archive"},
		// Each link alone stays inside; together they point to the parent directory.
		"symlink chain": {[]entry{
			{Name: "a/", Type: tar.TypeDir},
			{Name: "a/b", Type: tar.TypeSymlink, Link: ".."},
			{Name: "c", Type: tar.TypeSymlink, Link: "a/b/../outside"},
		}, "resolves outside"},
		// A file written through a link planted earlier in the archive.
		"write through symlink": {[]entry{
			{Name: "l", Type: tar.TypeSymlink, Link: "."},
			{Name: "l/x.tf", Body: "x"},
		}, "written through the symlink"},
		"symlink over directory": {[]entry{
			{Name: "d/x.tf", Body: "x"},
			{Name: "d", Type: tar.TypeSymlink, Link: "."},
		}, "clashes"},
		"dangling symlink":   {[]entry{{Name: "l", Type: tar.TypeSymlink, Link: "missing/file"}}, "does not resolve"},
		"hard link outside":  {[]entry{{Name: "h", Type: tar.TypeLink, Link: "../outside/secret"}}, "outside the archive"},
		"hard link absolute": {[]entry{{Name: "h", Type: tar.TypeLink, Link: "/etc/passwd"}}, "outside the archive"},
		"device":             {[]entry{{Name: "dev", Type: tar.TypeChar}}, "unsupported type"},
		"duplicate":          {[]entry{{Name: "a.tf", Body: "1"}, {Name: "a.tf", Body: "2"}}, "twice"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir, outside := sandbox(t)
			if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := extractArchive(makeArchive(t, tc.entries...), dir)
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
func TestExtractArchiveNeverWritesThroughLinks(t *testing.T) {
	dir, outside := sandbox(t)
	if err := os.Symlink(outside, filepath.Join(dir, "planted")); err != nil {
		t.Fatal(err)
	}
	_, err := extractArchive(makeArchive(t, entry{Name: "planted/x.tf", Body: "x"}), dir)
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("err = %v, want refusal to write through a symlink", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("wrote through the link: %v", entries)
	}
}

func TestExtractArchiveCapsSize(t *testing.T) {
	defer func(b int64, n int) { maxArchiveBytes, maxArchiveEntries = b, n }(maxArchiveBytes, maxArchiveEntries)
	maxArchiveBytes, maxArchiveEntries = 1000, 5

	dir, _ := sandbox(t)
	_, err := extractArchive(makeArchive(t, entry{Name: "a", Body: strings.Repeat("x", 600)}, entry{Name: "b", Body: strings.Repeat("x", 600)}), dir)
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("size cap: err = %v", err)
	}

	dir, _ = sandbox(t)
	var many []entry
	for i := range 6 {
		many = append(many, entry{Name: strings.Repeat("f", i+1), Body: "x"})
	}
	_, err = extractArchive(makeArchive(t, many...), dir)
	if err == nil || !strings.Contains(err.Error(), "more than 5 entries") {
		t.Fatalf("entry cap: err = %v", err)
	}

	dir, _ = sandbox(t)
	if _, err := extractArchive([]byte("not gzip"), dir); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Fatalf("not gzip: err = %v", err)
	}
}

func TestCountNamesTheNumber(t *testing.T) {
	for n, want := range map[int]string{0: "0 files", 1: "1 file", 2: "2 files"} {
		if got := count(n, "file", "files"); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}
