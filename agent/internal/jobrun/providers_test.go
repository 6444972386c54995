package jobrun

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/dirhash"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

func TestProviderSettings(t *testing.T) {
	work, cache := t.TempDir(), filepath.Join(t.TempDir(), "plugins", "nested")
	env, err := providerSettings(work, cache, `provider_installation { direct {} }`)
	if err != nil {
		t.Fatal(err)
	}
	if len(env) != 2 || env[0] != "TF_PLUGIN_CACHE_DIR="+cache || env[1] != "TF_CLI_CONFIG_FILE="+filepath.Join(work, "outpost.tfrc") {
		t.Fatalf("env %v", env)
	}
	if fi, err := os.Stat(cache); err != nil || !fi.IsDir() {
		t.Errorf("the cache directory was not created: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(work, "outpost.tfrc")); string(b) != "provider_installation { direct {} }\n" {
		t.Errorf("CLI configuration %q", b)
	}
	if env, err := providerSettings(work, "", ""); err != nil || len(env) != 0 {
		t.Errorf("nothing set: env %v, %v", env, err)
	}
	if _, err := providerSettings(work, "plugins", ""); err == nil || !strings.Contains(err.Error(), "absolute path") {
		t.Errorf("a relative cache directory: %v", err)
	}
}

// mirrorVersion is the version the outpost provider is published under in the test's mirror.
const mirrorVersion = "0.0.1"

// outpostMirror builds this module's provider and lays it out as a filesystem mirror (unpacked
// layout) under both registry hosts, as an air-gapped cluster would hold it. It returns the
// mirror and the provider's h1 hash, for a dependency lock file.
func outpostMirror(t *testing.T) (string, string) {
	t.Helper()
	mirror := t.TempDir()
	bin := filepath.Join(t.TempDir(), "terraform-provider-outpost")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/outpost-dev/terraform-provider-outpost")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the provider: %v\n%s", err, out)
	}
	for _, host := range []string{"registry.terraform.io", "registry.opentofu.org"} {
		dir := filepath.Join(mirror, host, "outpost-dev", "outpost", mirrorVersion, "linux_amd64")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(bin, filepath.Join(dir, "terraform-provider-outpost_v"+mirrorVersion)); err != nil {
			t.Fatal(err)
		}
	}
	// The hash both CLIs record for an unpacked package (h1: the Go module directory hash).
	h1, err := dirhash.HashDir(filepath.Join(mirror, "registry.terraform.io", "outpost-dev", "outpost", mirrorVersion, "linux_amd64"), "", dirhash.Hash1)
	if err != nil {
		t.Fatal(err)
	}
	return mirror, h1
}

// TestProvidersFromAMirrorThroughTheCache: with only a filesystem mirror to install from (direct
// installation excluded, as in a cluster without registry access), a deployment that needs the
// outpost provider succeeds; with a plugin cache, the next deployment links the provider from
// the cache instead of copying it again. The init times of both are logged.
func TestProvidersFromAMirrorThroughTheCache(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the provider and runs the real CLIs")
	}
	mirror, h1 := outpostMirror(t)
	installation := fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = ["registry.terraform.io/outpost-dev/outpost", "registry.opentofu.org/outpost-dev/outpost"]
  }
  direct {
    exclude = ["*/*/*"]
  }
}`, mirror)
	main := fmt.Sprintf(`terraform {
  required_providers {
    outpost = { source = "outpost-dev/outpost", version = %q }
  }
}
output "ok" { value = true }
`, mirrorVersion)
	// The configuration comes with its dependency lock file, as it should: Terraform (1.4+)
	// takes a provider from the cache only when the lock file vouches for it.
	lock := func(host string) string {
		return fmt.Sprintf("provider %q {\n  version     = %q\n  constraints = %q\n  hashes = [%q]\n}\n",
			host+"/outpost-dev/outpost", mirrorVersion, mirrorVersion, h1)
	}
	hosts := map[string]string{"terraform": "registry.terraform.io", "tofu": "registry.opentofu.org"}
	for _, name := range []string{"terraform", "tofu"} {
		src := inlineSource(t, map[string]string{"main.tf": main, ".terraform.lock.hcl": lock(hosts[name])})
		path := cliUnderTest()[name]
		t.Run(name, func(t *testing.T) {
			if path == "" {
				t.Skipf("%s is not available (OUTPOST_TOFU for tofu)", name)
			}
			h := newHarness(t, path)
			cache := filepath.Join(t.TempDir(), "plugin-cache")
			env := map[string]string{jobenv.ProviderInstallation: installation, jobenv.PluginCacheDir: cache}
			var inits [2]time.Duration
			for i := range inits {
				res := h.runJob(h.deploy(api.OperationPlan, src, nil, fmt.Sprintf("mirror-%d", i)), runOptions{env: env})
				if res.Code != 0 {
					t.Fatalf("run %d exited %d\n%s%s", i, res.Code, res.Stdout, res.Stderr)
				}
				if !strings.Contains(res.Log, "outpost-dev/outpost") {
					t.Fatalf("run %d did not install the outpost provider:\n%s", i, res.Log)
				}
				inits[i] = res.Duration
				if i == 1 && !strings.Contains(res.Log, "from the shared cache directory") {
					t.Errorf("the second run did not use the plugin cache:\n%s", res.Log)
				}
			}
			t.Logf("%s: whole plan deployment through the mirror, first (cache empty) %s, second (from the cache) %s",
				name, inits[0].Round(time.Millisecond), inits[1].Round(time.Millisecond))
			cold, warm := initTimes(t, path, installation, main, lock(hosts[name]))
			t.Logf("%s: init alone, median of %d: cache empty %s, from the cache %s", name, len(cold), median(cold), median(warm))
			// Without the mirror there is nowhere to get the provider from: the installation
			// settings are what made the runs work.
			res := h.runJob(h.deploy(api.OperationPlan, src, nil, "no-mirror"), runOptions{env: map[string]string{
				jobenv.ProviderInstallation: `provider_installation { direct { exclude = ["*/*/*"] } }`}})
			if res.Code == 0 {
				t.Errorf("a run without the mirror succeeded:\n%s", res.Log)
			}
		})
	}
}

// initTimes times the CLI's init with the mirror: each round on a new, empty plugin cache, then
// again in a new directory with that cache filled.
func initTimes(t *testing.T, cli, installation, main, lock string) (cold, warm []time.Duration) {
	t.Helper()
	rc := filepath.Join(t.TempDir(), "outpost.tfrc")
	if err := os.WriteFile(rc, []byte(installation), 0o644); err != nil {
		t.Fatal(err)
	}
	initIn := func(cache string) time.Duration {
		dir := t.TempDir()
		for name, body := range map[string]string{"main.tf": main, ".terraform.lock.hcl": lock} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.CommandContext(t.Context(), cli, "init", "-input=false", "-no-color")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_PLUGIN_CACHE_DIR="+cache, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1")
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s init: %v\n%s", cli, err, out)
		}
		return time.Since(start)
	}
	for range 3 {
		cache := t.TempDir()
		cold = append(cold, initIn(cache))
		warm = append(warm, initIn(cache))
	}
	return cold, warm
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Round(time.Millisecond)
}
