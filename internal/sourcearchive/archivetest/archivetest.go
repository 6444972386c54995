// Package archivetest builds inline-source archives entry by entry, hostile ones included, for
// the tests of the packer, the job runner and the fuzzers.
package archivetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"
)

// Entry is one tar entry: a file (Body), a directory (Type tar.TypeDir), a symlink or hard link
// (Link with Type), or any raw type.
type Entry struct {
	Name string
	Body string
	Type byte
	Link string
	Mode int64
}

// Make returns the gzip-compressed tar of entries, in order, exactly as given: nothing is
// cleaned or checked, so a test can say what an attacker would send.
func Make(t testing.TB, entries ...Entry) []byte {
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

// Sandbox returns an empty target directory ("src") inside a parent that also holds an empty
// "outside" directory, so a test can check that nothing escaped.
func Sandbox(t testing.TB) (dir, outside string) {
	t.Helper()
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
