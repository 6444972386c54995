package jobrun

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/sourcearchive"
)

// layoutSource puts the deployment's source into srcDir (which must exist and be empty) and returns
// the configuration directory: srcDir itself for an inline archive (the archive's root is the
// configuration's root), srcDir/<path> for git. It logs one line saying what it laid out. env is
// added to git's environment (the trusted CA bundle).
func layoutSource(ctx context.Context, src api.Source, srcDir string, env []string, log io.Writer) (string, error) {
	configDir := srcDir
	switch {
	case src.Inline != nil:
		st, err := sourcearchive.Extract(src.Inline.ArchiveTarGz, srcDir, sourcearchive.DefaultLimits)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(log, "==> source: inline archive, %s, %s, %s, %s\n",
			count(st.Files, "file", "files"), count(st.Dirs, "directory", "directories"), count(st.Symlinks, "symlink", "symlinks"), humanBytes(st.Bytes))
	case src.Git != nil:
		g := src.Git
		fmt.Fprintf(log, "==> source: git %s, ref %s, path %s\n", displayGitURL(g.URL), orDefault(g.Ref, "(default branch)"), orDefault(g.Path, "/"))
		commit, err := checkoutGit(ctx, g, srcDir, env)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(log, "checked out commit %s\n", commit)
		if g.Path != "" {
			configDir = filepath.Join(srcDir, filepath.FromSlash(strings.Trim(g.Path, "/")))
			fi, err := os.Stat(configDir)
			if err != nil || !fi.IsDir() {
				return "", fmt.Errorf("source.git.path %q is not a directory in commit %s", g.Path, commit)
			}
			// A repository may hold a symlink out of the checkout; the CLI must not be run
			// somewhere else on the machine.
			if err := sourcearchive.ResolvesInside(srcDir, configDir); err != nil {
				return "", fmt.Errorf("source.git.path %q: %w", g.Path, err)
			}
		}
	default:
		return "", fmt.Errorf("source has neither inline nor git")
	}
	if !hasConfigFiles(configDir) {
		fmt.Fprintf(log, "warning: the configuration directory holds no .tf or .tf.json files; the archive's root (or the git path) must be the configuration's root\n")
	}
	return configDir, nil
}

func hasConfigFiles(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		n := e.Name()
		if (strings.HasSuffix(n, ".tf") || strings.HasSuffix(n, ".tf.json")) && !strings.HasPrefix(n, "outpost_") {
			return true
		}
	}
	return false
}

// parseOutputs reads `<cli> output -json`, keeping each output's sensitive flag and type as
// the CLI reports them.
func parseOutputs(data []byte) (api.Outputs, error) {
	out := api.Outputs{}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("read `output -json`: %w", err)
	}
	for name, o := range out {
		if len(o.Value) == 0 {
			return nil, fmt.Errorf("read `output -json`: output %q has no value", name)
		}
	}
	return out, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// count says n things with the noun in the number n takes: "1 file", "0 files", "2 files".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
