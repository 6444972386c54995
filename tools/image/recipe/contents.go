package recipe

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/outpost-dev/terraform-provider-outpost/tools/image"
	"github.com/outpost-dev/terraform-provider-outpost/tools/image/debian"
)

// What the images hold, and why. The agent image is the agent binary on a static base; the job
// image is OpenTofu and git on the same base, with the shared libraries git needs.

const (
	// UID and GID of the user both images run as: not root, and the same number the chart's
	// securityContext names, so the image and the pod agree.
	UID = 65532
	GID = 65532
	// Home is HOME and TMPDIR: the only writable place under a read-only root file system is
	// the emptyDir the chart mounts at /tmp.
	Home = "/tmp"
	// Source is the project's repository, for the org.opencontainers.image.source label.
	Source = "https://github.com/outpost-dev/terraform-provider-outpost"

	agentPath = "/usr/local/bin/outpost-agent"
	tofuPath  = "/usr/local/bin/tofu"
	envPath   = "PATH=/usr/local/bin:/usr/bin:/bin"
)

// basePackages are the Debian packages of the base layer both images share: the CA
// certificates (the bundle is made from them), /etc/services and /etc/protocols (netbase), and
// /etc/os-release (base-files), by which scanners know the distribution whose security
// advisories apply to the packages in /var/lib/dpkg/status.d.
var basePackages = []string{"base-files", "ca-certificates", "netbase"}

// jobPackages are what the job image adds: git, which Terraform and OpenTofu run for git::
// module sources and the job runner runs for git sources; dash as /bin/sh, which git runs for
// local and ssh transports and hooks, and OpenTofu for local-exec provisioners; and coreutils and
// sed, which git's shell-script commands need (OpenTofu runs `git submodule update` after every
// clone, and in git 2.39 that is a script calling sed, basename and uname). Debian packages
// declare no dependency on these, because they are Essential there: every Debian system has them.
var jobPackages = []string{"git", "dash", "coreutils", "sed"}

// excluded are dependencies the images leave out, each with the reason. Debian declares them
// because maintainer scripts or rarely used commands need them; no maintainer script runs here,
// and the tests run git clone, git --version and tofu version in the image without them.
var excluded = map[string]string{
	"perl":          "git's Perl commands (send-email, svn, cvs, instaweb) only; clone, fetch and checkout are C",
	"liberror-perl": "git's Perl commands only",
	"git-man":       "manual pages",
	"openssl":       "update-ca-certificates (a maintainer script) only; the CA bundle is made by the build",
	"debconf":       "maintainer scripts only",
	"debconf-2.0":   "maintainer scripts only",
	"debianutils":   "dash's maintainer scripts only (add-shell)",
	"dpkg":          "dash's maintainer scripts only; there is no package manager in the images",
	"awk":           "base-files' maintainer scripts only",
}

func baseRequest(arch string) debian.Request {
	return debian.Request{Archive: debian.Bookworm, Arch: arch, Packages: basePackages, Exclude: excluded}
}

func jobRequest(arch string) debian.Request {
	return debian.Request{Archive: debian.Bookworm, Arch: arch, Packages: append(append([]string{}, jobPackages...), basePackages...), Exclude: excluded}
}

// accountFiles are the user and group databases: root, and the non-root user the images run as,
// whose home is the writable /tmp. nsswitch.conf makes name lookups read /etc/hosts (which the
// kubelet writes) before DNS, as on a Debian system.
func accountFiles(f *image.Files) error {
	files := map[string]string{
		"etc/passwd":        fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:%s:/sbin/nologin\n", UID, GID, Home),
		"etc/group":         fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", GID),
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
	}
	for p, content := range files {
		if err := f.AddFile(p, 0o644, []byte(content)); err != nil {
			return err
		}
	}
	return nil
}

// packageList is "name version" of each package, for history lines and the build summary.
func packageList(set *debian.Set, skip map[string]bool) []string {
	var out []string
	for _, p := range set.Packages {
		if !skip[p.Name] {
			out = append(out, p.Name+" "+p.Version)
		}
	}
	return out
}

func userSpec() string { return fmt.Sprintf("%d:%d", UID, GID) }

func agentConfig(labels map[string]string) image.Config {
	return image.Config{
		User:       userSpec(),
		Entrypoint: []string{agentPath},
		Env:        []string{envPath, "HOME=" + Home, "SSL_CERT_FILE=/" + debian.CABundle},
		Labels:     labels,
	}
}

func jobConfig(labels map[string]string) image.Config {
	return image.Config{
		User:       userSpec(),
		Entrypoint: []string{tofuPath},
		Env:        []string{envPath, "HOME=" + Home, "TMPDIR=" + Home, "SSL_CERT_FILE=/" + debian.CABundle},
		WorkingDir: Home,
		Labels:     labels,
	}
}

func historyLine(prefix string, items []string) string {
	return prefix + strings.Join(items, ", ")
}

// debianFiles are the Debian layers of one architecture.
type debianFiles struct {
	// base is the base layer of both images: base packages, CA bundle, accounts.
	base *image.Files
	// job is the job image's packages that are not in the base.
	job *image.Files
	// certs is how many certificates the bundle holds.
	certs int
	// basePkgs, jobPkgs and jobOnlyPkgs are "name version" lists: the base, all of the job
	// image, and the job image above the base.
	basePkgs, jobPkgs, jobOnlyPkgs []string
}

// debianLayers fetches (or takes from the cache) the Debian packages of both images for arch
// and lays out their files.
func debianLayers(ctx context.Context, cacheDir, arch string, refresh bool, log io.Writer) (*debianFiles, error) {
	cacheDir = filepath.Join(cacheDir, "images")
	baseSet, err := debian.Fetch(ctx, cacheDir, baseRequest(arch), refresh, log)
	if err != nil {
		return nil, err
	}
	jobSet, err := debian.Fetch(ctx, cacheDir, jobRequest(arch), refresh, log)
	if err != nil {
		return nil, err
	}
	d := &debianFiles{base: image.NewFiles(), job: image.NewFiles()}
	if err := debian.AddTo(ctx, d.base, baseSet); err != nil {
		return nil, err
	}
	if d.certs, err = debian.AddCABundle(d.base); err != nil {
		return nil, err
	}
	if err := accountFiles(d.base); err != nil {
		return nil, err
	}
	inBase := map[string]bool{}
	for _, n := range baseSet.Names() {
		inBase[n] = true
	}
	var jobOnly []string
	for _, n := range jobSet.Names() {
		if !inBase[n] {
			jobOnly = append(jobOnly, n)
		}
	}
	// The job image must use the very versions of the base packages the base layer holds.
	for _, p := range jobSet.Packages {
		if inBase[p.Name] && !slices.Contains(packageList(baseSet, nil), p.Name+" "+p.Version) {
			return nil, fmt.Errorf("debian %s: %s %s in the job set differs from the base set's; rebuild with --refresh-debian", arch, p.Name, p.Version)
		}
	}
	if err := debian.AddTo(ctx, d.job, jobSet, jobOnly...); err != nil {
		return nil, err
	}
	d.basePkgs, d.jobPkgs, d.jobOnlyPkgs = packageList(baseSet, nil), packageList(jobSet, nil), packageList(jobSet, inBase)
	return d, nil
}
