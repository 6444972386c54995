// Command outpost-images builds Outpost's container images without a container daemon or
// registry: outpost-agent and outpost-job, for linux/amd64 and linux/arm64, as OCI archives
// (dist/images/<name>_<version>.oci.tar) plus images.json with their digests and sizes. Building
// twice from the same tree gives the same digests.
//
//	go run ./tools/cmd/outpost-images [--out dist/images] [--version 0.1.0] [--platforms linux/amd64,linux/arm64]
//
// Import an archive into a node's containerd under its name:
//
//	ctr -n k8s.io images import --all-platforms dist/images/outpost-agent_0.1.0.oci.tar
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/tools/image"
	"github.com/outpost-dev/terraform-provider-outpost/tools/image/recipe"
)

// DefaultTofuVersion is the OpenTofu release of the job image; the GNUmakefile passes its
// TOFU_VERSION, so the tests and the image run the same OpenTofu.
const DefaultTofuVersion = "v1.10.6"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "outpost-images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("outpost-images", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "dist/images", "directory the archives and images.json are written to")
	version := fs.String("version", agentchart.AppVersion, "image tag and version label (default: the chart's appVersion, the tag the chart deploys)")
	registry := fs.String("registry", "ghcr.io/outpost-dev", "registry and namespace of the image names")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated platforms of each image index")
	tofu := fs.String("tofu-version", DefaultTofuVersion, "OpenTofu release in the job image")
	cache := fs.String("cache", recipe.CacheDir(getenv), "cache of Debian packages and OpenTofu builds")
	refresh := fs.Bool("refresh-debian", false, "resolve and download the Debian packages again (picks up security updates; changes digests)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o := recipe.Options{
		Registry: *registry, Version: strings.TrimSpace(*version), TofuVersion: "v" + strings.TrimPrefix(*tofu, "v"),
		CacheDir: *cache, RefreshDebian: *refresh, Log: stderr,
	}
	for p := range strings.SplitSeq(*platforms, ",") {
		pl, err := image.ParsePlatform(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		o.Platforms = append(o.Platforms, pl)
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	o.ModuleRoot = root
	if o.OutDir, err = filepath.Abs(*out); err != nil {
		return err
	}
	facts, err := recipe.DescribeSource(ctx, root, getenv)
	if err != nil {
		return err
	}
	for _, w := range facts.Warnings {
		fmt.Fprintln(stderr, "images: warning:", w)
	}
	o.Revision, o.Created, o.Licenses = facts.Revision, facts.Created, facts.Licenses

	built, err := recipe.Build(ctx, o)
	if err != nil {
		return err
	}
	for _, b := range built {
		fmt.Fprintf(stdout, "%s\n  index    %s\n  archive  %s (%s)\n", b.Ref, b.Digest, b.Archive, mib(b.ArchiveSize))
		for _, p := range b.Platforms {
			fmt.Fprintf(stdout, "  %-15s %s  %s to pull\n", p.Platform, p.Digest, mib(p.Size))
		}
	}
	fmt.Fprintf(stdout, "summary: %s\nimport into a node's containerd: ctr -n k8s.io images import --all-platforms <archive>\n",
		filepath.Join(o.OutDir, recipe.SummaryName))
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// rootModule is Outpost's root module, the product.
const rootModule = "github.com/outpost-dev/terraform-provider-outpost"

// moduleRoot is the directory of Outpost's root module (the product), found from the working
// directory: the repository's root, or tools/, whose go.mod replaces the root module with "../".
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", rootModule).Output()
	if err != nil {
		return "", fmt.Errorf("run outpost-images inside the Outpost source tree (go list -m %s: %w)", rootModule, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("run outpost-images inside the Outpost source tree (go list -m %s found no directory)", rootModule)
	}
	return dir, nil
}
