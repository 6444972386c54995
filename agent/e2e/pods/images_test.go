package pods

import (
	"archive/tar"
	"bufio"
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

	v1 "github.com/google/go-containerregistry/pkg/v1"
	helmchart "helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/internal/image"
	"github.com/outpost-dev/terraform-provider-outpost/internal/image/recipe"
	"github.com/outpost-dev/terraform-provider-outpost/internal/release"
	"github.com/outpost-dev/terraform-provider-outpost/internal/release/releasetest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

const registry = "ghcr.io/outpost-dev"

// The images the chart deploys by default: the product's, tagged with the chart's appVersion.
// With $OUTPOST_RELEASE_DIST (make test sets it) they are the release build's images, tagged
// with its version, and the chart is the one the release packaged (loadChart).
var (
	imagesVersion = agentchart.AppVersion
	agentImage    = registry + "/" + recipe.AgentName + ":" + agentchart.AppVersion
	jobImage      = registry + "/" + recipe.JobName + ":" + agentchart.AppVersion
	// dist is the release build the images and the chart come from; empty: built here, embedded.
	dist releasetest.Dist
)

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
	// terraformImage is "outpost.test/terraform:<version>": the job image's Debian layers (git, a
	// shell, CA certificates) plus this machine's terraform, and nothing of Outpost.
	terraformImage string
)

// images builds the agent, job and terraform images once per test binary and imports them into
// the real node once; a test needing them calls it first. It skips (fails under CI=true) when the
// machine runs no real node.
func images(t *testing.T, c *testbed.Cluster) {
	t.Helper()
	testbed.RequireNode(t, c)
	imagesOnce.Do(func() { imagesErr = buildAndImport(t, c) })
	if imagesErr != nil {
		t.Fatal(imagesErr)
	}
}

func buildAndImport(t *testing.T, c *testbed.Cluster) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if dir := os.Getenv(releasetest.DistEnv); dir != "" {
		return importRelease(ctx, t, c, dir)
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
	out := t.TempDir() // once imported into the node, the archives are not needed any more

	start := time.Now()
	built, err := recipe.Build(ctx, recipe.Options{
		ModuleRoot: root, Registry: registry, Version: agentchart.AppVersion, Revision: facts.Revision,
		Created: facts.Created, Licenses: facts.Licenses, TofuVersion: tofuVersion, Platforms: []image.Platform{platform},
		CacheDir: recipe.CacheDir(os.Getenv), OutDir: out, Log: testLog{t},
	})
	if err != nil {
		return fmt.Errorf("building the images: %w", err)
	}
	buildTook := time.Since(start)
	archives := make([]string, 0, 3)
	var job recipe.Built
	for _, b := range built {
		archives = append(archives, b.Archive)
		if b.Name == recipe.JobName {
			job = b
		}
	}
	start = time.Now()
	tfArchive, ref, err := writeTerraformImage(ctx, job.Index(), platform, out)
	if err != nil {
		return fmt.Errorf("building the terraform test image: %w", err)
	}
	terraformImage = ref
	tfTook := time.Since(start)
	start = time.Now()
	for _, a := range append(archives, tfArchive) {
		if err := c.ImportImage(ctx, a); err != nil {
			return err
		}
	}
	t.Logf("images: outpost-agent and outpost-job (%s) built in %s, %s in %s, all three imported into the node in %s",
		platform, buildTook.Round(100*time.Millisecond), ref, tfTook.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	return nil
}

// importRelease imports the images of the release build in dir (make snapshot) into the node, as
// they are, with the terraform test image made from its job image, and makes the tests deploy
// them through the chart the release packaged.
func importRelease(ctx context.Context, t *testing.T, c *testbed.Cluster, dir string) error {
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
	start := time.Now()
	var archives []string
	var jobArchive string
	for _, b := range built {
		if want := registry + "/" + b.Name + ":" + d.Version; b.Ref != want {
			return fmt.Errorf("%s names %s, want %s: the images are not the release build's", recipe.SummaryName, b.Ref, want)
		}
		archives = append(archives, b.Archive)
		if b.Name == recipe.JobName {
			jobArchive = b.Archive
		}
		t.Logf("images: %s %s from %s", b.Ref, b.Digest, b.Archive)
	}
	if len(archives) != 2 || jobArchive == "" {
		return fmt.Errorf("%s lists %d images, want %s and %s", recipe.SummaryName, len(archives), recipe.AgentName, recipe.JobName)
	}
	job, err := release.OpenOCIArchive(jobArchive)
	if err != nil {
		return err
	}
	defer job.Close()
	tfArchive, ref, err := writeTerraformImage(ctx, job.Index, platform, t.TempDir())
	if err != nil {
		return fmt.Errorf("building the terraform test image: %w", err)
	}
	for _, a := range append(archives, tfArchive) {
		if err := c.ImportImage(ctx, a); err != nil {
			return err
		}
	}
	dist, terraformImage, imagesVersion = d, ref, d.Version
	agentImage = registry + "/" + recipe.AgentName + ":" + d.Version
	jobImage = registry + "/" + recipe.JobName + ":" + d.Version
	t.Logf("images: the release build's outpost-agent and outpost-job %s and %s imported into the node in %s", d.Version, ref,
		time.Since(start).Round(100*time.Millisecond))
	return nil
}

// writeTerraformImage writes the "terraform" test image: the job image's lower layers (Debian
// base and packages, not OpenTofu) plus hostTerraform, run as the same user with the same
// environment. It checks that no layer holds an Outpost binary: the job runner must come from
// the agent image.
func writeTerraformImage(ctx context.Context, job v1.ImageIndex, platform image.Platform, dir string) (archive, ref string, err error) {
	var jobImg v1.Image
	m, err := job.IndexManifest()
	if err != nil {
		return "", "", err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Architecture == platform.Architecture {
			if jobImg, err = job.Image(d.Digest); err != nil {
				return "", "", err
			}
		}
	}
	if jobImg == nil {
		return "", "", fmt.Errorf("the job image has no %s image", platform)
	}
	layers, err := jobImg.Layers()
	if err != nil {
		return "", "", err
	}
	cf, err := jobImg.ConfigFile()
	if err != nil {
		return "", "", err
	}
	if len(layers) != 3 {
		return "", "", fmt.Errorf("the job image has %d layers, want 3 (base, Debian packages, OpenTofu)", len(layers))
	}
	version, err := terraformVersion(ctx)
	if err != nil {
		return "", "", err
	}
	files := image.NewFiles()
	if err := files.AddHostFile("/usr/local/bin/terraform", 0o755, hostTerraform); err != nil {
		return "", "", err
	}
	tf, err := files.Layer()
	if err != nil {
		return "", "", err
	}
	img, err := image.NewImage(platform, cf.Created.Time, image.Config{
		User: cf.Config.User, Entrypoint: []string{"/usr/local/bin/terraform"}, Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir,
	}, nil, []image.Layer{
		{Layer: layers[0], CreatedBy: cf.History[0].CreatedBy},
		{Layer: layers[1], CreatedBy: cf.History[1].CreatedBy},
		{Layer: tf, CreatedBy: "Terraform " + version + " from " + hostTerraform + " (a test image)"},
	})
	if err != nil {
		return "", "", err
	}
	if err := noOutpostBinary(img); err != nil {
		return "", "", err
	}
	idx, err := image.NewIndex([]v1.Image{img}, nil)
	if err != nil {
		return "", "", err
	}
	ref = "outpost.test/terraform:" + version
	archive = filepath.Join(dir, "terraform.oci.tar")
	f, err := os.Create(archive)
	if err != nil {
		return "", "", err
	}
	w := bufio.NewWriter(f)
	if err := image.WriteArchive(w, image.Named{Ref: ref, Index: idx}); err != nil {
		f.Close()
		return "", "", err
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		return "", "", err
	}
	return archive, ref, nil
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
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
