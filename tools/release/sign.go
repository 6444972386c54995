package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/registry"
)

// SignInputs names what a release signs with cosign, after goreleaser has published it: the
// files are the release's own assets (.github/workflows/release.yml downloads them from the
// draft release), so a failed signing can be run again without building anything.
type SignInputs struct {
	// Cosign is the cosign binary.
	Cosign string
	// Images is the release's images.json (the asset outpost-images_<version>.json): every image
	// index is signed by the digest it lists, so what is signed is what was built, whatever a
	// tag in the registry points at by now.
	Images string
	// SBOMs is the directory of the platform images' SPDX documents (ImageSBOMName); each is
	// attached to its platform image as a signed attestation (cosign attest --type spdxjson).
	SBOMs string
	// Registry replaces the registry and namespace of the images' names, as PushImages's does.
	Registry string
	// Chart is the packaged chart and ChartRepo the OCI repository it was pushed to
	// (oci://ghcr.io/outpost-dev/charts). The chart's digest is read from the registry (Helm
	// stamps a creation time into the manifest at push time), and the chart is signed only if
	// that manifest's chart layer is Chart, byte for byte.
	Chart, ChartRepo string
	// ChartPlainHTTP reads the chart's manifest over HTTP (a registry on loopback).
	ChartPlainHTTP bool
	// Cred reads the chart's manifest; cosign finds its own credentials (cosign login, or
	// ~/.docker/config.json).
	Cred Credentials
	// Checksums is the SHA256SUMS file; its Sigstore bundle is written next to it, as
	// <Checksums>.sigstore.json.
	Checksums string
	// Args go to every cosign command before the reference: the release passes --yes (keyless,
	// no prompt); the dry run in the tests a throwaway key and no transparency log.
	Args []string
	// Env is added to cosign's environment (the tests: the throwaway key's password, a HOME
	// of their own).
	Env []string
}

// Signed is one thing a release signed.
type Signed struct {
	// Kind is "image", "sbom", "chart" or "checksums".
	Kind string `json:"kind"`
	// Ref is repository@digest, or the file's path for checksums.
	Ref string `json:"ref"`
	// With is the SBOM attested, or the bundle written for checksums.
	With string `json:"with,omitempty"`
}

// Sign signs a release's images (each index), attests each platform image's SBOM, signs the
// chart and writes a Sigstore bundle of the checksums, with cosign, in that order; it stops at
// the first failure and returns what it signed until then. cosign's output goes to log.
func Sign(ctx context.Context, in SignInputs, log io.Writer) ([]Signed, error) {
	if in.Images == "" || in.SBOMs == "" || in.Chart == "" || in.ChartRepo == "" || in.Checksums == "" {
		return nil, errors.New("signing needs the images list, the SBOMs' directory, the chart, its repository and the checksums file")
	}
	images, err := readSummaryFile(in.Images)
	if err != nil {
		return nil, err
	}
	var done []Signed
	for _, b := range images {
		tag, err := name.NewTag(b.Ref, name.StrictValidation)
		if err != nil {
			return done, fmt.Errorf("%s: image %q: %w", in.Images, b.Ref, err)
		}
		if tag, err = pushTarget(tag, b.Name, in.Registry); err != nil {
			return done, err
		}
		index := tag.Context().Digest(b.Digest).String()
		if err := cosign(ctx, in, log, "sign", index); err != nil {
			return done, err
		}
		done = append(done, Signed{Kind: "image", Ref: index})
		for _, p := range b.Platforms {
			sbom := filepath.Join(in.SBOMs, ImageSBOMName(b.Name, tag.TagStr(), p.Platform))
			if _, err := os.Stat(sbom); err != nil {
				return done, fmt.Errorf("the bill of materials of %s (%s): %w", b.Name, p.Platform, err)
			}
			img := tag.Context().Digest(p.Digest).String()
			if err := cosign(ctx, in, log, "attest", "--type", "spdxjson", "--predicate", sbom, img); err != nil {
				return done, err
			}
			done = append(done, Signed{Kind: "sbom", Ref: img, With: sbom})
		}
	}
	chart, err := pushedChart(ctx, in)
	if err != nil {
		return done, err
	}
	if err := cosign(ctx, in, log, "sign", chart); err != nil {
		return done, err
	}
	done = append(done, Signed{Kind: "chart", Ref: chart})
	bundle := in.Checksums + ".sigstore.json"
	if err := cosign(ctx, in, log, "sign-blob", "--bundle", bundle, in.Checksums); err != nil {
		return done, err
	}
	return append(done, Signed{Kind: "checksums", Ref: in.Checksums, With: bundle}), nil
}

// cosign runs `cosign COMMAND in.Args... ARGS...`.
func cosign(ctx context.Context, in SignInputs, log io.Writer, command string, args ...string) error {
	argv := append(append([]string{command}, in.Args...), args...)
	fmt.Fprintf(log, "release: cosign %s\n", strings.Join(argv, " "))
	cmd := exec.CommandContext(ctx, in.Cosign, argv...)
	cmd.Env = append(os.Environ(), in.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cosign %s %s: %w (its output is above)", command, args[len(args)-1], err)
	}
	return nil
}

// pushedChart is repository@digest of the chart in.Chart as the registry holds it under its
// version's tag, once its chart layer has been checked to be in.Chart.
func pushedChart(ctx context.Context, in SignInputs) (string, error) {
	data, err := os.ReadFile(in.Chart)
	if err != nil {
		return "", err
	}
	ref, err := chartRef(in.Chart, data, in.ChartRepo)
	if err != nil {
		return "", err
	}
	var opts []name.Option
	if in.ChartPlainHTTP {
		opts = append(opts, name.Insecure)
	}
	tag, err := name.NewTag(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("chart reference %q: %w", ref, err)
	}
	desc, err := remote.Get(tag, remote.WithContext(ctx), in.Cred.keychain())
	if err != nil {
		return "", fmt.Errorf("reading the chart's manifest at %s: %w (was the chart pushed? make release pushes it)", tag, err)
	}
	img, err := desc.Image()
	if err != nil {
		return "", fmt.Errorf("the chart at %s: %w", tag, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return "", fmt.Errorf("the chart at %s: %w", tag, err)
	}
	sum := sha256.Sum256(data)
	want := "sha256:" + hex.EncodeToString(sum[:])
	for _, l := range m.Layers {
		if string(l.MediaType) == registry.ChartLayerMediaType {
			if l.Digest.String() != want {
				return "", fmt.Errorf("the chart at %s is not %s (its chart layer is %s, the file's SHA-256 is %s): push this release's chart again before signing it", tag, in.Chart, l.Digest, want)
			}
			return tag.Context().Digest(desc.Digest.String()).String(), nil
		}
	}
	return "", fmt.Errorf("the manifest at %s has no %s layer: it is not a Helm chart", tag, registry.ChartLayerMediaType)
}
