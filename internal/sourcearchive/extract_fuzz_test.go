package sourcearchive

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/sourcearchive/archivetest"
)

// Names and link targets the fuzzers combine: plain paths, nested ones, traversal, absolute
// paths, paths through a link ("l/x"), and names Pack leaves out. The absolute link target is
// absoluteTarget, which each input replaces by the absolute path of a file in its own sandbox:
// the fuzzers run as root in CI, and a link to a real host file that a bug (in the code under
// test or in the fuzzer) wrote through would overwrite it — a link to /etc/passwd once did.
const absoluteTarget = "/ABSOLUTE"

var (
	fuzzNames = []string{"a", "a/b", "b", "a/b/c", "..", "../outside/x", "/abs", "./a", "a/../b", "c/", "a//b", ".", "l",
		"l/x", "d/e", "a/l", "x.tfstate", ".terraform/p", ".git/config", "e\\f"}
	fuzzLinks = []string{"a", "..", "../outside", "a/b", "b/..", absoluteTarget, ".", "l", "l/..", "c/../..", "../src/a", "", "d",
		"l/x", "../../src/a", "a/b/c", ".terraform/p"}
	fuzzTypes = []byte{tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeChar, tar.TypeFifo, tar.TypeBlock, tar.TypeCont}
)

// fuzzLink is the link target b picks, absoluteTarget replaced by abs.
func fuzzLink(b byte, abs string) string {
	if l := fuzzLinks[int(b)%len(fuzzLinks)]; l != absoluteTarget {
		return l
	}
	return abs
}

// fuzzEntries decodes spec, four bytes an entry: type, name, link target (abs for the absolute
// one), and mode and body.
func fuzzEntries(spec []byte, abs string) []archivetest.Entry {
	var out []archivetest.Entry
	for ; len(spec) >= 4 && len(out) < 24; spec = spec[4:] {
		e := archivetest.Entry{Type: fuzzTypes[int(spec[0])%len(fuzzTypes)], Name: fuzzNames[int(spec[1])%len(fuzzNames)],
			Link: fuzzLink(spec[2], abs), Mode: int64(spec[3]) << 4}
		if e.Mode == 0 {
			e.Mode = 0o644
		}
		if e.Type == tar.TypeDir && !strings.HasSuffix(e.Name, "/") {
			e.Name += "/"
		} else if e.Type != tar.TypeDir {
			e.Name = strings.TrimSuffix(e.Name, "/")
		}
		e.Body = strings.Repeat("x", int(spec[3]%5))
		out = append(out, e)
	}
	return out
}

// FuzzExtractArchive unpacks archives built from fuzzed entries (files, directories, symlinks,
// hard links, devices, FIFOs, in any order, with traversal, absolute and link-crossing names)
// next to an "outside" directory holding a secret. Whatever the archive, nothing outside the
// target changes; an archive that is accepted leaves only files, directories and links that
// resolve inside the target, with no setuid, setgid or sticky bit.
// Seeds: testdata/fuzz/FuzzExtractArchive (the escapes archive_test.go refuses, link chains,
// hard links through links, a link replaced by a directory).
func FuzzExtractArchive(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0xa4, 2, 12, 1, 0, 0, 13, 0, 0})
	f.Fuzz(func(t *testing.T, spec []byte) {
		dir, outside := archivetest.Sandbox(t)
		secret := filepath.Join(outside, "secret")
		if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Extract(archivetest.Make(t, fuzzEntries(spec, secret)...), dir, DefaultLimits)
		if es, _ := os.ReadDir(outside); len(es) != 1 {
			t.Fatalf("the outside directory holds %v", es)
		}
		if b, _ := os.ReadFile(secret); string(b) != "s" {
			t.Fatalf("the outside secret now holds %q", b)
		}
		for _, e := range mustReadDir(t, filepath.Dir(dir)) {
			if e.Name() != "src" && e.Name() != "outside" {
				t.Fatalf("extraction created %s next to the target", e.Name())
			}
		}
		if err != nil {
			return
		}
		checkTree(t, dir)
	})
}

// checkTree checks every entry under dir: a file, a directory or a link resolving inside dir,
// without special mode bits.
func checkTree(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch m := fi.Mode(); {
		case m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0:
			t.Fatalf("%s has mode %s", p, m)
		case m&fs.ModeSymlink != 0:
			if err := ResolvesInside(dir, p); err != nil {
				t.Fatalf("accepted link %s: %v", p, err)
			}
		case !m.IsDir() && !m.IsRegular():
			t.Fatalf("%s is a %s", p, m.Type())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func mustReadDir(t *testing.T, dir string) []fs.DirEntry {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// FuzzPackRoundTrip lays out a directory from fuzzed operations (files, directories, relative
// and absolute symlinks, local state files, .terraform/ and .git/), packs it as the CLI does
// (sourcearchive.Pack) and unpacks it as the job runner does (Extract). Whatever Pack accepts, the job
// runner accepts and lays out the same tree minus what Pack leaves out; packing is
// deterministic. Each operation is three bytes: kind, name, link target. The layout is written
// through an os.Root, so an operation whose path runs through a link out of the directory (to
// the sandbox's outside secret, or above it) fails instead of writing there; the secret is
// checked after every input.
// Seeds: testdata/fuzz/FuzzPackRoundTrip.
func FuzzPackRoundTrip(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 14, 0, 2, 12, 0, 0, 16, 0, 3, 2, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		src, outside := archivetest.Sandbox(t)
		secret := filepath.Join(outside, "secret")
		if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(src)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = root.Close() }()
		for ; len(ops) >= 3; ops = ops[3:] {
			name := fuzzNames[int(ops[1])%len(fuzzNames)]
			if strings.Contains(name, "..") || strings.HasPrefix(name, "/") {
				continue // the CLI packs a directory, whose names cannot leave it
			}
			p := filepath.FromSlash(name)
			_ = root.MkdirAll(filepath.Dir(p), 0o755)
			target := fuzzLink(ops[2], secret)
			switch ops[0] % 4 {
			case 0:
				_ = root.WriteFile(p, []byte(name), 0o644)
			case 1:
				_ = root.MkdirAll(p, 0o755)
			case 2:
				_ = root.Symlink(target, p)
			case 3:
				_ = root.Symlink(filepath.Join(src, filepath.FromSlash(fuzzLinks[int(ops[2])%len(fuzzLinks)])), p)
			}
		}
		if b, _ := os.ReadFile(secret); string(b) != "s" {
			t.Fatalf("laying out the directory wrote through a link: the outside secret holds %q", b)
		}
		a, err := Pack(src)
		if err != nil {
			return
		}
		if again, err := Pack(src); err != nil || !bytes.Equal(again.Data, a.Data) {
			t.Fatalf("packing twice gave different archives (%v)", err)
		}
		dst := t.TempDir()
		st, err := Extract(a.Data, dst, DefaultLimits)
		if err != nil {
			t.Fatalf("the job runner refuses what Pack packed: %v\npacked: %s", err, listing(t, src))
		}
		if st.Files != a.Files || st.Dirs != a.Dirs || st.Symlinks != a.Symlinks || st.Bytes != a.Bytes {
			t.Fatalf("unpacked %+v, packed %d files %d dirs %d links %d bytes", st, a.Files, a.Dirs, a.Symlinks, a.Bytes)
		}
		if got, want := listing(t, dst), listing(t, src); got != want {
			t.Fatalf("round trip changed the tree:\npacked   %s\nunpacked %s", want, got)
		}
	})
}

// listing describes a tree as Pack should carry it: every entry but those Pack leaves out, each
// file with its content and each link with what it resolves to (relative to the root).
func listing(t *testing.T, root string) string {
	t.Helper()
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.IsDir() && (d.Name() == ".terraform" || d.Name() == ".git"):
			return filepath.SkipDir
		case d.Type().IsRegular() && (strings.HasSuffix(d.Name(), ".tfstate") || strings.HasSuffix(d.Name(), ".tfstate.backup")):
			return nil
		case d.IsDir():
			b.WriteString(rel + "/ ")
		case d.Type()&fs.ModeSymlink != 0:
			r, err := filepath.EvalSymlinks(p)
			if err != nil {
				return err
			}
			in, _ := filepath.Rel(realRoot, r)
			b.WriteString(rel + "->" + in + " ")
		default:
			c, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.WriteString(rel + "=" + string(c) + " ")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
