package image

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// AnnotationContainerdName is the index.json annotation `ctr images import` (containerd 1.6
	// and later) takes as the image's name, as is.
	AnnotationContainerdName = "io.containerd.image.name"
	// AnnotationRefName is the OCI image-layout annotation naming a descriptor in index.json; we
	// write the tag there, as BuildKit does.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// Named is an image index and the tagged reference it is known by
// ("ghcr.io/outpost-dev/outpost-agent:0.1.0").
type Named struct {
	Ref   string
	Index v1.ImageIndex
}

// WriteArchive writes an OCI image layout as a tar stream holding the named indexes and every
// blob they reference. index.json names each index twice: io.containerd.image.name holds the full
// reference (what `ctr -n k8s.io images import` names the image, so the kubelet finds it by the
// reference in a pod spec) and org.opencontainers.image.ref.name holds the tag (what OCI layout
// readers such as skopeo and crane select by). Entries are sorted and carry fixed times, so the
// same indexes give the same archive bytes.
func WriteArchive(w io.Writer, named ...Named) error {
	if len(named) == 0 {
		return fmt.Errorf("no image to write")
	}
	blobs := map[v1.Hash]blob{}
	top := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, n := range named {
		tag, err := name.NewTag(n.Ref, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("image reference %q: %w (want registry/repository:tag)", n.Ref, err)
		}
		desc, err := collectIndex(n.Index, blobs)
		if err != nil {
			return fmt.Errorf("%s: %w", n.Ref, err)
		}
		desc.Annotations = map[string]string{
			AnnotationContainerdName: tag.Name(),
			AnnotationRefName:        tag.TagStr(),
		}
		top.Manifests = append(top.Manifests, desc)
	}
	indexJSON, err := json.Marshal(top)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: Epoch}); err != nil {
			return err
		}
	}
	digests := make([]v1.Hash, 0, len(blobs))
	for h := range blobs {
		digests = append(digests, h)
	}
	slices.SortFunc(digests, func(a, b v1.Hash) int { return strings.Compare(a.String(), b.String()) })
	for _, h := range digests {
		if err := writeBlob(tw, h, blobs[h]); err != nil {
			return err
		}
	}
	if err := writeTarFile(tw, "index.json", indexJSON); err != nil {
		return err
	}
	if err := writeTarFile(tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	return tw.Close()
}

// blob is a blob's size and a way to read it.
type blob struct {
	size int64
	open func() (io.ReadCloser, error)
}

func rawBlob(b []byte) blob {
	return blob{size: int64(len(b)), open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }}
}

func collectIndex(idx v1.ImageIndex, blobs map[v1.Hash]blob) (v1.Descriptor, error) {
	raw, err := idx.RawManifest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	d, err := idx.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := idx.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	blobs[d] = rawBlob(raw)
	m, err := idx.IndexManifest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	for _, c := range m.Manifests {
		switch {
		case c.MediaType.IsIndex():
			child, err := idx.ImageIndex(c.Digest)
			if err != nil {
				return v1.Descriptor{}, err
			}
			if _, err := collectIndex(child, blobs); err != nil {
				return v1.Descriptor{}, err
			}
		case c.MediaType.IsImage():
			img, err := idx.Image(c.Digest)
			if err != nil {
				return v1.Descriptor{}, err
			}
			if err := collectImage(img, blobs); err != nil {
				return v1.Descriptor{}, err
			}
		default:
			return v1.Descriptor{}, fmt.Errorf("index entry %s has media type %s, neither image nor index", c.Digest, c.MediaType)
		}
	}
	return v1.Descriptor{MediaType: mt, Size: int64(len(raw)), Digest: d}, nil
}

func collectImage(img v1.Image, blobs map[v1.Hash]blob) error {
	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	blobs[d] = rawBlob(raw)
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	cd, err := img.ConfigName()
	if err != nil {
		return err
	}
	blobs[cd] = rawBlob(cfg)
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		ld, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		blobs[ld] = blob{size: size, open: l.Compressed}
	}
	return nil
}

func writeBlob(tw *tar.Writer, h v1.Hash, b blob) error {
	if err := tw.WriteHeader(&tar.Header{
		Name: "blobs/" + h.Algorithm + "/" + h.Hex, Typeflag: tar.TypeReg, Mode: 0o644, Size: b.size, ModTime: Epoch,
	}); err != nil {
		return err
	}
	r, err := b.open()
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	n, err := io.Copy(tw, r)
	if err != nil {
		return fmt.Errorf("blob %s: %w", h, err)
	}
	if n != b.size {
		return fmt.Errorf("blob %s: %d bytes, its descriptor says %d", h, n, b.size)
	}
	return nil
}

func writeTarFile(tw *tar.Writer, p string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: p, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: Epoch}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}
