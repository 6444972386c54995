package release

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/outpost-dev/terraform-provider-outpost/tools/image"
)

// OCIArchive is an image index read from an OCI archive that tools/cmd/outpost-images wrote (an OCI
// image layout in a tar), with the reference the archive names it by.
type OCIArchive struct {
	// Ref is the full reference of index.json's io.containerd.image.name annotation.
	Ref   name.Tag
	Index v1.ImageIndex
	dir   string
}

// Close removes the unpacked layout.
func (a *OCIArchive) Close() error { return os.RemoveAll(a.dir) }

// OpenOCIArchive unpacks an OCI archive into a temporary directory (Close removes it) and reads
// the one image index it names.
func OpenOCIArchive(path string) (*OCIArchive, error) {
	dir, err := os.MkdirTemp("", "outpost-release-oci-")
	if err != nil {
		return nil, err
	}
	a := &OCIArchive{dir: dir}
	if err := untarLayout(path, dir); err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("%s is not an OCI image layout: %w", path, err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		_ = a.Close()
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		_ = a.Close()
		return nil, err
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations[image.AnnotationContainerdName] == "" {
		_ = a.Close()
		return nil, fmt.Errorf("%s: want one image index named by %s in index.json, found %d entries", path, image.AnnotationContainerdName, len(m.Manifests))
	}
	d := m.Manifests[0]
	if a.Ref, err = name.NewTag(d.Annotations[image.AnnotationContainerdName], name.StrictValidation); err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if a.Index, err = top.ImageIndex(d.Digest); err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// untarLayout extracts the regular files and directories of an OCI layout tar into dir,
// refusing any path that would leave it.
func untarLayout(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.FromSlash(strings.TrimPrefix(h.Name, "./"))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := root.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			w, err := root.Create(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, tr)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %s: type %c has no place in an OCI layout", h.Name, h.Typeflag)
		}
	}
}
