package release

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"sigs.k8s.io/yaml"
)

// CosignEnv names the cosign binary the dry run of the release's signing runs
// (scripts/tools.sh cosign builds it; make test sets it).
const CosignEnv = "OUTPOST_COSIGN"

// offlineEnv is the environment of every signing tool the dry run starts: a home of its own,
// and proxies on a closed loopback port, so that a tool that tried to reach the internet (the
// Sigstore TUF repository, Rekor, Fulcio) would fail here instead of leaving the machine.
func offlineEnv(home string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "DOCKER_CONFIG=" + filepath.Join(home, ".docker"),
		"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "NO_PROXY=127.0.0.1,localhost"}
}

// tryTool runs a signing tool with env and returns its standard output, or an error with all
// it printed.
func tryTool(t *testing.T, env []string, path string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), path, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s%s", filepath.Base(path), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// runTool is tryTool that fails the test on an error.
func runTool(t *testing.T, env []string, path string, args ...string) string {
	t.Helper()
	out, err := tryTool(t, env, path, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// goreleaserSigns is the `signs` section of .goreleaser.yml.
type goreleaserSigns struct {
	Signs []struct {
		Artifacts string   `json:"artifacts"`
		Cmd       string   `json:"cmd"`
		Args      []string `json:"args"`
		Signature string   `json:"signature"`
	} `json:"signs"`
}

// copyChecksums copies the snapshot's SHA256SUMS into dir (the tests sign and change their
// copy: dist is shared by the tests) and returns the copy's path and content.
func copyChecksums(t *testing.T, s snapshot, dir string) (path string, data []byte) {
	t.Helper()
	name := "terraform-provider-outpost_" + s.Version + "_SHA256SUMS"
	data, err := os.ReadFile(s.release(name))
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

var fingerprintTemplate = regexp.MustCompile(`\{\{\s*\.Env\.GPG_FINGERPRINT\s*\}\}`)

// throwawayGPGKey makes a GnuPG home holding a new RSA signing key with a passphrase, imported
// as the release workflow imports the real one (crazy-max/ghaction-import-gpg): gpg-agent
// allows a preset passphrase, and the passphrase is preset for the key's keygrip, so that
// `gpg --batch` signs without asking. It returns the environment of gpg commands using that
// keyring and the key's fingerprint.
func throwawayGPGKey(t *testing.T, gpg string) (env []string, fingerprint string) {
	t.Helper()
	_, env = gnupgHome(t)
	passphrase := rand.Text()
	// The Terraform Registry takes RSA and DSA keys only.
	runTool(t, env, gpg, "--batch", "--pinentry-mode", "loopback", "--passphrase", passphrase,
		"--quick-gen-key", "Outpost release dry run <release-dry-run@outpost.invalid>", "rsa3072", "sign", "1d")
	colons := runTool(t, env, gpg, "--batch", "--with-colons", "--with-keygrip", "--list-secret-keys")
	var grip string
	for line := range strings.SplitSeq(colons, "\n") {
		f := strings.Split(line, ":")
		switch {
		case len(f) > 9 && f[0] == "fpr" && fingerprint == "":
			fingerprint = f[9]
		case len(f) > 9 && f[0] == "grp" && grip == "":
			grip = f[9]
		}
	}
	if fingerprint == "" || grip == "" {
		t.Fatalf("gpg --list-secret-keys gave no fingerprint or keygrip:\n%s", colons)
	}
	out := runTool(t, env, "gpg-connect-agent", "PRESET_PASSPHRASE "+grip+" -1 "+hex.EncodeToString([]byte(passphrase)), "/bye")
	if !strings.HasPrefix(out, "OK") {
		t.Fatalf("gpg-agent refused the preset passphrase: %s", out)
	}
	return env, fingerprint
}

// gnupgHome is a new GnuPG home whose gpg-agent allows preset passphrases, and the environment
// of the gpg commands that use it. The agent gpg starts for it is stopped when the test ends (it
// detaches, so on a machine whose init does not reap orphans it stays a zombie).
func gnupgHome(t *testing.T) (home string, env []string) {
	t.Helper()
	// Short: gpg-agent's socket lives in it, and a socket path has at most 107 bytes.
	home, err := os.MkdirTemp("", "gpg") //nolint:usetesting // t.TempDir's paths can be too long for the socket
	if err != nil {
		t.Fatal(err)
	}
	env = append(offlineEnv(home), "GNUPGHOME="+home)
	t.Cleanup(func() {
		// The agent of this home, and only it; t.Context is over by now.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kill := exec.CommandContext(ctx, "gpgconf", "--kill", "gpg-agent")
		kill.Env = env
		_ = kill.Run()
		os.RemoveAll(home)
	})
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	// A fixed count for protecting the throwaway key with its passphrase: the agent's own
	// calibration took 10 s of a loaded machine's time for every key.
	if err := os.WriteFile(filepath.Join(home, "gpg-agent.conf"), []byte("allow-preset-passphrase\ns2k-count 65536\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return home, env
}

// TestChecksumsSignatureDryRun signs the snapshot's SHA256SUMS as the release signs it: with a
// throwaway key imported as the release workflow imports the real one, it runs the command of
// .goreleaser.yml's `signs` (gpg --batch ... --detach-sign, no terminal). The signature must be
// a binary detached signature named <SHA256SUMS>.sig that verifies with nothing but the exported
// public key (what the Terraform Registry is given), with gpg and with the OpenPGP library
// Terraform verifies provider signatures with (ProtonMail/go-crypto); a changed SHA256SUMS must
// not verify.
func TestChecksumsSignatureDryRun(t *testing.T) {
	s := loadSnapshot(t)
	gpg, err := exec.LookPath("gpg")
	if err != nil {
		t.Skip("gpg is not installed: scripts/gnupg.sh installs it (make test runs it)")
	}
	b, err := os.ReadFile(filepath.Join("..", "..", ".goreleaser.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg goreleaserSigns
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Signs) != 1 || cfg.Signs[0].Artifacts != "checksum" || (cfg.Signs[0].Cmd != "" && cfg.Signs[0].Cmd != "gpg") {
		t.Fatalf(".goreleaser.yml signs %+v; this dry run knows one gpg signature of the checksum file", cfg.Signs)
	}
	signerEnv, fingerprint := throwawayGPGKey(t, gpg)

	// goreleaser's own substitutions, on a copy of the checksums.
	sums, data := copyChecksums(t, s, t.TempDir())
	signature := cfg.Signs[0].Signature
	if signature == "" {
		signature = "${artifact}.sig" // goreleaser's default
	}
	signature = strings.ReplaceAll(signature, "${artifact}", sums)
	if want := sums + ".sig"; signature != want {
		t.Errorf("the signature is written to %s, want %s: the registries download <SHA256SUMS>.sig", signature, want)
	}
	var args []string
	for _, a := range cfg.Signs[0].Args {
		a = strings.NewReplacer("${artifact}", sums, "${signature}", signature).Replace(a)
		a = fingerprintTemplate.ReplaceAllString(a, fingerprint)
		if strings.Contains(a, "{{") || strings.Contains(a, "${") {
			t.Fatalf(".goreleaser.yml's signing argument %q has a template this dry run does not fill in", a)
		}
		args = append(args, a)
	}
	runTool(t, signerEnv, gpg, args...)
	sig, err := os.ReadFile(signature)
	if err != nil {
		t.Fatal(err)
	}
	if len(sig) == 0 || sig[0]&0x80 == 0 {
		t.Fatalf("%s is not a binary OpenPGP signature (starts %q): Terraform reads binary signatures only", signature, sig[:min(len(sig), 16)])
	}

	// What the maintainer gives the Terraform Registry, and only that, verifies it.
	public := runTool(t, signerEnv, gpg, "--batch", "--armor", "--export", fingerprint)
	verifier, venv := gnupgHome(t)
	if err := os.WriteFile(filepath.Join(verifier, "public.asc"), []byte(public), 0o600); err != nil {
		t.Fatal(err)
	}
	runTool(t, venv, gpg, "--batch", "--import", filepath.Join(verifier, "public.asc"))
	status := runTool(t, venv, gpg, "--batch", "--status-fd", "1", "--verify", signature, sums)
	if !strings.Contains(status, "[GNUPG:] VALIDSIG "+fingerprint) {
		t.Errorf("gpg --verify with the public key alone says no VALIDSIG %s:\n%s", fingerprint, status)
	}
	keyring, err := openpgp.ReadArmoredKeyRing(strings.NewReader(public))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := openpgp.CheckDetachedSignature(keyring, bytes.NewReader(data), bytes.NewReader(sig), nil)
	if err != nil {
		t.Fatalf("the signature does not verify as Terraform verifies it: %v", err)
	}
	if got := strings.ToUpper(hex.EncodeToString(signer.PrimaryKey.Fingerprint)); got != fingerprint {
		t.Errorf("signed by %s, want %s", got, fingerprint)
	}

	// A changed SHA256SUMS fails both.
	changed := append(append([]byte(nil), data...), []byte("0000000000000000000000000000000000000000000000000000000000000000  evil.zip\n")...)
	if err := os.WriteFile(sums, changed, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tryTool(t, venv, gpg, "--batch", "--verify", signature, sums); err == nil {
		t.Error("gpg --verify accepted a changed SHA256SUMS")
	}
	if _, err := openpgp.CheckDetachedSignature(keyring, bytes.NewReader(changed), bytes.NewReader(sig), nil); err == nil {
		t.Error("the OpenPGP library accepted a changed SHA256SUMS")
	}
	t.Logf("SHA256SUMS of %s signed by throwaway key %s with .goreleaser.yml's command and verified", s.Version, fingerprint)
}

// TestImagesAndChartSignaturesDryRun pushes the snapshot's images and chart to an OCI registry
// (in memory, on loopback) and runs the release's signing on them (Sign, which the release
// workflow runs as `outpost-release sign`) with a throwaway cosign key in place of the
// workflow's keyless identity and with no transparency log (neither Fulcio nor Rekor can be
// reached here). Then cosign verifies, with the throwaway public key, what a user would verify:
// each image index's signature, each platform image's SBOM attestation (its subject that
// image's digest, its predicate the SBOM the release publishes), the chart's signature and the
// bundle of SHA256SUMS. A key that did not sign, and a changed SHA256SUMS, fail.
func TestImagesAndChartSignaturesDryRun(t *testing.T) {
	s := loadSnapshot(t)
	cosignPath := os.Getenv(CosignEnv)
	if cosignPath == "" {
		t.Skipf("%s is not set: build cosign with scripts/tools.sh cosign and export %s (make test does)", CosignEnv, CosignEnv)
	}
	ctx := t.Context()
	reg := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	registry, chartRepo := host+"/outpost", "oci://"+host+"/charts"
	var pushLog bytes.Buffer
	if _, err := PushImages(ctx, s.ImagesDir(), registry, Credentials{}, &pushLog); err != nil {
		t.Fatalf("pushing the images: %v\n%s", err, pushLog.String())
	}
	if _, err := PushChart(s.chart(), chartRepo, Credentials{}, true, &pushLog); err != nil {
		t.Fatalf("pushing the chart: %v\n%s", err, pushLog.String())
	}

	dir := t.TempDir()
	env := append(offlineEnv(dir), "COSIGN_PASSWORD=throwaway")
	keys := func(prefix string) {
		cmd := exec.CommandContext(ctx, cosignPath, "generate-key-pair", "--output-key-prefix", prefix)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
		}
	}
	keys("release")
	keys("stranger")
	// No Fulcio, Rekor or timestamp authority to sign with, and no trusted root to fetch.
	signingConfig, trustedRoot := filepath.Join(dir, "signing-config.json"), filepath.Join(dir, "trusted-root.json")
	if err := os.WriteFile(signingConfig, []byte(`{"mediaType":"application/vnd.dev.sigstore.signingconfig.v0.2+json"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trustedRoot, []byte(`{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	sums, data := copyChecksums(t, s, dir)

	var signLog bytes.Buffer
	signed, err := Sign(ctx, SignInputs{
		Cosign: cosignPath, Images: filepath.Join(s.ImagesDir(), "images.json"), SBOMs: s.ImagesDir(), Registry: registry,
		Chart: s.chart(), ChartRepo: chartRepo, ChartPlainHTTP: true, Checksums: sums,
		// In place of the release's --yes (keyless, no prompt).
		Args: []string{"--key", filepath.Join(dir, "release.key"), "--signing-config", signingConfig, "--trusted-root", trustedRoot},
		Env:  env,
	}, &signLog)
	if err != nil {
		t.Fatalf("signing: %v\n%s", err, signLog.String())
	}

	images, err := ReadSummary(s.ImagesDir())
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	verify := func(key string, args ...string) (string, error) {
		return tryTool(t, env, cosignPath, append([]string{args[0], "--key", filepath.Join(dir, key), "--insecure-ignore-tlog", "--trusted-root", trustedRoot}, args[1:]...)...)
	}
	for _, sg := range signed {
		kinds[sg.Kind]++
		switch sg.Kind {
		case "image", "chart":
			if _, err := verify("release.pub", "verify", sg.Ref); err != nil {
				t.Errorf("the %s's signature does not verify: %v", sg.Kind, err)
			}
			if kinds[sg.Kind] > 1 {
				continue // one stranger's refusal is enough
			}
			if _, err := verify("stranger.pub", "verify", sg.Ref); err == nil {
				t.Errorf("%s verifies with a key that did not sign it", sg.Ref)
			}
		case "sbom":
			out, err := verify("release.pub", "verify-attestation", "--type", "spdxjson", sg.Ref)
			if err != nil {
				t.Errorf("the SBOM attestation does not verify: %v", err)
				continue
			}
			checkSBOMAttestation(t, out, sg)
		case "checksums":
			if _, err := verify("release.pub", "verify-blob", "--bundle", sg.With, sg.Ref); err != nil {
				t.Errorf("the checksums' bundle does not verify: %v", err)
			}
		}
	}
	platforms := 0
	for _, b := range images {
		platforms += len(b.Platforms)
	}
	if want := map[string]int{"image": len(images), "sbom": platforms, "chart": 1, "checksums": 1}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("signed %v, want %v", kinds, want)
	}
	if err := os.WriteFile(sums, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := verify("release.pub", "verify-blob", "--bundle", sums+".sigstore.json", sums); err == nil {
		t.Error("cosign verify-blob accepted a changed SHA256SUMS")
	}

	// A chart under the release's tag that is not the released file is not signed: the same
	// chart compressed anew (valid, other bytes) is refused.
	other := filepath.Join(dir, filepath.Base(s.chart()))
	regzip(t, s.chart(), other)
	if _, err := pushedChart(ctx, SignInputs{Chart: other, ChartRepo: chartRepo, ChartPlainHTTP: true}); err == nil || !strings.Contains(err.Error(), "push this release's chart again") {
		t.Errorf("the chart to sign, for a chart other than the one pushed: %v, want a refusal", err)
	}
	t.Logf("signed and verified with a throwaway key: %v", kinds)
}

// checkSBOMAttestation checks the in-toto statement of `cosign verify-attestation`'s output:
// about the platform image signed, an SPDX document, the SBOM file the release publishes.
func checkSBOMAttestation(t *testing.T, out string, sg Signed) {
	t.Helper()
	var envelope struct {
		Payload string `json:"payload"`
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &envelope); err != nil {
		t.Fatalf("cosign verify-attestation printed %q: %v", out, err)
	}
	payload, err := base64.StdEncoding.DecodeString(envelope.Payload)
	if err != nil {
		t.Fatal(err)
	}
	var statement struct {
		Subject []struct {
			Digest map[string]string `json:"digest"`
		} `json:"subject"`
		PredicateType string          `json:"predicateType"`
		Predicate     json.RawMessage `json:"predicate"`
	}
	if err := json.Unmarshal(payload, &statement); err != nil {
		t.Fatal(err)
	}
	_, digest, _ := strings.Cut(sg.Ref, "@sha256:")
	if len(statement.Subject) != 1 || statement.Subject[0].Digest["sha256"] != digest || statement.PredicateType != "https://spdx.dev/Document" {
		t.Errorf("the attestation of %s is about %+v with predicate type %s", sg.Ref, statement.Subject, statement.PredicateType)
	}
	want, err := os.ReadFile(sg.With)
	if err != nil {
		t.Fatal(err)
	}
	var got, wantDoc any
	if err := json.Unmarshal(statement.Predicate, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &wantDoc); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, wantDoc) {
		t.Errorf("the attestation of %s holds another document than %s", sg.Ref, sg.With)
	}
}

// regzip writes src's content compressed anew, at another level, to dst: the same chart in
// other bytes.
func regzip(t *testing.T, src, dst string) {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	if _, err := io.Copy(zw, zr); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
