package recipe

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// goEnv is the environment of every Go build of the images: static, for the target platform,
// with the baseline instruction set (GOAMD64=v1, GOARM64=v8.0, whatever the host prefers), and
// flags from the build's own command line only (GOFLAGS from the host's go env is overridden).
// GOWORK=off: the agent builds from the root go.mod alone, as the release's binaries do, never
// from versions the tools' module raised in the workspace.
func goEnv(goarch string, goflags string) []string {
	return append(os.Environ(),
		"CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOAMD64=v1", "GOARM64=v8.0",
		"GOFLAGS="+goflags, "GOTOOLCHAIN=local", "GOWORK=off")
}

// goVersion returns the Go release that builds the binaries ("go1.26.8"); binaries and gzip
// output are only reproducible for the same release.
func goVersion(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w (is Go installed?)", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func runGo(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// VersionPackage is where Outpost's binaries keep their release version (internal/version), for -ldflags -X.
const VersionPackage = "github.com/outpost-dev/terraform-provider-outpost/internal/version"

// buildAgent builds outpost-agent for goarch from the module at root into dir, with the image's
// version stamped into internal/version (what `outpost-agent version` prints and the agent
// reports to the orchestrator). VCS stamping is off: Go stamps a clone but not a git worktree or
// a source tarball, so with it the same sources would give different binaries depending on how
// they were checked out. The commit is not stamped either (the labels carry it), so a commit
// that does not touch the agent leaves its layer, and what nodes pull, unchanged.
func buildAgent(ctx context.Context, root, version, goarch, dir string, log io.Writer) (string, error) {
	start := time.Now()
	fmt.Fprintf(log, "images: building outpost-agent %s for linux/%s...\n", version, goarch)
	out := filepath.Join(dir, "outpost-agent-"+goarch)
	if err := runGo(ctx, root, goEnv(goarch, "-mod=readonly"),
		"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -X "+VersionPackage+".Version="+version, "-o", out, "./agent"); err != nil {
		return "", err
	}
	if err := checkBinary(out, "github.com/outpost-dev/terraform-provider-outpost/agent", goarch); err != nil {
		return "", err
	}
	fmt.Fprintf(log, "images: built outpost-agent for linux/%s in %s\n", goarch, time.Since(start).Round(time.Second))
	return out, nil
}

// buildTofu returns OpenTofu's tofu for goarch, built from its module in the Go module cache with
// the flags of OpenTofu's own release build, and cached under cacheDir by version, architecture
// and Go release.
func buildTofu(ctx context.Context, cacheDir, version, goarch string, log io.Writer) (string, error) {
	gov, err := goVersion(ctx)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cacheDir, "images", "tofu", fmt.Sprintf("%s-linux-%s-%s", version, goarch, gov))
	bin := filepath.Join(dir, "tofu")
	if err := checkBinary(bin, "github.com/opentofu/opentofu/cmd/tofu", goarch); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if reuseToolsTofu(ctx, cacheDir, version, goarch, gov, bin) {
		fmt.Fprintf(log, "images: took OpenTofu %s for linux/%s from scripts/tools.sh's build (the same flags, Go %s)\n", version, goarch, gov)
		return bin, nil
	}
	start := time.Now()
	fmt.Fprintf(log, "images: building OpenTofu %s for linux/%s from source (about 3-5 min on 2 cores, cached afterwards)...\n", version, goarch)
	modDir, err := downloadModule(ctx, dir, "github.com/opentofu/opentofu@"+version)
	if err != nil {
		return "", err
	}
	tmp := bin + ".tmp"
	// version.dev=no makes it report "1.10.6", not "1.10.6-dev" (a prerelease satisfies no
	// required_version constraint).
	if err := runGo(ctx, modDir, goEnv(goarch, "-mod=readonly -trimpath -buildvcs=false"), "build",
		"-ldflags=-s -w -X 'github.com/opentofu/opentofu/version.dev=no'", "-o", tmp, "./cmd/tofu"); err != nil {
		return "", err
	}
	if err := checkBinary(tmp, "github.com/opentofu/opentofu/cmd/tofu", goarch); err != nil {
		return "", err
	}
	if goarch == runtime.GOARCH {
		out, err := exec.CommandContext(ctx, tmp, "version").Output()
		if err != nil {
			return "", fmt.Errorf("running the OpenTofu built: %w", err)
		}
		if want := "OpenTofu " + version; !strings.HasPrefix(string(out), want+"\n") {
			return "", fmt.Errorf("the OpenTofu built reports %q, want %q", firstLine(out), want)
		}
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	fmt.Fprintf(log, "images: built OpenTofu %s for linux/%s in %s\n", version, goarch, time.Since(start).Round(time.Second))
	return bin, nil
}

// reuseToolsTofu puts the tofu that scripts/tools.sh built for the tests (<cache>/tools/tofu-<version>)
// at bin when it is what buildTofu would build: the same version, for this machine's
// architecture, with the same Go release and the flags of the release build (static, -trimpath,
// the baseline instruction set). Built that way, the two binaries are byte for byte the same (seen
// with Go 1.26.8 and OpenTofu v1.10.6), so reusing it saves a cold build of 3-5 minutes and
// changes no digest.
func reuseToolsTofu(ctx context.Context, cacheDir, version, goarch, gov, bin string) bool {
	src := filepath.Join(cacheDir, "tools", "tofu-"+version, "tofu")
	if goarch != runtime.GOARCH || checkBinary(src, "github.com/opentofu/opentofu/cmd/tofu", goarch) != nil {
		return false
	}
	bi, err := buildinfo.ReadFile(src)
	if err != nil || bi.GoVersion != gov {
		return false
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["-trimpath"] != "true" || (goarch == "amd64" && settings["GOAMD64"] != "v1") || (goarch == "arm64" && settings["GOARM64"] != "v8.0") {
		return false
	}
	if out, err := exec.CommandContext(ctx, src, "version").Output(); err != nil || !strings.HasPrefix(string(out), "OpenTofu "+version+"\n") {
		return false
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return false
	}
	tmp := bin + ".tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return false
	}
	return os.Rename(tmp, bin) == nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}

// downloadModule puts a module into the module cache and returns its directory. It runs outside
// any main module (in dir), so no go.mod of ours is consulted or changed.
func downloadModule(ctx context.Context, dir, mod string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	_ = json.Unmarshal(out, &m)
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			m.Error += " " + strings.TrimSpace(string(ee.Stderr))
		}
		return "", fmt.Errorf("go mod download %s: %w: %s", mod, err, m.Error)
	}
	if m.Dir == "" {
		return "", fmt.Errorf("go mod download %s gave no directory: %s", mod, m.Error)
	}
	return m.Dir, nil
}

// checkBinary checks that a Go binary exists and was built from pkg for linux/goarch without cgo.
func checkBinary(p, pkg, goarch string) error {
	bi, err := buildinfo.ReadFile(p)
	if err != nil {
		return err
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if bi.Path != pkg || settings["GOOS"] != "linux" || settings["GOARCH"] != goarch || settings["CGO_ENABLED"] != "0" {
		return fmt.Errorf("%s is %s for %s/%s with CGO_ENABLED=%s; want %s for linux/%s with CGO_ENABLED=0",
			p, bi.Path, settings["GOOS"], settings["GOARCH"], settings["CGO_ENABLED"], pkg, goarch)
	}
	return nil
}
