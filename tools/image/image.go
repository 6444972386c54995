// Package image builds OCI images without a container daemon or registry: reproducible layers
// from files, image configs, multi-platform image indexes, and oci-layout archives that
// containerd imports under the intended name. It also checks that the programs in an image find
// their shared libraries in it. (Unpacking an image, for tests, is imagetest.Unpack.)
//
// Everything here is a pure function of its inputs: the same files, config and creation time give
// the same digests on any machine with the same Go release.
package image

import (
	"fmt"
	"maps"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Platform is the OS and CPU an image runs on, in OCI terms.
type Platform struct {
	OS           string // "linux"
	Architecture string // GOARCH values: "amd64", "arm64"
	Variant      string // "v8" for arm64
}

// ParsePlatform parses "linux/amd64" or "linux/arm64" (variant v8 implied), and
// "os/arch/variant".
func ParsePlatform(s string) (Platform, error) {
	var p Platform
	parts := strings.Split(s, "/")
	switch len(parts) {
	case 2:
		p = Platform{OS: parts[0], Architecture: parts[1]}
	case 3:
		p = Platform{OS: parts[0], Architecture: parts[1], Variant: parts[2]}
	default:
		return p, fmt.Errorf("platform %q: want os/arch, e.g. linux/amd64", s)
	}
	if p.OS == "" || p.Architecture == "" {
		return p, fmt.Errorf("platform %q: want os/arch, e.g. linux/amd64", s)
	}
	if p.Architecture == "arm64" && p.Variant == "" {
		p.Variant = "v8"
	}
	return p, nil
}

// String is "os/arch" or "os/arch/variant".
func (p Platform) String() string {
	if p.Variant != "" {
		return p.OS + "/" + p.Architecture + "/" + p.Variant
	}
	return p.OS + "/" + p.Architecture
}

// Layer is one layer of an image with the history line that says what it holds
// (`crane config` and `docker history` show it).
type Layer struct {
	Layer     v1.Layer
	CreatedBy string
}

// Config is how an image's processes run, and its labels.
type Config struct {
	User       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	Labels     map[string]string
}

// NewImage assembles an OCI image (OCI manifest and config media types) for one platform from its
// layers, bottom first. Annotations go on the manifest; the labels in cfg go in the config.
func NewImage(p Platform, created time.Time, cfg Config, annotations map[string]string, layers []Layer) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range layers {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     l.Layer,
			MediaType: types.OCILayer,
			History:   v1.History{Created: v1.Time{Time: created.UTC()}, CreatedBy: l.CreatedBy},
		})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: created.UTC()}
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Config = v1.Config{
		User:       cfg.User,
		Entrypoint: cfg.Entrypoint,
		Cmd:        cfg.Cmd,
		Env:        cfg.Env,
		WorkingDir: cfg.WorkingDir,
		Labels:     maps.Clone(cfg.Labels),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	if len(annotations) > 0 {
		annotated, ok := mutate.Annotations(img, annotations).(v1.Image)
		if !ok {
			return nil, fmt.Errorf("annotating an image did not return an image")
		}
		img = annotated
	}
	return img, nil
}

// NewIndex assembles an OCI image index of one image per platform, with annotations on the index.
func NewIndex(images []v1.Image, annotations map[string]string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	adds := make([]mutate.IndexAddendum, 0, len(images))
	for _, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: cf.Platform()},
		})
	}
	idx = mutate.AppendManifests(idx, adds...)
	if len(annotations) > 0 {
		annotated, ok := mutate.Annotations(idx, annotations).(v1.ImageIndex)
		if !ok {
			return nil, fmt.Errorf("annotating an image index did not return an index")
		}
		idx = annotated
	}
	return idx, nil
}

// Size is the bytes a node downloads for an image: its manifest, config and compressed layers.
func Size(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}
