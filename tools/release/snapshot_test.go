package release

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/release/releasetest"
)

// snapshot is the build the tests install, from $DistEnv.
type snapshot struct{ releasetest.Dist }

func (s snapshot) release(name string) string { return s.ReleaseFile(name) }

// providerZip is the registry archive of this machine's platform.
func (s snapshot) providerZip() string { return s.ProviderZip(runtime.GOOS, runtime.GOARCH) }

func (s snapshot) chart() string { return s.Chart() }

func loadSnapshot(t *testing.T) snapshot {
	t.Helper()
	dir := os.Getenv(releasetest.DistEnv)
	if dir == "" {
		t.Skipf("%s is not set: run `make snapshot` and set %s=$PWD/dist (make test does both)", releasetest.DistEnv, releasetest.DistEnv)
	}
	d, err := releasetest.OpenDist(dir)
	if err != nil {
		t.Fatal(err)
	}
	return snapshot{d}
}

// TestSnapshotHasTheRegistryLayout checks what the Terraform and OpenTofu registries read: the
// zip named for the version and platform holding terraform-provider-outpost_v<version>, a
// SHA256SUMS file whose lines match the files (the chart's and the bill of materials' too), and
// the manifest declaring protocol 6.0.
func TestSnapshotHasTheRegistryLayout(t *testing.T) {
	s := loadSnapshot(t)
	sums := readSums(t, s.release("terraform-provider-outpost_"+s.Version+"_SHA256SUMS"))
	zip := filepath.Base(s.providerZip())
	manifest := "terraform-provider-outpost_" + s.Version + "_manifest.json"
	chart := "outpost-agent-" + s.Version + ".tgz"
	for _, name := range []string{zip, manifest, zip + ".spdx.json", chart} {
		want, ok := sums[name]
		if !ok {
			t.Errorf("SHA256SUMS lists no %s (it lists %v)", name, sortedKeys(sums))
			continue
		}
		p := s.release(name)
		switch name {
		case chart:
			p = s.chart()
		case manifest:
			// The release uploads the repository's manifest under this name (.goreleaser.yml).
			p = filepath.Join("..", "..", "terraform-registry-manifest.json")
		}
		if got := fileSHA256(t, p); got != want {
			t.Errorf("%s: SHA-256 %s, SHA256SUMS says %s", name, got, want)
		}
	}
	var m struct {
		Version  int `json:"version"`
		Metadata struct {
			ProtocolVersions []string `json:"protocol_versions"`
		} `json:"metadata"`
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "terraform-registry-manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Version != 1 || strings.Join(m.Metadata.ProtocolVersions, ",") != "6.0" {
		t.Errorf("%s = %s (%v), want version 1 with protocol_versions [6.0]", manifest, b, err)
	}
	out, err := exec.CommandContext(t.Context(), "unzip", "-Z1", s.providerZip()).CombinedOutput()
	if err != nil {
		t.Fatalf("unzip -Z1: %v\n%s", err, out)
	}
	if want := "terraform-provider-outpost_v" + s.Version; !slices.Contains(strings.Fields(string(out)), want) {
		t.Errorf("the zip holds %q, not %q (the name Terraform runs)", out, want)
	}
}

// readSums reads a SHA256SUMS file: "<hex>  <name>" lines.
func readSums(t *testing.T, p string) map[string]string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("%s: line %q is not \"<sha256>  <file>\"", p, sc.Text())
		}
		out[name] = sum
	}
	return out
}

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// cli is terraform or tofu, with the host its provider addresses default to.
type cli struct {
	name, path, host string
}

// clis are the real binaries: Terraform at $TF_ACC_TERRAFORM_PATH or /usr/local/bin/terraform,
// OpenTofu at $OUTPOST_TOFU (scripts/tools.sh builds it).
func clis(t *testing.T) []cli {
	t.Helper()
	tf := "/usr/local/bin/terraform"
	if p := os.Getenv("TF_ACC_TERRAFORM_PATH"); p != "" && filepath.Base(p) == "terraform" {
		tf = p
	}
	tofu := os.Getenv("OUTPOST_TOFU")
	if tofu == "" {
		t.Skip("OUTPOST_TOFU is not set: build OpenTofu with scripts/tools.sh tofu and export OUTPOST_TOFU (make test does)")
	}
	return []cli{{"terraform", tf, "registry.terraform.io"}, {"tofu", tofu, "registry.opentofu.org"}}
}

// mirror lays the snapshot's provider zip out as a filesystem mirror in the packed layout,
// HOSTNAME/outpost-dev/outpost/<the registry's zip name>, for both registries' host names, and
// writes a CLI configuration that installs outpost-dev/outpost from it and from nowhere else.
func mirror(t *testing.T, s snapshot) (cliConfig string) {
	t.Helper()
	dir := t.TempDir()
	zip, err := os.ReadFile(s.providerZip())
	if err != nil {
		t.Fatal(err)
	}
	var include []string
	for _, host := range []string{"registry.terraform.io", "registry.opentofu.org"} {
		d := filepath.Join(dir, "mirror", host, "outpost-dev", "outpost")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, filepath.Base(s.providerZip())), zip, 0o644); err != nil {
			t.Fatal(err)
		}
		include = append(include, fmt.Sprintf("%q", host+"/outpost-dev/outpost"))
	}
	cliConfig = filepath.Join(dir, "cli.tfrc")
	cfg := fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = [%s]
  }
}
`, filepath.Join(dir, "mirror"), strings.Join(include, ", "))
	if err := os.WriteFile(cliConfig, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return cliConfig
}

// run runs the CLI in dir with only the environment it needs (no TF_ACC, no dev overrides).
func (c cli) run(t *testing.T, dir, cliConfig string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), c.path, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TF_CLI_CONFIG_FILE=" + cliConfig, "TF_IN_AUTOMATION=1",
		"CHECKPOINT_DISABLE=1", "TF_LOG_PATH=" + filepath.Join(dir, "cli.log"), "TF_LOG=info"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "cli.log"))
		t.Fatalf("%s %s: %v\n%s\n--- log (last 4 KiB) ---\n%s", c.name, strings.Join(args, " "), err, out.String(), tail(log, 4096))
	}
	t.Logf("%s %s: %s", c.name, args[0], time.Since(start).Round(10*time.Millisecond))
	return out.String()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// TestSnapshotInstallsWithTerraformAndOpenTofu installs the snapshot's provider archive the way
// users install a release, through `terraform init` and `tofu init` from a filesystem mirror
// (the registry protocol's packed layout, checked against the lock file's hash), with a
// configuration that requires outpost-dev/outpost at exactly the snapshot's version, then
// applies a key pair with it.
func TestSnapshotInstallsWithTerraformAndOpenTofu(t *testing.T) {
	s := loadSnapshot(t)
	cliConfig := mirror(t, s)
	for _, c := range clis(t) {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := fmt.Sprintf(`terraform {
  required_providers {
    outpost = {
      source  = "outpost-dev/outpost"
      version = "= %s"
    }
  }
}

resource "outpost_key_pair" "runner" {}

output "fingerprint" {
  value = outpost_key_pair.runner.fingerprint_sha256
}
`, s.Version)
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			out := c.run(t, dir, cliConfig, "init", "-input=false", "-no-color")
			if want := "Installed outpost-dev/outpost v" + s.Version; !strings.Contains(out, want) {
				t.Errorf("%s init printed no %q:\n%s", c.name, want, out)
			}
			lock, err := os.ReadFile(filepath.Join(dir, ".terraform.lock.hcl"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(lock), `provider "`+c.host+`/outpost-dev/outpost"`) || !strings.Contains(string(lock), `version     = "`+s.Version+`"`) {
				t.Errorf("the lock file records no %s/outpost-dev/outpost %s:\n%s", c.host, s.Version, lock)
			}
			c.run(t, dir, cliConfig, "apply", "-input=false", "-no-color", "-auto-approve")
			fp := strings.TrimSpace(c.run(t, dir, cliConfig, "output", "-raw", "fingerprint"))
			if !strings.HasPrefix(fp, "SHA256:") {
				t.Errorf("the key pair's fingerprint is %q, want SHA256:…", fp)
			}
			var v struct {
				ProviderSelections map[string]string `json:"provider_selections"`
			}
			if err := json.Unmarshal([]byte(c.run(t, dir, cliConfig, "version", "-json")), &v); err != nil {
				t.Fatal(err)
			}
			if got := v.ProviderSelections[c.host+"/outpost-dev/outpost"]; got != s.Version {
				t.Errorf("%s version -json selects outpost %q, want %q (%v)", c.name, got, s.Version, v.ProviderSelections)
			}
			// The provider's own log names its version (TF_LOG=info, see run).
			log, err := os.ReadFile(filepath.Join(dir, "cli.log"))
			if err != nil {
				t.Fatal(err)
			}
			if want := "provider_version=" + s.Version; !strings.Contains(string(log), want) {
				t.Errorf("the provider's log has no %q", want)
			}
			c.run(t, dir, cliConfig, "destroy", "-input=false", "-no-color", "-auto-approve")
		})
	}
}
