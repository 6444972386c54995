package testbed

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Images the test bed builds from the testbed-pod program (internal/testbed/cmd/testbed-pod) and
// imports into the real node's containerd at start-up (why these two are imported, not pulled
// from the test bed's registry: registry.go). The names use the reserved .invalid domain, so a
// Pod that names an image the node does not have fails with ErrImagePull at once instead of
// reaching out.
const (
	// PauseImage is the sandbox ("pause") image of the real node's Pods.
	PauseImage = "testbed.outpost.invalid/pause:1"
	// ToolboxImage is a tiny image for test Pods: its entrypoint /testbed-pod runs one of the
	// testbed-pod commands given as arguments, e.g. ["echo", "hello"], ["fail", "3", "why"],
	// ["sleep", "1h"], ["serve", ":8080", "text"], ["get", "http://svc:8080/"], ["resolve",
	// "svc.ns.svc.cluster.local"]; see the program's doc comment.
	ToolboxImage = "testbed.outpost.invalid/toolbox:1"
)

// podBinary is the name of the testbed-pod program among the test bed binaries.
const podBinary = "testbed-pod"

// The two built-in images are written by hand, not with an image library: they are one layer
// and a config each, and the test bed is imported by the product's own tests, whose module
// (the root go.mod) keeps image libraries out (ARCHITECTURE.md, "Modules"). The media types and
// files are those of the OCI image spec v1.1 (image layout, manifest, config).
const (
	ociManifestType = "application/vnd.oci.image.manifest.v1+json"
	ociConfigType   = "application/vnd.oci.image.config.v1+json"
	ociLayerType    = "application/vnd.oci.image.layer.v1.tar+gzip"
	ociIndexType    = "application/vnd.oci.image.index.v1+json"
)

// ociDescriptor points at a blob: its media type, digest and size.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *ociPlatform      `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ociPlatform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// ociImage is a single-layer image held in memory: the gzipped layer, the config and the
// manifest that points at both.
type ociImage struct {
	layer, config, manifest []byte
}

// blobs are the image's blobs in the order a push uploads them (the manifest last, apart).
func (img *ociImage) blobs() [][]byte { return [][]byte{img.layer, img.config} }

// descriptor is the manifest's descriptor.
func (img *ociImage) descriptor() ociDescriptor {
	return ociDescriptor{MediaType: ociManifestType, Digest: digestOf(img.manifest), Size: int64(len(img.manifest))}
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// writeImageArchive writes a single-layer OCI image holding the file binary as /testbed-pod, with
// the given entrypoint, as an OCI image layout tar archive (what `ctr images import` reads) at
// path. The image is named ref through the annotation containerd's importer uses, so it needs no
// --base-name. Both built-in images share their one layer, so the node stores it once.
func writeImageArchive(path, ref, binary string, entrypoint []string) (err error) {
	img, err := podImage(binary, entrypoint)
	if err != nil {
		return fmt.Errorf("building %s: %w", ref, err)
	}
	desc := img.descriptor()
	desc.Platform = &ociPlatform{Architecture: runtime.GOARCH, OS: "linux"}
	desc.Annotations = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:],
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": ociIndexType, "manifests": []ociDescriptor{desc}})
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
	}
	for _, b := range append(img.blobs(), img.manifest) {
		files = append(files, struct {
			name string
			data []byte
		}{"blobs/sha256/" + strings.TrimPrefix(digestOf(b), "sha256:"), b})
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
			return err
		}
	}
	for _, file := range files {
		if err := tw.WriteHeader(&tar.Header{Name: file.name, Mode: 0o644, Size: int64(len(file.data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(file.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// podImage is a single-layer OCI image holding the file binary as /testbed-pod, with the given
// entrypoint, for this machine's architecture.
func podImage(binary string, entrypoint []string) (*ociImage, error) {
	layerTar, err := fileLayer(binary, podBinary)
	if err != nil {
		return nil, fmt.Errorf("building the layer: %w", err)
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(layerTar); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	img := &ociImage{layer: gz.Bytes()}
	img.config, err = json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": entrypoint, "Env": []string{"PATH=/"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{digestOf(layerTar)}},
	})
	if err != nil {
		return nil, err
	}
	img.manifest, err = json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     ociManifestType,
		"config":        ociDescriptor{MediaType: ociConfigType, Digest: digestOf(img.config), Size: int64(len(img.config))},
		"layers":        []ociDescriptor{{MediaType: ociLayerType, Digest: digestOf(img.layer), Size: int64(len(img.layer))}},
	})
	return img, err
}

// fileLayer returns a layer tar (uncompressed) holding the file at src as /name, mode 0755, with
// a fixed modification time so the same binary always makes the same image.
func fileLayer(src, name string) ([]byte, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(b); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ToolboxLayerTar returns the toolbox image's one layer, uncompressed: a tar holding the
// testbed-pod program as /testbed-pod. A test image that needs the toolbox beside other content
// (a job image whose Terraform runs `/testbed-pod reach …` through local-exec, say) adds it as a
// layer with its image library (tools/ocitest.ToolboxLayer).
func ToolboxLayerTar() ([]byte, error) {
	binDir, err := findBinaries()
	if err != nil {
		return nil, err
	}
	return fileLayer(filepath.Join(binDir, podBinary), podBinary)
}

// importBuiltinImages waits for containerd (the process ctrd) to serve, then builds the pause and
// toolbox images from the testbed-pod binary and imports them.
func (c *Cluster) importBuiltinImages(ctx context.Context, n *node, ctrd *process, binary string) error {
	deadline := time.Now().Add(nodeReadyTimeout)
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", n.files.socket)
		if err == nil {
			_ = conn.Close()
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return ctrd.failure(fmt.Sprintf("did not serve on %s (%v)", n.files.socket, err))
		}
		select {
		case <-ctrd.exited: // crashed, or stopped because the start failed elsewhere
			return ctrd.failure(fmt.Sprintf("exited (%v)", ctrd.waitErr))
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, img := range []struct{ ref, name string }{{PauseImage, "pause"}, {ToolboxImage, "toolbox"}} {
		archive := filepath.Join(n.dir, "images", img.name+".tar")
		entrypoint := []string{"/" + podBinary}
		if img.name == "pause" {
			entrypoint = append(entrypoint, "pause")
		}
		if err := writeImageArchive(archive, img.ref, binary, entrypoint); err != nil {
			return fmt.Errorf("testbed: building %s: %w", img.ref, err)
		}
		if err := importInto(ctx, n.files.socket, archive); err != nil {
			return err
		}
	}
	return nil
}

// ImportImage imports an image archive into the containerd of every real node, where the kubelet finds
// it by the names it carries: an OCI image layout tar (names from the annotation
// io.containerd.image.name of index.json) or a `docker save` tar, as `ctr images import` reads
// them. Pods using it need an imagePullPolicy other than Always (no registry has it), and their
// image name must match the imported one exactly. Tests of what users do push to Cluster.Registry
// instead, so the node pulls.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	if len(c.containerdSockets) == 0 {
		return errors.New("testbed: ImportImage: this test bed runs no real node (testbed.Options{Node: true})")
	}
	for _, socket := range c.containerdSockets {
		if err := importInto(ctx, socket, archive); err != nil {
			return err
		}
	}
	return nil
}

// importInto imports an image archive into the containerd listening on socket.
func importInto(ctx context.Context, socket, archive string) error {
	cmd := exec.CommandContext(ctx, "ctr", "--address", socket, "--namespace", "k8s.io",
		"images", "import", archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("testbed: importing %s into the node's containerd: %w: %s", archive, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RemoveImage removes an image from every real node's containerd (`ctr images rm`), so the next
// Pod that names it pulls it again: a test of a pull that an earlier Pod on the node made
// unnecessary. Containers running from it keep running. An image the node does not have is no
// error.
func (c *Cluster) RemoveImage(ctx context.Context, ref string) error {
	if len(c.containerdSockets) == 0 {
		return errors.New("testbed: RemoveImage: this test bed runs no real node (testbed.Options{Node: true})")
	}
	for _, socket := range c.containerdSockets {
		cmd := exec.CommandContext(ctx, "ctr", "--address", socket, "--namespace", "k8s.io", "images", "rm", ref)
		if out, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(out), "not found") {
			return fmt.Errorf("testbed: removing %s from the node's containerd: %w: %s", ref, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
