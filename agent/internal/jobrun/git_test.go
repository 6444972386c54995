package jobrun

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// gitRepo builds a repository with two commits on main (tag v1 on the first), a feature branch
// and a symlink pointing out of the repository. It returns the file:// URL and the commits.
func gitRepo(t *testing.T) (url string, first, second, feature string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	g := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g("init", "-q")
	write("stacks/app/main.tf", "# v1\n")
	if err := os.Symlink("/etc", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	g("add", "-A")
	g("commit", "-q", "-m", "one")
	g("tag", "v1")
	first = g("rev-parse", "HEAD")
	write("stacks/app/main.tf", "# v2\n")
	g("commit", "-q", "-am", "two")
	second = g("rev-parse", "HEAD")
	g("checkout", "-q", "-b", "feature")
	write("stacks/app/main.tf", "# feature\n")
	g("commit", "-q", "-am", "three")
	feature = g("rev-parse", "HEAD")
	g("checkout", "-q", "main")
	return "file://" + dir, first, second, feature
}

func TestLayoutSourceFromGit(t *testing.T) {
	url, first, second, feature := gitRepo(t)
	for _, tc := range []struct {
		ref, commit, content string
	}{
		{"", second, "# v2\n"},
		{"main", second, "# v2\n"},
		{"feature", feature, "# feature\n"},
		{"v1", first, "# v1\n"},
		{first, first, "# v1\n"},
		{first[:10], first, "# v1\n"}, // short ids need the full fetch
	} {
		t.Run("ref="+tc.ref, func(t *testing.T) {
			dir := t.TempDir()
			var log bytes.Buffer
			configDir, err := layoutSource(context.Background(), api.Source{Git: &api.GitSource{URL: url, Ref: tc.ref, Path: "stacks/app"}}, dir, nil, &log)
			if err != nil {
				t.Fatalf("%v\n%s", err, log.String())
			}
			if configDir != filepath.Join(dir, "stacks", "app") {
				t.Fatalf("config dir %s", configDir)
			}
			if b, _ := os.ReadFile(filepath.Join(configDir, "main.tf")); string(b) != tc.content {
				t.Fatalf("main.tf = %q, want %q", b, tc.content)
			}
			if !strings.Contains(log.String(), "checked out commit "+tc.commit) {
				t.Fatalf("log does not name the commit %s:\n%s", tc.commit, log.String())
			}
			if _, err := os.Stat(filepath.Join(dir, ".git", "FETCH_HEAD")); !os.IsNotExist(err) {
				t.Fatalf("FETCH_HEAD (which records the URL) should be removed: %v", err)
			}
		})
	}
}

func TestLayoutSourceFromGitErrors(t *testing.T) {
	url, _, _, _ := gitRepo(t)
	for name, tc := range map[string]struct {
		src  api.GitSource
		want string
	}{
		"missing ref":        {api.GitSource{URL: url, Ref: "no-such-branch"}, `fetch ref "no-such-branch"`},
		"missing path":       {api.GitSource{URL: url, Path: "stacks/nope"}, `"stacks/nope" is not a directory`},
		"path through link":  {api.GitSource{URL: url, Path: "escape"}, "resolves outside"},
		"option-looking ref": {api.GitSource{URL: url, Ref: "--upload-pack=touch /tmp/x"}, "must not start with '-'"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := layoutSource(context.Background(), api.Source{Git: &tc.src}, t.TempDir(), nil, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestGitCredentialsNeverShown(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	const raw = "https://deploy-bot:s3cr3t-pa55word@127.0.0.1:1/org/repo.git"
	if got := displayGitURL(raw); got != "https://***@127.0.0.1:1/org/repo.git" {
		t.Fatalf("displayGitURL = %q", got)
	}
	if got := displayGitURL("git@github.com:org/repo.git"); got != "git@github.com:org/repo.git" {
		t.Fatalf("scp-like URL changed: %q", got)
	}
	secrets := gitSecrets(raw)
	if len(secrets) == 0 || secrets[0] != "s3cr3t-pa55word" {
		t.Fatalf("gitSecrets = %v", secrets)
	}
	var log bytes.Buffer
	_, err := layoutSource(context.Background(), api.Source{Git: &api.GitSource{URL: raw, Ref: "main"}}, t.TempDir(), nil, &log)
	if err == nil {
		t.Fatal("fetch from a closed port succeeded")
	}
	for _, s := range []string{"s3cr3t-pa55word", "deploy-bot"} {
		if strings.Contains(err.Error(), s) || strings.Contains(log.String(), s) {
			t.Fatalf("credential %q shown: %v\n%s", s, err, log.String())
		}
	}
}
