package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func layerOf(t *testing.T, adds ...Entry) Layer {
	t.Helper()
	f := NewFiles()
	for _, e := range adds {
		if err := f.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	l, err := f.Layer()
	if err != nil {
		t.Fatal(err)
	}
	return Layer{Layer: l, CreatedBy: "test"}
}

func reg(p, data string, mode int64) Entry {
	return Entry{Path: p, Type: tar.TypeReg, Mode: mode, Data: []byte(data)}
}

func testIndex(t *testing.T) v1.ImageIndex {
	t.Helper()
	shared := layerOf(t, reg("etc/passwd", "root:x:0:0::/:/sbin/nologin\n", 0o644))
	var imgs []v1.Image
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		plat, err := ParsePlatform(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := NewImage(plat, time.Unix(1700000000, 0), Config{
			User: "65532:65532", Entrypoint: []string{"/app"}, Env: []string{"PATH=/usr/bin"},
			Labels: map[string]string{"org.opencontainers.image.version": "1.2.3"},
		}, map[string]string{"org.opencontainers.image.version": "1.2.3"},
			[]Layer{shared, layerOf(t, reg("app", p, 0o755))})
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
	}
	idx, err := NewIndex(imgs, map[string]string{"org.opencontainers.image.source": "https://example.com/x"})
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestWriteArchiveIsAnOCILayoutNamedForContainerd(t *testing.T) {
	idx := testIndex(t)
	var buf bytes.Buffer
	if err := WriteArchive(&buf, Named{Ref: "ghcr.io/outpost-dev/outpost-agent:1.2.3", Index: idx}); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := WriteArchive(&again, Named{Ref: "ghcr.io/outpost-dev/outpost-agent:1.2.3", Index: testIndex(t)}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Error("the same index written twice gave different archive bytes")
	}

	dir := t.TempDir()
	var blobs int
	for _, e := range readTar(t, bytes.NewReader(buf.Bytes())) {
		if !e.hdr.ModTime.Equal(Epoch) {
			t.Errorf("%s has time %v", e.hdr.Name, e.hdr.ModTime)
		}
		if e.hdr.Typeflag == tar.TypeDir {
			continue
		}
		if hexDigest, ok := strings.CutPrefix(e.hdr.Name, "blobs/sha256/"); ok {
			blobs++
			sum := sha256.Sum256([]byte(e.data))
			if hex.EncodeToString(sum[:]) != hexDigest {
				t.Errorf("blob %s holds content with digest %x", e.hdr.Name, sum)
			}
		}
		p := filepath.Join(dir, e.hdr.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(e.data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// index + 2 manifests + 2 configs + 1 shared layer + 2 app layers.
	if blobs != 8 {
		t.Errorf("%d blobs, want 8 (the shared layer once)", blobs)
	}
	var top v1.IndexManifest
	raw, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if len(top.Manifests) != 1 || top.Manifests[0].Digest != want || top.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index.json manifests %+v, want the one index %s", top.Manifests, want)
	}
	ann := top.Manifests[0].Annotations
	if ann[AnnotationContainerdName] != "ghcr.io/outpost-dev/outpost-agent:1.2.3" || ann[AnnotationRefName] != "1.2.3" {
		t.Errorf("index.json annotations %v", ann)
	}

	// go-containerregistry's own layout reader finds the same index, platforms and layers.
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	read, err := outer.ImageIndex(want)
	if err != nil {
		t.Fatal(err)
	}
	m, err := read.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, d := range m.Manifests {
		plats = append(plats, d.Platform.String())
		img, err := read.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 2 {
			t.Fatalf("%s: %d layers (%v)", d.Platform, len(layers), err)
		}
		cf, err := img.ConfigFile()
		if err != nil || cf.Config.User != "65532:65532" || cf.Architecture != d.Platform.Architecture {
			t.Errorf("%s: config %+v (%v)", d.Platform, cf, err)
		}
	}
	if strings.Join(plats, " ") != "linux/amd64 linux/arm64/v8" {
		t.Errorf("platforms %v", plats)
	}
}

func TestWriteArchiveRefusesAReferenceWithoutTag(t *testing.T) {
	for _, ref := range []string{"", "ghcr.io/x/y@sha256:" + strings.Repeat("0", 64), "Bad Name:1"} {
		if err := WriteArchive(&bytes.Buffer{}, Named{Ref: ref, Index: testIndex(t)}); err == nil {
			t.Errorf("reference %q accepted", ref)
		}
	}
}

func TestParsePlatform(t *testing.T) {
	for in, want := range map[string]string{"linux/amd64": "linux/amd64", "linux/arm64": "linux/arm64/v8", "linux/arm/v7": "linux/arm/v7"} {
		p, err := ParsePlatform(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePlatform(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, bad := range []string{"linux", "linux/", "/amd64", "a/b/c/d"} {
		if _, err := ParsePlatform(bad); err == nil {
			t.Errorf("ParsePlatform(%q) accepted", bad)
		}
	}
}
