package debian

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// apt runs apt-get and apt-cache against a private apt state under dir: its own sources, its
// own (empty) dpkg status and its own architecture, so nothing of the host's apt configuration
// or installed packages leaks in, and the host's state is never touched.
type apt struct {
	dir  string
	conf string
}

// tools are the host programs a cold fetch needs.
var tools = []string{"apt-get", "apt-cache", "dpkg-deb"}

func checkTools(keyring string) error {
	var missing []string
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s not found: the Debian part of the images is resolved and downloaded with apt, "+
			"so it builds on a Debian or Ubuntu machine (or run the build in a debian:bookworm container)", strings.Join(missing, ", "))
	}
	if _, err := os.Stat(keyring); err != nil {
		return fmt.Errorf("the Debian archive keyring %s is missing (%w): install it with `apt-get install debian-archive-keyring`", keyring, err)
	}
	return nil
}

func newApt(dir string, a Archive, arch string) (*apt, error) {
	for _, d := range []string{"etc/apt/apt.conf.d", "etc/apt/preferences.d", "etc/apt/sources.list.d",
		"var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/lib/dpkg", "var/log/apt"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	var sources strings.Builder
	for _, s := range a.Sources {
		fmt.Fprintf(&sources, "deb [signed-by=%s] %s\n", a.Keyring, s)
	}
	conf := filepath.Join(dir, "apt.conf")
	files := map[string]string{
		"etc/apt/sources.list": sources.String(),
		"var/lib/dpkg/status":  "",
		"apt.conf": fmt.Sprintf(`Dir "%s/";
Dir::State::status "%s/var/lib/dpkg/status";
APT::Architecture "%s";
APT::Architectures { "%s"; };
APT::Sandbox::User "root";
APT::Install-Recommends "false";
Acquire::Languages "none";
Acquire::Retries "3";
`, dir, dir, arch, arch),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	return &apt{dir: dir, conf: conf}, nil
}

// run runs an apt command in workDir (the private root when empty) and returns its standard
// output; a failure carries what the command printed.
func (a *apt) run(ctx context.Context, workDir string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = workDir
	if cmd.Dir == "" {
		cmd.Dir = a.dir
	}
	cmd.Env = append(os.Environ(), "APT_CONFIG="+a.conf, "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String() + "\n" + stdout.String())
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("%s %s failed (%w):\n%s", name, strings.Join(args, " "), err, msg)
		}
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return stdout.String(), nil
}

func (a *apt) update(ctx context.Context, where string) error {
	if _, err := a.run(ctx, "", "apt-get", "-q", "update", "-o", "APT::Update::Error-Mode=any"); err != nil {
		return fmt.Errorf("reading the Debian package indexes failed; is %s reachable? %w", where, err)
	}
	return nil
}

func (a *apt) depends(ctx context.Context, names []string) (map[string][]group, error) {
	args := append([]string{"depends", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks",
		"--no-replaces", "--no-enhances"}, names...)
	out, err := a.run(ctx, "", "apt-cache", args...)
	if err != nil {
		return nil, err
	}
	return parseDepends(out)
}

// download fetches the candidate version of each package into dir; apt checks every file
// against the hashes of the signed archive index.
func (a *apt) download(ctx context.Context, dir string, names []string) error {
	_, err := a.run(ctx, dir, "apt-get", append([]string{"-q", "download"}, names...)...)
	return err
}
