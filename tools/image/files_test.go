package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

type tarEntry struct {
	hdr  tar.Header
	data string
}

func readTar(t *testing.T, r io.Reader) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{*h, string(b)})
	}
}

func sampleFiles(t *testing.T, reverse bool) *Files {
	t.Helper()
	adds := []Entry{
		{Path: "/usr/lib/git-core/git", Type: tar.TypeReg, Mode: 0o755, Data: []byte("binary")},
		// A hard link whose target sorts after it: the writer must swap them.
		{Path: "usr/bin/git", Type: tar.TypeLink, Linkname: "./usr/lib/git-core/git"},
		{Path: "./etc/os-release", Type: tar.TypeSymlink, Mode: 0o777, Linkname: "../usr/lib/os-release"},
		{Path: "tmp", Type: tar.TypeDir, Mode: 0o1777},
		{Path: "var/local", Type: tar.TypeDir, Mode: 0o2775, GID: 50},
		{Path: "usr/bin/su", Type: tar.TypeReg, Mode: 0o4755, Data: []byte("x")},
	}
	f := NewFiles()
	for i := range adds {
		e := adds[i]
		if reverse {
			e = adds[len(adds)-1-i]
		}
		if err := f.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestWriteTarIsNormalized(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleFiles(t, false).WriteTar(&buf); err != nil {
		t.Fatal(err)
	}
	got := readTar(t, &buf)
	var names []string
	for _, e := range got {
		names = append(names, e.hdr.Name)
		if !e.hdr.ModTime.Equal(Epoch) || e.hdr.Uname != "" || e.hdr.Gname != "" || len(e.hdr.PAXRecords) != 0 {
			t.Errorf("%s: time %v, owner names %q/%q, PAX %v; want the epoch, no names, no records",
				e.hdr.Name, e.hdr.ModTime, e.hdr.Uname, e.hdr.Gname, e.hdr.PAXRecords)
		}
	}
	want := []string{"etc/", "etc/os-release", "tmp/", "usr/", "usr/bin/", "usr/bin/git", "usr/bin/su",
		"usr/lib/", "usr/lib/git-core/", "usr/lib/git-core/git", "var/", "var/local/"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("entries:\n got %v\nwant %v", names, want)
	}
	byName := map[string]tarEntry{}
	for _, e := range got {
		byName[e.hdr.Name] = e
	}
	if e := byName["usr/bin/git"]; e.hdr.Typeflag != tar.TypeReg || e.data != "binary" || e.hdr.Mode != 0o755 {
		t.Errorf("usr/bin/git (first of the hard-link pair) = type %q %q mode %o; want the regular file", e.hdr.Typeflag, e.data, e.hdr.Mode)
	}
	if e := byName["usr/lib/git-core/git"]; e.hdr.Typeflag != tar.TypeLink || e.hdr.Linkname != "usr/bin/git" {
		t.Errorf("usr/lib/git-core/git = type %q -> %q; want a hard link to usr/bin/git", e.hdr.Typeflag, e.hdr.Linkname)
	}
	if e := byName["tmp/"]; e.hdr.Mode != 0o1777 {
		t.Errorf("tmp mode %o, want 1777", e.hdr.Mode)
	}
	if e := byName["var/local/"]; e.hdr.Mode != 0o2775 || e.hdr.Gid != 50 {
		t.Errorf("var/local mode %o gid %d, want 2775 and 50", e.hdr.Mode, e.hdr.Gid)
	}
	if e := byName["usr/bin/su"]; e.hdr.Mode != 0o4755 {
		t.Errorf("setuid bit lost: mode %o", e.hdr.Mode)
	}
	if e := byName["usr/"]; e.hdr.Mode != 0o755 || e.hdr.Uid != 0 {
		t.Errorf("implicit parent usr/: mode %o uid %d, want 755 root", e.hdr.Mode, e.hdr.Uid)
	}
}

func TestLayerDigestDependsOnlyOnTheFiles(t *testing.T) {
	digest := func(f *Files) string {
		l, err := f.Layer()
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	a, b := digest(sampleFiles(t, false)), digest(sampleFiles(t, true))
	if a != b {
		t.Fatalf("same files added in another order: digest %s, then %s", a, b)
	}
	changed := sampleFiles(t, false)
	if err := changed.AddFile("etc/hostname", 0o644, []byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if c := digest(changed); c == a {
		t.Fatalf("a file more left the digest at %s", c)
	}
}

func TestAddRefusesConflictsAndEscapes(t *testing.T) {
	f := NewFiles()
	if err := f.AddFile("etc/passwd", 0o644, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.AddFile("/etc/passwd", 0o644, []byte("other")); err == nil {
		t.Error("the same file added twice was accepted")
	}
	if err := f.Add(Entry{Path: "etc/passwd", Type: tar.TypeDir, Mode: 0o700}); err == nil {
		t.Error("a directory over a file was accepted")
	}
	if err := f.Add(Entry{Path: "etc/passwd/", Type: tar.TypeDir, Mode: 0o755}); err == nil {
		t.Error("a directory named like an existing file was accepted")
	}
	if err := f.AddFile("../outside", 0o644, nil); err == nil {
		t.Error("a path with .. was accepted")
	}
	if err := f.Add(Entry{Path: "dev/null", Type: tar.TypeChar}); err == nil {
		t.Error("a device node was accepted")
	}
	if err := f.AddFile("etc/passwd/x", 0o644, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteTar(io.Discard); err == nil || !strings.Contains(err.Error(), "to be a directory") {
		t.Errorf("a file under a file: WriteTar error %v, want one saying etc/passwd must be a directory", err)
	}
	g := NewFiles()
	if err := g.Add(Entry{Path: "a", Type: tar.TypeLink, Linkname: "missing"}); err != nil {
		t.Fatal(err)
	}
	if err := g.WriteTar(io.Discard); err == nil {
		t.Error("a hard link to a missing file was written")
	}
}

func TestAddTarKeepsModesAndOwnersOnly(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/share/doc/x/copyright", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2, Uname: "root", Uid: 0},
		{Name: "./usr/share/doc/x/changelog.gz", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2},
		{Name: "./var/mail", Typeflag: tar.TypeDir, Mode: 0o2775, Gid: 8, Gname: "mail"},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte("ok"))
		}
	}
	_ = tw.Close()
	f := NewFiles()
	err := f.AddTar(&buf, func(p string, _ byte) bool { return !strings.HasSuffix(p, ".gz") })
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.Paths(), " "); got != "usr/share/doc/x/copyright var/mail" {
		t.Fatalf("paths %q", got)
	}
	e, _ := f.Lookup("var/mail")
	if e.Mode != 0o2775 || e.GID != 8 {
		t.Errorf("var/mail: mode %o gid %d", e.Mode, e.GID)
	}
	c, _ := f.Lookup("/usr/share/doc/x/copyright")
	if string(c.Data) != "ok" || c.Size != 2 {
		t.Errorf("copyright content %q size %d", c.Data, c.Size)
	}
}
