package imagetest

import (
	"archive/tar"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/outpost-dev/terraform-provider-outpost/tools/image"
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
//
// Each layer is read with image.Files, so a layer holds what Files accepts: no path twice (but
// directories), regular files, directories, symbolic links and hard links to regular files.
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
	u := &unpacker{root: root, dirs: map[string]image.Entry{}, chown: os.Geteuid() == 0}
	for i, l := range layers {
		if err := u.layer(l); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return u.finishDirs()
}

type unpacker struct {
	root  *os.Root
	dirs  map[string]image.Entry // final mode and owner, applied once every layer is in
	chown bool
}

func readLayer(l v1.Layer) (*image.Files, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	f := image.NewFiles()
	return f, f.AddTar(rc, nil)
}

func (u *unpacker) layer(l v1.Layer) error {
	f, err := readLayer(l)
	if err != nil {
		return err
	}
	// Paths come sorted, so a directory comes before what it holds.
	paths := f.Paths()
	// Whiteouts apply to the layers below only, so they go first.
	for _, p := range paths {
		dir, base := path.Split(p)
		dir = strings.TrimSuffix(dir, "/")
		var err error
		switch {
		case base == whiteoutOpaque:
			err = u.emptyDir(dir)
		case strings.HasPrefix(base, whiteoutPrefix):
			err = u.removeAll(path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix)))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	// Hard links go last: sorted order may put a link before the file it names.
	var links []image.Entry
	for _, p := range paths {
		e, _ := f.Lookup(p)
		switch {
		case strings.HasPrefix(path.Base(p), whiteoutPrefix):
			continue
		case e.Type == tar.TypeLink:
			links = append(links, e)
			continue
		}
		if err := u.entry(e); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	for _, e := range links {
		if err := u.entry(e); err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
	}
	return nil
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

// entry writes e, replacing what the layers below left at its path (but a directory over a
// directory, which keeps what it holds).
func (u *unpacker) entry(e image.Entry) error {
	p := e.Path
	if err := u.root.MkdirAll(path.Dir(p), 0o755); err != nil {
		return err
	}
	fi, err := u.root.Lstat(p)
	exists := err == nil
	if exists && (!fi.IsDir() || e.Type != tar.TypeDir) {
		if err := u.removeAll(p); err != nil {
			return err
		}
	}
	switch e.Type {
	case tar.TypeDir:
		if !exists || !fi.IsDir() {
			if err := u.root.Mkdir(p, 0o755); err != nil {
				return err
			}
		}
		u.dirs[p] = e
		return nil
	case tar.TypeReg:
		data, err := e.Content()
		if err != nil {
			return err
		}
		if err := u.root.WriteFile(p, data, 0o600); err != nil {
			return err
		}
		if err := u.owner(e); err != nil {
			return err
		}
		return u.root.Chmod(p, fileMode(e.Mode))
	case tar.TypeSymlink:
		if err := u.root.Symlink(e.Linkname, p); err != nil {
			return err
		}
		return u.owner(e)
	case tar.TypeLink:
		return u.root.Link(e.Linkname, p)
	default:
		return fmt.Errorf("unsupported entry type %q", e.Type)
	}
}

func (u *unpacker) owner(e image.Entry) error {
	if !u.chown {
		return nil
	}
	return u.root.Lchown(e.Path, e.UID, e.GID)
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
		e := u.dirs[p]
		if err := u.owner(e); err != nil {
			return err
		}
		if err := u.root.Chmod(p, fileMode(e.Mode)); err != nil {
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
