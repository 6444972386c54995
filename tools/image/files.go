package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is the modification time of every entry of every layer. Layer contents depend on nothing
// but the files themselves, so a layer whose files did not change keeps its digest from one
// release to the next and nodes do not pull it again. The image's creation time (from
// SOURCE_DATE_EPOCH or the commit) lives in the image config, not in the layers.
var Epoch = time.Unix(0, 0).UTC()

// Entry is one file system object of a layer.
type Entry struct {
	// Path is slash-separated and relative to the root ("usr/bin/git").
	Path string
	// Type is tar.TypeReg, tar.TypeDir, tar.TypeSymlink or tar.TypeLink (a hard link to the
	// entry named by Linkname).
	Type byte
	// Mode holds the Unix permission bits, including setuid, setgid and sticky (0o4755, 0o1777).
	Mode int64
	// UID and GID are numeric; names are never written.
	UID, GID int
	// Linkname is the target of a symbolic link, or the path of a hard link's entry.
	Linkname string
	// Data is the content of a regular file, unless Source is set.
	Data []byte
	// Source names a host file holding the content of a regular file too large to keep in
	// memory (a binary). It is read when the layer is written.
	Source string
	// Size is the content's size; Add fills it in.
	Size int64
}

// Files are the file system objects of one layer, keyed by path. The zero value is not usable;
// call NewFiles.
type Files struct {
	entries map[string]*Entry
	parents map[string]bool // directories implied by the entries' paths
}

// NewFiles returns an empty set of files.
func NewFiles() *Files { return &Files{entries: map[string]*Entry{}, parents: map[string]bool{}} }

func (f *Files) addParents(p string) {
	for d := path.Dir(p); d != "." && !f.parents[d]; d = path.Dir(d) {
		f.parents[d] = true
	}
}

// cleanPath turns an archive or image path into the form Files keys on, and refuses a path that
// leaves the root.
func cleanPath(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return "", fmt.Errorf("path %q has a .. element", p)
	}
	c := path.Clean("/" + p)
	if c == "/" {
		return "", nil
	}
	return c[1:], nil
}

// Add adds an entry. A directory that is already there is kept (the first one's mode wins, as
// dpkg keeps an existing directory); any other path given twice is an error, because two
// packages or two build steps that ship the same file would silently shadow each other.
func (f *Files) Add(e Entry) error {
	p, err := cleanPath(e.Path)
	if err != nil {
		return err
	}
	if p == "" {
		return nil // the root itself is implicit
	}
	e.Path = p
	switch e.Type {
	case tar.TypeReg:
		if e.Source != "" {
			fi, err := os.Stat(e.Source)
			if err != nil {
				return fmt.Errorf("file %s: %w", p, err)
			}
			if !fi.Mode().IsRegular() {
				return fmt.Errorf("file %s: source %s is not a regular file", p, e.Source)
			}
			e.Size = fi.Size()
		} else {
			e.Size = int64(len(e.Data))
		}
	case tar.TypeDir, tar.TypeSymlink:
		e.Size = 0
	case tar.TypeLink:
		l, err := cleanPath(e.Linkname)
		if err != nil || l == "" {
			return fmt.Errorf("hard link %s: bad target %q", p, e.Linkname)
		}
		e.Linkname, e.Size = l, 0
	default:
		return fmt.Errorf("%s: unsupported entry type %q", p, e.Type)
	}
	if e.Mode&^0o7777 != 0 {
		return fmt.Errorf("%s: mode %o has bits beyond permissions", p, e.Mode)
	}
	if old, ok := f.entries[p]; ok {
		if old.Type == tar.TypeDir && e.Type == tar.TypeDir {
			return nil
		}
		return fmt.Errorf("%s is added twice", p)
	}
	f.entries[p] = &e
	f.addParents(p)
	return nil
}

// AddFile adds a regular file owned by root with the given content.
func (f *Files) AddFile(p string, mode int64, data []byte) error {
	return f.Add(Entry{Path: p, Type: tar.TypeReg, Mode: mode, Data: data})
}

// AddHostFile adds a regular file owned by root whose content is read from src on the host
// when the layer is written.
func (f *Files) AddHostFile(p string, mode int64, src string) error {
	return f.Add(Entry{Path: p, Type: tar.TypeReg, Mode: mode, Source: src})
}

// AddTar adds every entry of a tar stream (a Debian package's data, say) for which keep returns
// true; keep may be nil. Ownership and modes are taken from the stream; names, times and
// extended attributes are not.
func (f *Files) AddTar(r io.Reader, keep func(p string, typ byte) bool) error {
	return walkTar(r, func(p string, h *tar.Header, content io.Reader) error {
		if keep != nil && !keep(p, h.Typeflag) {
			return nil
		}
		e := Entry{Path: p, Type: h.Typeflag, Mode: h.Mode & 0o7777, UID: h.Uid, GID: h.Gid, Linkname: h.Linkname}
		if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA { //nolint:staticcheck // old archives use TypeRegA
			e.Type = tar.TypeReg
			var err error
			if e.Data, err = io.ReadAll(content); err != nil {
				return err
			}
		}
		return f.Add(e)
	})
}

// walkTar calls fn for every entry of a tar stream but the root, with the entry's cleaned path
// and a reader of its content; a path that leaves the root is an error.
func walkTar(r io.Reader, fn func(p string, h *tar.Header, content io.Reader) error) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p, err := cleanPath(h.Name)
		if err != nil {
			return err
		}
		if p == "" {
			continue
		}
		if err := fn(p, h, tr); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
}

// Lookup returns the entry at p, if there is one; a directory that only the paths of other
// entries imply is returned as a root-owned 0755 directory, as the layer will have it.
func (f *Files) Lookup(p string) (Entry, bool) {
	c, err := cleanPath(p)
	if err != nil {
		return Entry{}, false
	}
	if e, ok := f.entries[c]; ok {
		return *e, true
	}
	if f.parents[c] {
		return Entry{Path: c, Type: tar.TypeDir, Mode: 0o755}, true
	}
	return Entry{}, false
}

// Paths returns every path, sorted.
func (f *Files) Paths() []string {
	ps := make([]string, 0, len(f.entries))
	for p := range f.entries {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// Content returns a regular file's content.
func (e Entry) Content() ([]byte, error) {
	if e.Source != "" {
		return os.ReadFile(e.Source)
	}
	return e.Data, nil
}

// normalized returns the entries in the order they are written: sorted by path, every parent
// directory present, and each group of hard links rewritten so that its first path in that order
// carries the content and the others link to it (a tar reader needs a link's target before the
// link).
func (f *Files) normalized() ([]*Entry, error) {
	all := make(map[string]*Entry, len(f.entries))
	for p, e := range f.entries {
		c := *e
		all[p] = &c
	}
	for p := range f.entries {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if e, ok := all[d]; ok {
				if e.Type != tar.TypeDir {
					return nil, fmt.Errorf("%s needs %s to be a directory, but it is not", p, d)
				}
				continue
			}
			all[d] = &Entry{Path: d, Type: tar.TypeDir, Mode: 0o755}
		}
	}
	// Group hard links by the regular file they end at.
	groups := map[string][]string{}
	for p, e := range all {
		if e.Type != tar.TypeLink {
			continue
		}
		target, seen := e.Linkname, map[string]bool{p: true}
		for {
			t, ok := all[target]
			if !ok {
				return nil, fmt.Errorf("hard link %s: target %s is not in the layer", p, e.Linkname)
			}
			if t.Type == tar.TypeReg {
				break
			}
			if t.Type != tar.TypeLink || seen[target] {
				return nil, fmt.Errorf("hard link %s: target %s is not a regular file", p, e.Linkname)
			}
			seen[target] = true
			target = t.Linkname
		}
		groups[target] = append(groups[target], p)
	}
	for target, links := range groups {
		members := append(links, target)
		slices.Sort(members)
		first := members[0]
		if first != target {
			content := *all[target]
			content.Path = first
			all[first] = &content
		}
		for _, m := range members[1:] {
			all[m] = &Entry{Path: m, Type: tar.TypeLink, Mode: all[first].Mode, UID: all[first].UID, GID: all[first].GID, Linkname: first}
		}
	}
	out := make([]*Entry, 0, len(all))
	for _, e := range all {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *Entry) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// WriteTar writes the files as a normalized tar stream: entries sorted by path, parents first,
// every time set to Epoch, numeric owners only, no extended attributes. The same files always
// give the same bytes.
func (f *Files) WriteTar(w io.Writer) error {
	entries, err := f.normalized()
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{
			Name: e.Path, Typeflag: e.Type, Mode: e.Mode, Uid: e.UID, Gid: e.GID,
			Linkname: e.Linkname, Size: e.Size, ModTime: Epoch,
		}
		if e.Type == tar.TypeDir {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
		if e.Type != tar.TypeReg {
			continue
		}
		if err := writeContent(tw, e); err != nil {
			return err
		}
	}
	return tw.Close()
}

func writeContent(w io.Writer, e *Entry) error {
	if e.Source == "" {
		_, err := w.Write(e.Data)
		return err
	}
	src, err := os.Open(e.Source)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	n, err := io.Copy(w, src)
	if err != nil {
		return fmt.Errorf("%s: reading %s: %w", e.Path, e.Source, err)
	}
	if n != e.Size {
		return fmt.Errorf("%s: %s changed size while the layer was written (%d, then %d bytes)", e.Path, e.Source, e.Size, n)
	}
	return nil
}

// Layer writes the files as a gzip-compressed OCI layer. The gzip stream carries no name and no
// time, and the compression level is fixed, so the layer's digest depends only on the files and
// on the Go release's compress/gzip.
func (f *Files) Layer() (v1.Layer, error) {
	var buf bytes.Buffer
	// Level 6: level 9 takes twice as long for 0.4% less (measured on the 91 MB tofu binary).
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if err := f.WriteTar(zw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	blob := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(blob)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
