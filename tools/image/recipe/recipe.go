// Package recipe builds Outpost's container images: outpost-agent (the agent and job runner
// binary on a static base) and outpost-job (OpenTofu and git, the default image of job pods),
// for linux/amd64 and linux/arm64, as OCI archives that containerd imports under their names.
// The archives are reproducible: the same sources, Debian packages and Go release give the same
// digests. See IMAGES.md at the repository root.
package recipe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/outpost-dev/terraform-provider-outpost/tools/image"
)

// Image names, as in the chart's default repositories.
const (
	AgentName = "outpost-agent"
	JobName   = "outpost-job"
)

// Options say what to build and where.
type Options struct {
	// ModuleRoot is the Outpost source tree the agent is built from.
	ModuleRoot string
	// Registry is prefixed to the image names ("ghcr.io/outpost-dev").
	Registry string
	// Version is the images' tag and org.opencontainers.image.version.
	Version string
	// Revision is the commit, for org.opencontainers.image.revision (omitted when empty).
	Revision string
	// Created is the images' creation time (SOURCE_DATE_EPOCH or the commit time, never the clock,
	// or the digests would change with every build).
	Created time.Time
	// Licenses is Outpost's licence as an SPDX expression, for the agent image's label.
	Licenses string
	// TofuVersion is the OpenTofu release in the job image ("v1.10.6").
	TofuVersion string
	// Platforms to build; each image is an index of all of them.
	Platforms []image.Platform
	// CacheDir is the Outpost cache (~/.cache/outpost); the Debian packages and OpenTofu builds
	// go under its images/ directory.
	CacheDir string
	// OutDir receives the archives.
	OutDir string
	// RefreshDebian resolves and downloads the Debian packages again, for security updates.
	RefreshDebian bool
	// Log receives progress.
	Log io.Writer
}

func (o *Options) check() error {
	var problems []string
	if o.CacheDir == "" {
		problems = append(problems, "no cache directory: set OUTPOST_CACHE (or HOME) to a directory of your own; "+
			"a shared temporary directory is not used, since anyone could change the packages in it")
	}
	if o.ModuleRoot == "" || o.Registry == "" || o.Version == "" || o.OutDir == "" || o.TofuVersion == "" {
		problems = append(problems, "module root, registry, version, tofu version and output directory are all needed")
	}
	if len(o.Platforms) == 0 {
		problems = append(problems, "no platform to build")
	}
	for _, p := range o.Platforms {
		if p.OS != "linux" || (p.Architecture != "amd64" && p.Architecture != "arm64") {
			problems = append(problems, fmt.Sprintf("platform %s is not supported (linux/amd64 and linux/arm64 are)", p))
		}
	}
	for _, n := range []string{AgentName, JobName} {
		if _, err := name.NewTag(o.Ref(n), name.StrictValidation); err != nil {
			problems = append(problems, fmt.Sprintf("%s is not a valid image reference (%v): check --registry and --version", o.Ref(n), err))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

// PlatformImage is one platform's image of a built index.
type PlatformImage struct {
	Platform string `json:"platform"`
	Digest   string `json:"digest"`
	// Size is what a node downloads: manifest, config and compressed layers.
	Size int64 `json:"size"`
	// Packages are the Debian packages in the image, "name version".
	Packages []string `json:"debianPackages"`
}

// Built is one image index written to an archive.
type Built struct {
	Name        string          `json:"name"`
	Ref         string          `json:"ref"`
	Digest      string          `json:"digest"`
	Archive     string          `json:"archive"`
	ArchiveSize int64           `json:"archiveSize"`
	Platforms   []PlatformImage `json:"platforms"`
	index       v1.ImageIndex
}

// CacheDir is the Outpost cache as the GNUmakefile and scripts/tools.sh find it: $OUTPOST_CACHE,
// else $XDG_CACHE_HOME/outpost, else ~/.cache/outpost; without a home directory it is empty (and
// Build says to set OUTPOST_CACHE): a shared temporary directory is never used, since the
// packages and builds in it end up in the images and anyone could change them there.
func CacheDir(getenv func(string) string) string {
	if c := getenv("OUTPOST_CACHE"); c != "" {
		return c
	}
	if c := getenv("XDG_CACHE_HOME"); c != "" {
		return filepath.Join(c, "outpost")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".cache", "outpost")
}

// Ref is registry/name:version.
func (o *Options) Ref(name string) string {
	return strings.TrimSuffix(o.Registry, "/") + "/" + name + ":" + o.Version
}

// ArchiveName is the file an image's archive is written to: name_version.oci.tar.
func ArchiveName(name, version string) string { return name + "_" + version + ".oci.tar" }

// platformImages are one platform's two images.
type platformImages struct {
	agent, job       v1.Image
	agentPkgs, jobPk []string
}

// Build builds both images for every platform and writes their archives to OutDir.
func Build(ctx context.Context, o Options) ([]Built, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	start := time.Now()
	work, err := os.MkdirTemp("", "outpost-images-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(work) }()
	var agents, jobs []v1.Image
	var perPlatform []platformImages
	for _, p := range o.Platforms {
		pi, err := buildPlatform(ctx, &o, p, work)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		agents, jobs = append(agents, pi.agent), append(jobs, pi.job)
		perPlatform = append(perPlatform, pi)
	}
	var built []Built
	for _, spec := range []struct {
		name   string
		images []v1.Image
		pkgs   func(platformImages) []string
		desc   string
	}{
		{AgentName, agents, func(pi platformImages) []string { return pi.agentPkgs }, agentDescription},
		{JobName, jobs, func(pi platformImages) []string { return pi.jobPk }, jobDescription(o.TofuVersion)},
	} {
		idx, err := image.NewIndex(spec.images, o.labels(spec.name, spec.desc))
		if err != nil {
			return nil, err
		}
		b := Built{Name: spec.name, Ref: o.Ref(spec.name), index: idx}
		for i, img := range spec.images {
			d, _ := img.Digest()
			size, err := image.Size(img)
			if err != nil {
				return nil, err
			}
			b.Platforms = append(b.Platforms, PlatformImage{Platform: o.Platforms[i].String(), Digest: d.String(), Size: size, Packages: spec.pkgs(perPlatform[i])})
		}
		d, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		b.Digest = d.String()
		built = append(built, b)
	}
	if err := writeArchives(o, built); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "images: done in %s\n", time.Since(start).Round(time.Second))
	return built, nil
}

const agentDescription = "Outpost agent: runs Terraform/OpenTofu deployments from the Outpost orchestrator as Kubernetes Jobs; also the job runner (outpost-agent job)."

func jobDescription(tofu string) string {
	return "Default image of Outpost job pods: OpenTofu " + tofu + " (MPL-2.0), git, a shell with coreutils and sed, and CA certificates, " +
		"from Debian bookworm packages (their licences in /usr/share/doc/*/copyright)."
}

// labels are the OCI annotations of both images, also set as config labels.
func (o *Options) labels(name, description string) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       name,
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
	if o.Revision != "" {
		l["org.opencontainers.image.revision"] = o.Revision
	}
	// Only the agent image holds Outpost's own code; the job image holds OpenTofu and Debian
	// packages under their many licences, which one expression here would misstate.
	if name == AgentName && o.Licenses != "" {
		l["org.opencontainers.image.licenses"] = o.Licenses
	}
	return l
}

func buildPlatform(ctx context.Context, o *Options, p image.Platform, work string) (platformImages, error) {
	arch := p.Architecture
	deb, err := debianLayers(ctx, o.CacheDir, arch, o.RefreshDebian, o.Log)
	if err != nil {
		return platformImages{}, err
	}
	base := deb.base

	// The agent.
	agentBin, err := buildAgent(ctx, o.ModuleRoot, o.Version, arch, work, o.Log)
	if err != nil {
		return platformImages{}, err
	}
	agentFiles := image.NewFiles()
	if err := agentFiles.AddHostFile(agentPath, 0o755, agentBin); err != nil {
		return platformImages{}, err
	}
	if err := image.CheckLinks(arch, base, agentFiles); err != nil {
		return platformImages{}, err
	}

	// OpenTofu, above the job image's Debian packages.
	tofuBin, err := buildTofu(ctx, o.CacheDir, o.TofuVersion, arch, o.Log)
	if err != nil {
		return platformImages{}, err
	}
	tofuFiles := image.NewFiles()
	if err := tofuFiles.AddHostFile(tofuPath, 0o755, tofuBin); err != nil {
		return platformImages{}, err
	}
	if err := image.CheckLinks(arch, base, deb.job, tofuFiles); err != nil {
		return platformImages{}, err
	}

	fmt.Fprintf(o.Log, "images: writing layers for %s...\n", p)
	gov, err := goVersion(ctx)
	if err != nil {
		return platformImages{}, err
	}
	layers := map[string]image.Layer{}
	for name, l := range map[string]struct {
		files     *image.Files
		createdBy string
	}{
		"base":   {base, historyLine(fmt.Sprintf("Debian bookworm (%d CA certificates, user %d): ", deb.certs, UID), deb.basePkgs)},
		"agent":  {agentFiles, fmt.Sprintf("outpost-agent %s (%s, CGO_ENABLED=0, -trimpath) at %s", o.Version, gov, agentPath)},
		"jobdeb": {deb.job, historyLine("Debian bookworm: ", deb.jobOnlyPkgs)},
		"tofu": {tofuFiles, fmt.Sprintf("OpenTofu %s (MPL-2.0) from github.com/opentofu/opentofu@%s (%s, CGO_ENABLED=0, -trimpath) at %s",
			o.TofuVersion, o.TofuVersion, gov, tofuPath)},
	} {
		layer, err := l.files.Layer()
		if err != nil {
			return platformImages{}, fmt.Errorf("layer %s: %w", name, err)
		}
		layers[name] = image.Layer{Layer: layer, CreatedBy: l.createdBy}
	}
	agentLabels := o.labels(AgentName, agentDescription)
	agent, err := image.NewImage(p, o.Created, agentConfig(agentLabels), agentLabels, []image.Layer{layers["base"], layers["agent"]})
	if err != nil {
		return platformImages{}, err
	}
	jobLabels := o.labels(JobName, jobDescription(o.TofuVersion))
	job, err := image.NewImage(p, o.Created, jobConfig(jobLabels), jobLabels, []image.Layer{layers["base"], layers["jobdeb"], layers["tofu"]})
	if err != nil {
		return platformImages{}, err
	}
	return platformImages{agent: agent, job: job, agentPkgs: deb.basePkgs, jobPk: deb.jobPkgs}, nil
}

// Index returns the image index of a built image.
func (b Built) Index() v1.ImageIndex { return b.index }

func writeArchives(o Options, built []Built) error {
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return err
	}
	for i := range built {
		b := &built[i]
		b.Archive = filepath.Join(o.OutDir, ArchiveName(b.Name, o.Version))
		fmt.Fprintf(o.Log, "images: writing %s...\n", b.Archive)
		size, err := writeFileAtomic(b.Archive, func(w io.Writer) error {
			return image.WriteArchive(w, image.Named{Ref: b.Ref, Index: b.index})
		})
		if err != nil {
			return fmt.Errorf("%s: %w", b.Archive, err)
		}
		b.ArchiveSize = size
	}
	return writeSummary(o.OutDir, built)
}
