package jobrun

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// gitTimeout bounds the whole checkout, so an unreachable server fails the attempt with a clear
// error instead of hanging until its timeout.
const gitTimeout = 10 * time.Minute

var hexCommit = regexp.MustCompile(`^[0-9a-fA-F]{7,64}$`)

// gitSecrets returns the credentials embedded in a git URL, to be redacted from the log. With
// https://user:token@host both are returned (user names can be tokens too, as in
// https://<token>@github.com); URLs without userinfo have none.
func gitSecrets(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil
	}
	var out []string
	if p, ok := u.User.Password(); ok {
		out = append(out, p, url.QueryEscape(p), url.PathEscape(p))
	}
	if name := u.User.Username(); name != "" {
		out = append(out, name)
	}
	return out
}

// displayGitURL hides the userinfo of http(s) URLs entirely ("https://***@host/repo"): a token
// may sit in the user name as well as in the password.
func displayGitURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Unparsed, the credentials may hold '@' themselves ("https://tok@en:pa@ss@host"): hide
		// everything up to the last '@' (found by FuzzGitURL; an '@' in the path hides more).
		if s := strings.Index(raw, "://"); s >= 0 {
			if i := strings.LastIndex(raw, "@"); i > s {
				return raw[:s+3] + "***" + raw[i:]
			}
		}
		return raw
	}
	if u.User != nil && u.Scheme != "ssh" && u.Scheme != "" {
		u.User = nil
		s := u.String()
		return strings.Replace(s, "://", "://***@", 1)
	}
	if _, hasPassword := u.User.Password(); u.User != nil && hasPassword {
		u.User = url.User(u.User.Username()) // an ssh user name is no secret, a password is
		return u.String()
	}
	return raw
}

// checkoutGit fetches src.Ref (a branch, tag or commit; empty means the remote's HEAD) of
// src.URL into dir with the git binary and checks it out, returning the commit.
//
// A shallow fetch of just the ref keeps large repositories cheap. Servers that refuse to fetch
// an unadvertised commit by id get a full fetch instead, which also resolves short ids. No
// remote is configured, so the URL (and any credentials in it) is not kept in .git/config, and
// FETCH_HEAD, which records the URL, is removed afterwards. env is added to git's environment.
func checkoutGit(ctx context.Context, src *api.GitSource, dir string, env []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	secrets := gitSecrets(src.URL)
	shown := displayGitURL(src.URL)
	run := func(args ...string) (string, error) {
		return runGit(ctx, dir, env, secrets, args...)
	}
	if _, err := run("init", "-q", "."); err != nil {
		return "", err
	}
	ref := src.Ref
	if ref == "" {
		ref = "HEAD"
	}
	if strings.HasPrefix(ref, "-") {
		return "", fmt.Errorf("git ref %q must not start with '-'", ref)
	}
	_, err := run("fetch", "-q", "--depth=1", "--no-tags", "--", src.URL, ref)
	target := "FETCH_HEAD"
	if err != nil {
		if !hexCommit.MatchString(ref) {
			return "", fmt.Errorf("fetch ref %q of %s: %w", ref, shown, err)
		}
		// A commit id the server will not serve directly: fetch everything and look it up.
		if _, err2 := run("fetch", "-q", "--no-tags", "--", src.URL, "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"); err2 != nil {
			return "", fmt.Errorf("fetch %s: %w", shown, err2)
		}
		target = ref + "^{commit}"
	}
	if _, err := run("-c", "advice.detachedHead=false", "checkout", "-q", "--detach", target, "--"); err != nil {
		return "", fmt.Errorf("check out %q of %s: %w", ref, shown, err)
	}
	commit, err := run("rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	_ = os.Remove(filepath.Join(dir, ".git", "FETCH_HEAD"))
	return strings.TrimSpace(commit), nil
}

// runGit runs git in dir without any prompt, with env added to its environment. Errors carry
// git's own message, redacted.
func runGit(ctx context.Context, dir string, env, secrets []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...),
		"GIT_TERMINAL_PROMPT=0", // fail instead of waiting for a password nobody will type
		"GIT_ASKPASS=",
		"SSH_ASKPASS=",
	)
	if os.Getenv("GIT_SSH_COMMAND") == "" {
		cmd.Env = append(cmd.Env, "GIT_SSH_COMMAND=ssh -o BatchMode=yes")
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.String(), nil
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("git %s: %w", args[0], ctx.Err())
	}
	msg := strings.TrimSpace(stderr.String())
	if msg == "" {
		msg = err.Error()
	}
	var red bytes.Buffer
	r := newRedactor(&red, secrets...)
	_, _ = r.Write([]byte(msg))
	_ = r.Flush()
	return "", fmt.Errorf("git %s failed: %s", args[0], red.String())
}
