package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// Unpack writes an image's file system into dir (which must exist), applying its layers bottom
// first the way a container runtime's snapshotter does: a whiteout file (.wh.NAME) removes NAME
// as the layers below left it, and an opaque whiteout (.wh..wh..opq) empties its directory of
// what the layers below put there; neither touches entries of its own layer. All writes go
// through an os.Root, so no entry, link or whiteout can reach outside dir. Owners are applied
// when running as root.
func Unpack(img v1.Image, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	u := &unpacker{root: root, dirs: map[string]*tar.Header{}, chown: os.Geteuid() == 0}
	for i, l := range layers {
		if err := u.layer(l); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return u.finishDirs()
}

type unpacker struct {
	root  *os.Root
	dirs  map[string]*tar.Header // final mode and owner, applied once every layer is in
	chown bool
}

// each calls fn for every entry of a layer, with its cleaned path.
func each(l v1.Layer, fn func(p string, h *tar.Header, r io.Reader) error) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	return walkTar(rc, fn)
}

func (u *unpacker) layer(l v1.Layer) error {
	// Whiteouts apply to the layers below only, so they go first.
	err := each(l, func(p string, _ *tar.Header, _ io.Reader) error {
		dir, base := path.Split(p)
		dir = strings.TrimSuffix(dir, "/")
		switch {
		case base == whiteoutOpaque:
			return u.emptyDir(dir)
		case strings.HasPrefix(base, whiteoutPrefix):
			return u.removeAll(path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix)))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return each(l, func(p string, h *tar.Header, r io.Reader) error {
		if strings.HasPrefix(path.Base(p), whiteoutPrefix) {
			return nil
		}
		return u.entry(p, h, r)
	})
}

func (u *unpacker) emptyDir(dir string) error {
	name := dir
	if name == "" {
		name = "."
	}
	f, err := u.root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	_ = f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := u.removeAll(path.Join(dir, n)); err != nil {
			return err
		}
	}
	return nil
}

// removeAll removes p and everything below it, and forgets the directory modes recorded there.
func (u *unpacker) removeAll(p string) error {
	for d := range u.dirs {
		if d == p || strings.HasPrefix(d, p+"/") {
			delete(u.dirs, d)
		}
	}
	return u.root.RemoveAll(p)
}

func (u *unpacker) entry(p string, h *tar.Header, r io.Reader) error {
	if err := u.root.MkdirAll(path.Dir(p), 0o755); err != nil {
		return err
	}
	fi, err := u.root.Lstat(p)
	exists := err == nil
	if exists && (!fi.IsDir() || h.Typeflag != tar.TypeDir) {
		if err := u.removeAll(p); err != nil {
			return err
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if !exists || !fi.IsDir() {
			if err := u.root.Mkdir(p, 0o755); err != nil {
				return err
			}
		}
		u.dirs[p] = h
		return nil
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archives use TypeRegA
		f, err := u.root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			_ = f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := u.owner(p, h); err != nil {
			return err
		}
		return u.root.Chmod(p, fileMode(h.Mode))
	case tar.TypeSymlink:
		if err := u.root.Symlink(h.Linkname, p); err != nil {
			return err
		}
		return u.owner(p, h)
	case tar.TypeLink:
		target, err := cleanPath(h.Linkname)
		if err != nil || target == "" {
			return fmt.Errorf("bad hard link target %q", h.Linkname)
		}
		return u.root.Link(target, p)
	default:
		return fmt.Errorf("unsupported entry type %q", h.Typeflag)
	}
}

func (u *unpacker) owner(p string, h *tar.Header) error {
	if !u.chown {
		return nil
	}
	return u.root.Lchown(p, h.Uid, h.Gid)
}

// finishDirs applies directory modes and owners deepest first, so a read-only directory is made
// read-only only after everything below it is written.
func (u *unpacker) finishDirs() error {
	ps := make([]string, 0, len(u.dirs))
	for p := range u.dirs {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	slices.Reverse(ps)
	for _, p := range ps {
		h := u.dirs[p]
		if err := u.owner(p, h); err != nil {
			return err
		}
		if err := u.root.Chmod(p, fileMode(h.Mode)); err != nil {
			return err
		}
	}
	return nil
}

// fileMode converts Unix mode bits to an fs.FileMode, keeping setuid, setgid and sticky.
func fileMode(m int64) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}
