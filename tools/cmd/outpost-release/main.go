// Command outpost-release is the part of Outpost's release that goreleaser (.goreleaser.yml)
// cannot do by itself, without a container daemon or syft:
//
//	outpost-release sbom --version V --out DOC ARCHIVE       SPDX bill of materials of a release archive
//	outpost-release image-sboms --version V --images DIR     one per platform image of DIR/images.json
//	outpost-release chart --version V --out DIR              the agent chart packaged with version V
//	outpost-release push-images --images DIR [--registry R]  the image archives to an OCI registry
//	outpost-release push-chart --repo oci://R/charts TGZ     the packaged chart to an OCI registry
//	outpost-release snapshot-config --targets linux_amd64    .goreleaser.yml cut down to some targets
//	outpost-release sign --images F --sboms D --chart TGZ --checksums F [-- COSIGN FLAGS]
//	                                                         cosign: the images, their SBOMs, the
//	                                                         chart, a bundle of the checksums
//
// Registry credentials come from OUTPOST_REGISTRY_USERNAME and OUTPOST_REGISTRY_PASSWORD, else
// from the Docker configuration (~/.docker/config.json), where `docker login` writes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/tools/release"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "outpost-release:", err)
		os.Exit(1)
	}
}

const usage = `usage: outpost-release COMMAND [flags]

commands: sbom, image-sboms, chart, push-images, push-chart, snapshot-config, sign
(outpost-release COMMAND -h shows a command's flags)`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("outpost-release "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cred := release.Credentials{Username: getenv("OUTPOST_REGISTRY_USERNAME"), Password: getenv("OUTPOST_REGISTRY_PASSWORD")}
	switch cmd {
	case "sbom":
		version := fs.String("version", "", "release version (the version of Outpost's programs in the archive)")
		out := fs.String("out", "", "file the SPDX JSON document is written to")
		if err := parse(fs, args, 1); err != nil {
			return err
		}
		if *version == "" || *out == "" {
			return errors.New("sbom needs --version and --out")
		}
		created, err := createdTime(getenv)
		if err != nil {
			return err
		}
		return writeFile(*out, func(w io.Writer) error { return release.ArchiveSBOM(fs.Arg(0), *version, created, w) })
	case "image-sboms":
		version := fs.String("version", "", "release version (the version of Outpost's programs in the images)")
		dir := fs.String("images", "dist/images", "directory of images.json and the image archives; the documents are written there")
		if err := parse(fs, args, 0); err != nil {
			return err
		}
		if *version == "" {
			return errors.New("image-sboms needs --version")
		}
		created, err := createdTime(getenv)
		if err != nil {
			return err
		}
		return imageSBOMs(*dir, *version, created, stdout)
	case "chart":
		version := fs.String("version", "", "chart version and appVersion")
		out := fs.String("out", "dist/chart", "directory the chart archive is written to")
		if err := parse(fs, args, 0); err != nil {
			return err
		}
		p, err := release.PackageChart(*version, *out)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, p)
		return nil
	case "push-images":
		dir := fs.String("images", "dist/images", "directory of images.json and the image archives")
		registry := fs.String("registry", "", "registry and namespace to push to (default: the one the images are named with)")
		if err := parse(fs, args, 0); err != nil {
			return err
		}
		pushed, err := release.PushImages(ctx, *dir, *registry, cred, stderr)
		if err != nil {
			return err
		}
		return printJSON(stdout, pushed)
	case "push-chart":
		repo := fs.String("repo", "", "OCI repository of charts, e.g. oci://ghcr.io/outpost-dev/charts")
		plain := fs.Bool("plain-http", false, "talk HTTP, not HTTPS, to the registry (a registry on loopback)")
		if err := parse(fs, args, 1); err != nil {
			return err
		}
		pushed, err := release.PushChart(fs.Arg(0), *repo, cred, *plain, stderr)
		if err != nil {
			return err
		}
		return printJSON(stdout, pushed)
	case "snapshot-config":
		config := fs.String("config", ".goreleaser.yml", "the release configuration")
		targets := fs.String("targets", "linux_amd64", "comma-separated goreleaser targets every build is cut down to")
		ids := fs.String("ids", "", "comma-separated build ids to keep (default: all)")
		out := fs.String("out", "", "file to write (default: standard output)")
		if err := parse(fs, args, 0); err != nil {
			return err
		}
		in, err := os.ReadFile(*config)
		if err != nil {
			return err
		}
		b, err := release.SnapshotConfig(in, split(*targets), split(*ids))
		if err != nil {
			return fmt.Errorf("%s: %w", *config, err)
		}
		if *out == "" {
			_, err = stdout.Write(b)
			return err
		}
		return os.WriteFile(*out, b, 0o644)
	case "sign":
		in := release.SignInputs{Cred: cred}
		fs.StringVar(&in.Cosign, "cosign", "cosign", "the cosign binary")
		fs.StringVar(&in.Images, "images", "dist/images/images.json", "the images' list (a release's outpost-images_<version>.json): names and digests to sign")
		fs.StringVar(&in.SBOMs, "sboms", "dist/images", "directory of the platform images' SPDX documents, attested to each image")
		fs.StringVar(&in.Registry, "registry", getenv("OUTPOST_IMAGE_REGISTRY"), "registry and namespace the images were pushed to (default: $OUTPOST_IMAGE_REGISTRY, else the one they are named with)")
		fs.StringVar(&in.Chart, "chart", "", "the packaged chart")
		fs.StringVar(&in.ChartRepo, "chart-repo", getenv("OUTPOST_CHART_REPOSITORY"), "OCI repository the chart was pushed to (default: $OUTPOST_CHART_REPOSITORY)")
		fs.BoolVar(&in.ChartPlainHTTP, "plain-http", false, "read the chart's manifest over HTTP, not HTTPS (a registry on loopback)")
		fs.StringVar(&in.Checksums, "checksums", "", "the SHA256SUMS file; its Sigstore bundle is written to <file>.sigstore.json")
		if err := fs.Parse(args); err != nil {
			return err
		}
		// What follows -- goes to every cosign command (the release: --yes).
		in.Args = fs.Args()
		signed, err := release.Sign(ctx, in, stderr)
		if err != nil {
			return err
		}
		return printJSON(stdout, signed)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", cmd, usage)
}

func parse(fs *flag.FlagSet, args []string, nargs int) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != nargs {
		return fmt.Errorf("%s takes %d argument(s), got %q", fs.Name(), nargs, fs.Args())
	}
	return nil
}

func split(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// createdTime is SOURCE_DATE_EPOCH (goreleaser passes the commit time), so documents built twice
// from one commit are the same; else now.
func createdTime(getenv func(string) string) (time.Time, error) {
	sde := getenv("SOURCE_DATE_EPOCH")
	if sde == "" {
		return time.Now().UTC().Truncate(time.Second), nil
	}
	secs, err := strconv.ParseInt(sde, 10, 64)
	if err != nil || secs < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds since 1970", sde)
	}
	return time.Unix(secs, 0).UTC(), nil
}

func imageSBOMs(dir, version string, created time.Time, stdout io.Writer) error {
	built, err := release.ReadSummary(dir)
	if err != nil {
		return err
	}
	for _, b := range built {
		a, err := release.OpenOCIArchive(b.Archive)
		if err != nil {
			return err
		}
		docs, err := release.ImageSBOMs(a, version, created)
		_ = a.Close()
		if err != nil {
			return err
		}
		for _, d := range docs {
			p := filepath.Join(dir, release.ImageSBOMName(b.Name, a.Ref.TagStr(), d.Platform))
			if err := writeFile(p, d.Write); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s: %d Debian packages, %d Go programs\n", p, d.DebianPackages, d.Programs)
		}
	}
	return nil
}

// writeFile writes through a temporary file renamed into place: a failure leaves no half file.
func writeFile(p string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
