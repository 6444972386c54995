// Package releasetest reads what a build of .goreleaser.yml left in its dist directory, for the
// tests that install those artifacts as users would (tools/release, agent/e2e/pods), and builds
// the previous release for the upgrade tests. It stays in the root module, apart from the release
// itself (tools/release), because the product's own tests use it (agent/e2e,
// cmd/outpost-orchestrator) and it needs nothing beyond the standard library.
package releasetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// DistEnv names the dist directory of a snapshot or release build (`make snapshot` writes dist/;
// `make test` builds one and sets it), whose artifacts the release tests and the end-to-end tests
// on real pods install instead of building their own.
const DistEnv = "OUTPOST_RELEASE_DIST"

// HelmEnv names the helm CLI the tests run as users would (scripts/tools.sh helm builds it;
// `make test` sets it).
const HelmEnv = "OUTPOST_HELM"

// HelmCommand is the helm CLI at path with args, set up as a new user's: its home and Helm's
// directories under home, the cluster of kubeconfig, and nothing else of the environment but PATH.
func HelmCommand(ctx context.Context, path, home, kubeconfig string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "KUBECONFIG=" + kubeconfig,
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"), "HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data")}
	return cmd
}

// Dist is what a build of .goreleaser.yml left in its dist directory: goreleaser's output in
// release/, the images in images/ and the chart in chart/.
type Dist struct {
	Dir string
	// Version is the version every artifact carries (goreleaser's metadata.json).
	Version string
}

// OpenDist reads the version of the build in dir from release/metadata.json.
func OpenDist(dir string) (Dist, error) {
	p := filepath.Join(dir, "release", "metadata.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return Dist{}, fmt.Errorf("%w: %s holds no goreleaser build; run make snapshot", err, dir)
	}
	var meta struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return Dist{}, fmt.Errorf("%s: %w", p, err)
	}
	if meta.Version == "" {
		return Dist{}, errors.New(p + " names no version")
	}
	return Dist{Dir: dir, Version: meta.Version}, nil
}

// ReleaseFile is the path of a file goreleaser wrote.
func (d Dist) ReleaseFile(name string) string { return filepath.Join(d.Dir, "release", name) }

// ProviderZip is the registry archive of the provider for goos/goarch.
func (d Dist) ProviderZip(goos, goarch string) string {
	return d.ReleaseFile(fmt.Sprintf("terraform-provider-outpost_%s_%s_%s.zip", d.Version, goos, goarch))
}

// Chart is the packaged agent chart.
func (d Dist) Chart() string { return filepath.Join(d.Dir, "chart", "outpost-agent-"+d.Version+".tgz") }

// ImagesDir holds the image archives and their images.json (ReadSummary).
func (d Dist) ImagesDir() string { return filepath.Join(d.Dir, "images") }
