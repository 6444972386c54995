package testbed

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
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

// writeImageArchive writes a single-layer OCI image holding the file binary as /testbed-pod, with
// the given entrypoint, as an OCI image layout tar archive (what `ctr images import` reads) at
// path. The image is named ref through the annotation containerd's importer uses, so it needs no
// --base-name. Both built-in images share their one layer, so the node stores it once.
func writeImageArchive(path, ref, binary string, entrypoint []string) error {
	img, err := podImage(binary, entrypoint)
	if err != nil {
		return fmt.Errorf("building %s: %w", ref, err)
	}
	dir := path + ".layout"
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	err = p.AppendImage(img,
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}),
		layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          ref,
			"org.opencontainers.image.ref.name": tag,
		}))
	if err != nil {
		return fmt.Errorf("writing the OCI layout of %s: %w", ref, err)
	}
	return tarDir(dir, path)
}

// podImage is a single-layer OCI image holding the file binary as /testbed-pod, with the given
// entrypoint, for this machine's architecture.
func podImage(binary string, entrypoint []string) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return fileLayer(binary, podBinary) },
		tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("building the layer: %w", err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = entrypoint
	cfg.Config.Env = []string{"PATH=/"}
	return mutate.ConfigFile(img, cfg)
}

// fileLayer returns a layer tar holding the file at src as /name, mode 0755, with a fixed
// modification time so the same binary always makes the same image.
func fileLayer(src, name string) (io.ReadCloser, error) {
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
	return io.NopCloser(&buf), nil
}

// tarDir writes the files under dir, with paths relative to it, as a tar archive at dst.
func tarDir(dir, dst string) (err error) {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
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
