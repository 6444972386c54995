package imagetest

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/outpost-dev/terraform-provider-outpost/tools/image"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// layer is a layer of the given entries, written the way the images' layers are.
func layer(t *testing.T, entries ...image.Entry) image.Layer {
	t.Helper()
	f := image.NewFiles()
	for _, e := range entries {
		must(t, f.Add(e))
	}
	l, err := f.Layer()
	must(t, err)
	return image.Layer{Layer: l, CreatedBy: "test"}
}

func file(p, data string, mode int64) image.Entry {
	return image.Entry{Path: p, Type: tar.TypeReg, Mode: mode, Data: []byte(data)}
}

func imageOf(t *testing.T, layers ...image.Layer) v1.Image {
	t.Helper()
	img, err := image.NewImage(image.Platform{OS: "linux", Architecture: "amd64"}, time.Unix(1, 0), image.Config{}, nil, layers)
	must(t, err)
	return img
}

func TestUnpackAppliesLayersAndWhiteouts(t *testing.T) {
	lower := layer(t,
		file("a/gone", "x", 0o644), file("a/stays", "lower", 0o644),
		file("b/hidden", "x", 0o644), image.Entry{Path: "b/sub/deep", Type: tar.TypeReg, Mode: 0o600, Data: []byte("x")},
		file("c/file", "x", 0o644), file("d/replaced", "old", 0o644),
		image.Entry{Path: "ro", Type: tar.TypeDir, Mode: 0o555}, file("ro/inside", "x", 0o444),
	)
	upper := layer(t,
		file("a/.wh.gone", "", 0o644),
		file("b/.wh..wh..opq", "", 0o644), file("b/new", "upper", 0o644),
		file(".wh.c", "", 0o644),
		file("d/replaced", "new", 0o640),
		image.Entry{Path: "bin/sh", Type: tar.TypeSymlink, Mode: 0o777, Linkname: "dash"},
		file("bin/dash", "shell", 0o755),
		image.Entry{Path: "bin/su", Type: tar.TypeReg, Mode: 0o4755, Data: []byte("su"), UID: 0, GID: 0},
		image.Entry{Path: "bin/zz", Type: tar.TypeLink, Linkname: "bin/dash"},
		image.Entry{Path: "tmp", Type: tar.TypeDir, Mode: 0o1777},
		image.Entry{Path: "home/user", Type: tar.TypeDir, Mode: 0o700, UID: 65532, GID: 65532},
	)
	dir := t.TempDir()
	must(t, Unpack(imageOf(t, lower, upper), dir))
	exists := func(p string) bool { _, err := os.Lstat(filepath.Join(dir, p)); return err == nil }
	read := func(p string) string { b, _ := os.ReadFile(filepath.Join(dir, p)); return string(b) }
	for _, p := range []string{"a/gone", "b/hidden", "b/sub", "c", "b/.wh..wh..opq", "a/.wh.gone", ".wh.c"} {
		if exists(p) {
			t.Errorf("%s exists after the upper layer's whiteouts", p)
		}
	}
	for p, want := range map[string]string{"a/stays": "lower", "b/new": "upper", "d/replaced": "new", "ro/inside": "x"} {
		if got := read(p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if target, err := os.Readlink(filepath.Join(dir, "bin/sh")); err != nil || target != "dash" {
		t.Errorf("bin/sh -> %q (%v), want dash", target, err)
	}
	a, _ := os.Stat(filepath.Join(dir, "bin/dash"))
	b, _ := os.Stat(filepath.Join(dir, "bin/zz"))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Error("bin/zz is not a hard link of bin/dash")
	}
	modes := map[string]fs.FileMode{
		"bin/su": 0o755 | fs.ModeSetuid, "tmp": 0o777 | fs.ModeSticky | fs.ModeDir,
		"ro": 0o555 | fs.ModeDir, "d/replaced": 0o640, "home/user": 0o700 | fs.ModeDir,
	}
	for p, want := range modes {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s mode %v (%v), want %v", p, fi.Mode(), err, want)
		}
	}
	if os.Geteuid() == 0 {
		fi, _ := os.Lstat(filepath.Join(dir, "home/user"))
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 65532 || st.Gid != 65532 {
			t.Errorf("home/user owned by %v, want 65532:65532", fi.Sys())
		}
	}
}

func TestUnpackStaysInsideTheDirectory(t *testing.T) {
	outside := t.TempDir()
	evil := layer(t,
		image.Entry{Path: "escape", Type: tar.TypeSymlink, Mode: 0o777, Linkname: outside},
		image.Entry{Path: "up", Type: tar.TypeSymlink, Mode: 0o777, Linkname: "../../../../../../" + outside},
	)
	for _, p := range []string{"escape/planted", "up/planted"} {
		// Files would add the parent as a directory, replacing the link; a hostile layer does not.
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: p, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
		_, _ = tw.Write([]byte("x"))
		_ = tw.Close()
		raw, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
		must(t, err)
		dir := t.TempDir()
		err = Unpack(imageOf(t, evil, image.Layer{Layer: raw}), dir)
		if err == nil {
			t.Errorf("writing %s through a symbolic link out of the image succeeded", p)
		} else {
			t.Logf("%s: %v", p, err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("unpacking wrote %v outside the target directory", entries)
	}
}
