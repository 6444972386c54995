package releasetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// PreviousCommitVar names the line of scripts/versions.env that pins the build the upgrade tests
// start from: a commit of main, until the first release tag exists.
const PreviousCommitVar = "PREVIOUS_COMMIT"

// Previous is the build of the pinned previous commit: its binaries, its images and its chart,
// each carrying Version. Upgrade tests install it, put work in flight, and upgrade to the tree
// under test, the way a user moves from one release to the next.
type Previous struct {
	Commit string
	// Version is stamped into every binary, the images' tags and the chart's version and
	// appVersion: 0.0.0-previous-<7 hex digits>, so it never collides with the build under test.
	Version string
	// Dir holds bin/, images/, chart/ and quickstart/.
	Dir string
}

// previousLayout names what a cached previous build holds; raised when that changes, so an
// older cache entry is built again.
const previousLayout = "2"

// Bin is the path of one of the previous build's binaries: terraform-provider-outpost,
// outpost-orchestrator or outpost-agent.
func (p Previous) Bin(name string) string { return filepath.Join(p.Dir, "bin", name) }

// ImagesDir holds the previous build's image archives (linux/amd64) and their images.json.
func (p Previous) ImagesDir() string { return filepath.Join(p.Dir, "images") }

// ChartDir is the previous build's agent chart, a chart directory with Version set.
func (p Previous) ChartDir() string { return filepath.Join(p.Dir, "chart") }

// QuickstartDir is the previous build's examples/quickstart, the configuration its provider
// applies (a user upgrading changes the provider version and then their configuration).
func (p Previous) QuickstartDir() string { return filepath.Join(p.Dir, "quickstart") }

// ReadPreviousCommit reads PreviousCommitVar from the repository's scripts/versions.env.
func ReadPreviousCommit(repo string) (string, error) {
	f, err := os.Open(filepath.Join(repo, "scripts", "versions.env"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), PreviousCommitVar+"="); ok {
			if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(v) {
				return "", fmt.Errorf("scripts/versions.env: %s=%q is not a full commit hash", PreviousCommitVar, v)
			}
			return v, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("scripts/versions.env has no %s line", PreviousCommitVar)
}

// BuildPrevious returns the previous build, building it from the repository's git history the
// first time: the commit's tree is exported (git archive, so no worktree is left behind), its
// provider, orchestrator and agent built with the version stamped as a release build stamps it,
// its images built with its own image builder for linux/amd64, and its chart copied with the
// version set, and its examples/quickstart kept. The result is kept in
// cacheDir/previous/<commit>-<layout> (about 150 MB); later calls
// return it at once. logf reports the steps of a build.
func BuildPrevious(ctx context.Context, repo, cacheDir string, logf func(string, ...any)) (Previous, error) {
	commit, err := ReadPreviousCommit(repo)
	if err != nil {
		return Previous{}, err
	}
	p := Previous{Commit: commit, Version: "0.0.0-previous-" + commit[:7], Dir: filepath.Join(cacheDir, "previous", commit+"-"+previousLayout)}
	if _, err := os.Stat(filepath.Join(p.Dir, "done")); err == nil {
		return p, nil
	}
	if err := exec.CommandContext(ctx, "git", "-C", repo, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		return Previous{}, fmt.Errorf("the previous build's commit %s (%s in scripts/versions.env) is not in this clone's history; "+
			"a shallow clone lacks it: git fetch --unshallow (CI checks out with fetch-depth: 0): %w", commit[:12], PreviousCommitVar, err)
	}
	start := time.Now()
	logf("previous build: building %s (%s) from the repository's history, once (cached in %s)", p.Version, commit[:12], p.Dir)
	if err := os.MkdirAll(filepath.Dir(p.Dir), 0o755); err != nil {
		return Previous{}, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(p.Dir), "building-")
	if err != nil {
		return Previous{}, err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return Previous{}, err
	}
	archive := filepath.Join(tmp, "src.tar")
	if err := run(ctx, repo, nil, "git", "archive", "--format=tar", "-o", archive, commit); err != nil {
		return Previous{}, err
	}
	if err := run(ctx, src, nil, "tar", "-xf", archive); err != nil {
		return Previous{}, err
	}
	// The environment of a release build: static, -trimpath (so unchanged packages come out of
	// the build cache), the version stamped.
	env := []string{"CGO_ENABLED=0", "GOFLAGS=-trimpath -buildvcs=false"}
	ldflags := fmt.Sprintf("-s -w -X github.com/outpost-dev/terraform-provider-outpost/internal/version.Version=%s "+
		"-X github.com/outpost-dev/terraform-provider-outpost/internal/version.Commit=%s", p.Version, commit)
	bin := filepath.Join(tmp, "bin")
	for name, pkg := range map[string]string{"terraform-provider-outpost": ".", "outpost-orchestrator": "./cmd/outpost-orchestrator", "outpost-agent": "./agent"} {
		if err := run(ctx, src, env, "go", "build", "-ldflags", ldflags, "-o", filepath.Join(bin, name), pkg); err != nil {
			return Previous{}, err
		}
	}
	logf("previous build: binaries built after %s", time.Since(start).Round(time.Second))
	tofu, err := versionsEnv(src, "TOFU_VERSION")
	if err != nil {
		return Previous{}, err
	}
	// The image builder moved into the tools module (tools/); a build from before that has it in cmd/.
	images := "./tools/cmd/outpost-images"
	if _, err := os.Stat(filepath.Join(src, "tools", "cmd", "outpost-images")); err != nil {
		images = "./cmd/outpost-images"
	}
	if err := run(ctx, src, env, "go", "run", images, "--out", filepath.Join(tmp, "images"), "--version", p.Version,
		"--platforms", "linux/amd64", "--tofu-version", tofu); err != nil {
		return Previous{}, err
	}
	logf("previous build: images built after %s", time.Since(start).Round(time.Second))
	if err := copyChart(filepath.Join(src, "agent", "chart"), filepath.Join(tmp, "chart"), p.Version); err != nil {
		return Previous{}, err
	}
	if err := os.Rename(filepath.Join(src, "examples", "quickstart"), filepath.Join(tmp, "quickstart")); err != nil {
		return Previous{}, err
	}
	if err := os.RemoveAll(src); err != nil {
		return Previous{}, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "done"), []byte(p.Version+"\n"), 0o644); err != nil {
		return Previous{}, err
	}
	if err := os.Rename(tmp, p.Dir); err != nil {
		// Another test package built it meanwhile: use that one.
		if _, serr := os.Stat(filepath.Join(p.Dir, "done")); serr == nil {
			return p, nil
		}
		return Previous{}, err
	}
	logf("previous build: %s built in %s", p.Version, time.Since(start).Round(time.Second))
	return p, nil
}

// copyChart copies the chart's files (not its Go tests and embedding code) and sets its version
// and appVersion.
func copyChart(from, to, version string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel == "Chart.yaml" {
			b = regexp.MustCompile(`(?m)^version:.*$`).ReplaceAll(b, []byte("version: "+version))
			b = regexp.MustCompile(`(?m)^appVersion:.*$`).ReplaceAll(b, []byte(`appVersion: "`+version+`"`))
		}
		return os.WriteFile(dst, b, 0o644)
	})
}

// versionsEnv reads one variable of a tree's scripts/versions.env.
func versionsEnv(root, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "scripts", "versions.env"))
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+"="); ok {
			return v, nil
		}
	}
	return "", errors.New("scripts/versions.env has no " + name)
}

// run runs a command in dir with env added to this process's environment; its output goes into
// the error when it fails.
func run(ctx context.Context, dir string, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s (in %s): %w\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return nil
}

var (
	previousOnce  sync.Once
	previousBuild Previous
	previousErr   error
)

// PreviousForTest is BuildPrevious for tests, once per test binary: repo is the repository's
// root, the cache the user's ($OUTPOST_CACHE, else <user cache dir>/outpost, as the Makefile's).
func PreviousForTest(t testing.TB, repo string) Previous {
	t.Helper()
	previousOnce.Do(func() {
		cache := os.Getenv("OUTPOST_CACHE")
		if cache == "" {
			dir, err := os.UserCacheDir()
			if err != nil {
				previousErr = err
				return
			}
			cache = filepath.Join(dir, "outpost")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		previousBuild, previousErr = BuildPrevious(ctx, repo, cache, t.Logf)
	})
	if previousErr != nil {
		t.Fatal(previousErr)
	}
	return previousBuild
}
