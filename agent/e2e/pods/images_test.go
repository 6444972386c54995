package pods

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	helmchart "helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/internal/release/releasetest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
	"github.com/outpost-dev/terraform-provider-outpost/tools/image"
	"github.com/outpost-dev/terraform-provider-outpost/tools/image/recipe"
	"github.com/outpost-dev/terraform-provider-outpost/tools/ocitest"
	"github.com/outpost-dev/terraform-provider-outpost/tools/release"
)

// The images the chart deploys by default are the product's, named under ghcr.io/outpost-dev and
// tagged with the chart's appVersion. The tests push them into the test bed's registry under the
// same path ("<registry>/outpost-dev/outpost-agent:<version>"), and every env mirrors them into a
// path of its own there and installs the chart with global.imageRegistry pointing at it (mirror):
// the node pulls each image with the env's pull secrets, as a cluster pulls from a private mirror.
// With $OUTPOST_RELEASE_DIST (make test sets it) they are the release build's images, tagged
// with its version, and the chart is the one the release packaged (loadChart).
var (
	imagesVersion = agentchart.AppVersion
	// dist is the release build the images and the chart come from; empty: built here, embedded.
	dist releasetest.Dist
	// pushed are the images in the test bed's registry, as paths under its host (repository:tag).
	pushed struct{ agent, job, terraform, toolbox string }
)

// namespace is the registry namespace of the product's images (ghcr.io/outpost-dev/…), which the
// chart's global.imageRegistry replaces the registry host of.
const namespace = "outpost-dev"

// loadChart is the chart the tests install: the release build's package, else the embedded one.
func loadChart() (*helmchart.Chart, error) {
	if dist.Dir != "" {
		return loader.Load(dist.Chart())
	}
	return agentchart.Load()
}

// hostTerraform is the Terraform release binary the "terraform" test image is made with.
const hostTerraform = "/usr/local/bin/terraform"

var (
	imagesOnce sync.Once
	imagesErr  error
)

// images builds the agent, job and terraform images once per test binary and pushes them into
// the test bed's registry once; a test needing them calls it first. It skips (fails under
// CI=true) when the machine runs no real node. Nothing is imported into the node: its containerd
// has only the test bed's pause and toolbox images until a pod pulls.
func images(t testing.TB, c *testbed.Cluster) {
	t.Helper()
	testbed.RequireNode(t, c)
	imagesOnce.Do(func() { imagesErr = buildAndPush(t, c) })
	if imagesErr != nil {
		t.Fatal(imagesErr)
	}
}

func buildAndPush(t testing.TB, c *testbed.Cluster) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if dir := os.Getenv(releasetest.DistEnv); dir != "" {
		return pushRelease(ctx, t, c, dir)
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return err
	}
	tofuVersion, err := recipe.VersionsEnv(root, "TOFU_VERSION")
	if err != nil {
		return err
	}
	facts, err := recipe.DescribeSource(ctx, root, os.Getenv)
	if err != nil {
		return err
	}
	platform, err := image.ParsePlatform("linux/" + runtime.GOARCH)
	if err != nil {
		return err
	}
	start := time.Now()
	built, err := recipe.Build(ctx, recipe.Options{
		ModuleRoot: root, Registry: "ghcr.io/" + namespace, Version: agentchart.AppVersion, Revision: facts.Revision,
		Created: facts.Created, Licenses: facts.Licenses, TofuVersion: tofuVersion, Platforms: []image.Platform{platform},
		CacheDir: recipe.CacheDir(os.Getenv), OutDir: t.TempDir(), Log: testLog{t},
	})
	if err != nil {
		return fmt.Errorf("building the images: %w", err)
	}
	buildTook := time.Since(start)
	indexes := map[string]v1.ImageIndex{}
	for _, b := range built {
		indexes[b.Name] = b.Index()
	}
	return pushAll(ctx, t, c, indexes, agentchart.AppVersion, platform, fmt.Sprintf("built (%s) in %s", platform, buildTook.Round(100*time.Millisecond)))
}

// pushRelease pushes the images of the release build in dir (make snapshot) into the registry,
// as they are, with the terraform test image made from its job image, and makes the tests deploy
// them through the chart the release packaged.
func pushRelease(ctx context.Context, t testing.TB, c *testbed.Cluster, dir string) error {
	d, err := releasetest.OpenDist(dir)
	if err != nil {
		return err
	}
	built, err := release.ReadSummary(d.ImagesDir())
	if err != nil {
		return err
	}
	platform, err := image.ParsePlatform("linux/" + runtime.GOARCH)
	if err != nil {
		return err
	}
	indexes := map[string]v1.ImageIndex{}
	for _, b := range built {
		if want := "ghcr.io/" + namespace + "/" + b.Name + ":" + d.Version; b.Ref != want {
			return fmt.Errorf("%s names %s, want %s: the images are not the release build's", recipe.SummaryName, b.Ref, want)
		}
		a, err := release.OpenOCIArchive(b.Archive)
		if err != nil {
			return err
		}
		defer a.Close()
		indexes[b.Name] = a.Index
		t.Logf("images: %s %s from %s", b.Ref, b.Digest, b.Archive)
	}
	if len(indexes) != 2 || indexes[recipe.AgentName] == nil || indexes[recipe.JobName] == nil {
		return fmt.Errorf("%s lists %d images, want %s and %s", recipe.SummaryName, len(built), recipe.AgentName, recipe.JobName)
	}
	dist, imagesVersion = d, d.Version
	return pushAll(ctx, t, c, indexes, d.Version, platform, "of the release build "+d.Version)
}

// pushAll pushes the agent and job images (indexes by name) under namespace with the given
// version, the terraform test image made from the job image, and the test bed's toolbox image,
// into the registry, and records where (pushed).
func pushAll(ctx context.Context, t testing.TB, c *testbed.Cluster, indexes map[string]v1.ImageIndex, version string, platform image.Platform, what string) error {
	start := time.Now()
	tf, tfVersion, err := terraformImage(ctx, indexes[recipe.JobName], platform)
	if err != nil {
		return fmt.Errorf("building the terraform test image: %w", err)
	}
	tfTook := time.Since(start)
	opts, err := ocitest.RemoteOptions(ctx, c.Registry)
	if err != nil {
		return err
	}
	start = time.Now()
	for _, p := range []struct {
		path string
		idx  v1.ImageIndex
		to   *string
	}{
		{namespace + "/" + recipe.AgentName + ":" + version, indexes[recipe.AgentName], &pushed.agent},
		{namespace + "/" + recipe.JobName + ":" + version, indexes[recipe.JobName], &pushed.job},
		{"outpost-test/terraform:" + tfVersion, tf, &pushed.terraform},
	} {
		ref, err := name.NewTag(c.Registry.Host+"/"+p.path, name.StrictValidation)
		if err != nil {
			return err
		}
		if err := remote.WriteIndex(ref, p.idx, opts...); err != nil {
			return fmt.Errorf("pushing %s to the test bed's registry: %w", ref, err)
		}
		*p.to = p.path
	}
	pushed.toolbox = "outpost-test/toolbox:1"
	if _, err := c.PushToolbox(ctx, pushed.toolbox); err != nil {
		return err
	}
	t.Logf("images: outpost-agent and outpost-job %s, Terraform %s made in %s, all pushed to the test bed's registry %s in %s",
		what, tfVersion, tfTook.Round(100*time.Millisecond), c.Registry.Host, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// terraformImage is the "terraform" test image: the job image's lower layers (Debian base and
// packages, not OpenTofu) plus hostTerraform, run as the same user with the same environment, as
// an index of one platform, and its Terraform version. It checks that no layer holds an Outpost
// binary: the job runner must come from the agent image.
func terraformImage(ctx context.Context, job v1.ImageIndex, platform image.Platform) (v1.ImageIndex, string, error) {
	var jobImg v1.Image
	m, err := job.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Architecture == platform.Architecture {
			if jobImg, err = job.Image(d.Digest); err != nil {
				return nil, "", err
			}
		}
	}
	if jobImg == nil {
		return nil, "", fmt.Errorf("the job image has no %s image", platform)
	}
	layers, err := jobImg.Layers()
	if err != nil {
		return nil, "", err
	}
	cf, err := jobImg.ConfigFile()
	if err != nil {
		return nil, "", err
	}
	if len(layers) != 3 {
		return nil, "", fmt.Errorf("the job image has %d layers, want 3 (base, Debian packages, OpenTofu)", len(layers))
	}
	version, err := terraformVersion(ctx)
	if err != nil {
		return nil, "", err
	}
	files := image.NewFiles()
	if err := files.AddHostFile("/usr/local/bin/terraform", 0o755, hostTerraform); err != nil {
		return nil, "", err
	}
	tf, err := files.Layer()
	if err != nil {
		return nil, "", err
	}
	img, err := image.NewImage(platform, cf.Created.Time, image.Config{
		User: cf.Config.User, Entrypoint: []string{"/usr/local/bin/terraform"}, Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir,
	}, nil, []image.Layer{
		{Layer: layers[0], CreatedBy: cf.History[0].CreatedBy},
		{Layer: layers[1], CreatedBy: cf.History[1].CreatedBy},
		{Layer: tf, CreatedBy: "Terraform " + version + " from " + hostTerraform + " (a test image)"},
	})
	if err != nil {
		return nil, "", err
	}
	if err := noOutpostBinary(img); err != nil {
		return nil, "", err
	}
	idx, err := image.NewIndex([]v1.Image{img}, nil)
	if err != nil {
		return nil, "", err
	}
	return idx, version, nil
}

// noOutpostBinary fails when any layer of img holds a file named like an Outpost binary.
func noOutpostBinary(img v1.Image) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return err
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rc.Close()
				return err
			}
			if strings.HasPrefix(path.Base(h.Name), "outpost") {
				rc.Close()
				return fmt.Errorf("the terraform test image holds %s; it must hold no Outpost binary", h.Name)
			}
		}
		rc.Close()
	}
	return nil
}

func terraformVersion(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, hostTerraform, "version", "-json")
	cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s version: %w (Terraform is expected there, see scripts/versions.env)", hostTerraform, err)
	}
	var v struct {
		Version string `json:"terraform_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Version == "" {
		return "", fmt.Errorf("%s version -json: %q", hostTerraform, out)
	}
	return v.Version, nil
}

// testLog sends the image build's progress to the test log.
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
