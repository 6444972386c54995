package jobrun

import (
	"archive/zip"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
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
	// Static, as every build of the Makefile: under `go test -race` (CGO_ENABLED=1) the provider
	// would otherwise be compiled a second time, with cgo, for nothing.
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
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

// networkMirror serves the provider of mirror (outpostMirror's unpacked layout) over HTTPS on
// loopback, as a provider network mirror (the protocol both CLIs speak: index.json, <version>.json,
// the zip), under both registry hosts. It returns the mirror's URL, a file with its certificate
// (a CA, for SSL_CERT_FILE) and a count of the zips it served.
func networkMirror(t *testing.T, mirror string) (string, string, *atomic.Int64) {
	t.Helper()
	bin := filepath.Join(mirror, "registry.terraform.io", "outpost-dev", "outpost", mirrorVersion, "linux_amd64", "terraform-provider-outpost_v"+mirrorVersion)
	zipName := fmt.Sprintf("terraform-provider-outpost_%s_linux_amd64.zip", mirrorVersion)
	zipPath := filepath.Join(t.TempDir(), zipName)
	writeProviderZip(t, zipPath, bin)
	h1, err := dirhash.HashZip(zipPath, dirhash.Hash1)
	if err != nil {
		t.Fatal(err)
	}
	var zips atomic.Int64
	mux := http.NewServeMux()
	for _, host := range []string{"registry.terraform.io", "registry.opentofu.org"} {
		base := "/providers/" + host + "/outpost-dev/outpost/"
		mux.HandleFunc("GET "+base+"index.json", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"versions": map[string]any{mirrorVersion: map[string]any{}}})
		})
		mux.HandleFunc("GET "+base+mirrorVersion+".json", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"archives": map[string]any{
				"linux_amd64": map[string]any{"url": zipName, "hashes": []string{h1}}}})
		})
		mux.HandleFunc("GET "+base+zipName, func(w http.ResponseWriter, r *http.Request) {
			zips.Add(1)
			http.ServeFile(w, r, zipPath)
		})
	}
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "mirror-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return srv.URL + "/providers/", ca, &zips
}

// writeProviderZip packs the provider binary as a registry serves it: one executable in a zip.
func writeProviderZip(t *testing.T, zipPath, bin string) {
	t.Helper()
	f, err := os.Create(zipPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	hdr := &zip.FileHeader{Name: filepath.Base(bin), Method: zip.Deflate}
	hdr.SetMode(0o755)
	w, err := zw.CreateHeader(hdr)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := io.Copy(w, src); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestProvidersFromAMirrorThroughTheCache: with only a mirror to install from (direct
// installation excluded, as in a cluster without registry access), a deployment that needs the
// outpost provider succeeds, from a filesystem mirror (air-gapped) and from a network mirror over
// HTTPS (its CA trusted through the job runner's CA bundle). With a plugin cache, the next
// deployment takes the provider from the cache: it is not downloaded again. The init times, with
// the cache empty and from the cache (median of several), are logged, not asserted.
func TestProvidersFromAMirrorThroughTheCache(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the provider and runs the real CLIs")
	}
	mirror, h1 := outpostMirror(t)
	mirrorURL, mirrorCA, zips := networkMirror(t, mirror)
	only := func(source string) string {
		return fmt.Sprintf(`provider_installation {
  %s
  direct {
    exclude = ["*/*/*"]
  }
}`, source)
	}
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
	for _, mc := range []struct {
		name         string
		installation string
		// env is the job runner's, caEnv the CLI's alone (for the init timings).
		env   map[string]string
		caEnv []string
		// downloads counts what the mirror served (nil: a filesystem mirror).
		downloads *atomic.Int64
	}{
		{name: "filesystem mirror", installation: only(fmt.Sprintf("filesystem_mirror {\n    path    = %q\n    include = [\"registry.terraform.io/outpost-dev/outpost\", \"registry.opentofu.org/outpost-dev/outpost\"]\n  }", mirror))},
		{name: "network mirror", installation: only(fmt.Sprintf("network_mirror {\n    url = %q\n  }", mirrorURL)),
			env: map[string]string{jobenv.CABundleFile: mirrorCA}, caEnv: []string{"SSL_CERT_FILE=" + mirrorCA}, downloads: zips},
	} {
		for _, name := range []string{"terraform", "tofu"} {
			src := inlineSource(t, map[string]string{"main.tf": main, ".terraform.lock.hcl": lock(hosts[name])})
			path := cliUnderTest()[name]
			t.Run(mc.name+"/"+name, func(t *testing.T) {
				if path == "" {
					t.Skipf("%s is not available (OUTPOST_TOFU for tofu)", name)
				}
				h := newHarness(t, path)
				cache := filepath.Join(t.TempDir(), "plugin-cache")
				env := map[string]string{jobenv.ProviderInstallation: mc.installation, jobenv.PluginCacheDir: cache}
				for k, v := range mc.env {
					env[k] = v
				}
				var runs [2]time.Duration
				for i := range runs {
					var before int64
					if mc.downloads != nil {
						before = mc.downloads.Load()
					}
					res := h.runJob(h.deploy(api.OperationPlan, src, nil, fmt.Sprintf("mirror-%d", i)), runOptions{env: env})
					if res.Code != 0 {
						t.Fatalf("run %d exited %d\n%s%s", i, res.Code, res.Stdout, res.Stderr)
					}
					if !strings.Contains(res.Log, "outpost-dev/outpost") {
						t.Fatalf("run %d did not install the outpost provider:\n%s", i, res.Log)
					}
					runs[i] = res.Duration
					if i == 1 && !strings.Contains(res.Log, "from the shared cache directory") {
						t.Errorf("the second run did not use the plugin cache:\n%s", res.Log)
					}
					if mc.downloads != nil {
						// Terraform 1.11 fetches the zip twice on a cache miss; what matters is
						// that a hit fetches nothing.
						got := mc.downloads.Load() - before
						if (i == 0 && got == 0) || (i == 1 && got != 0) {
							t.Errorf("run %d downloaded the provider %d times from the network mirror; want the first to, and the second to take it from the cache", i, got)
						}
						t.Logf("%s, %s: run %d downloaded the provider zip %d time(s)", mc.name, name, i, got)
					}
				}
				t.Logf("%s, %s: whole plan deployment, first (cache empty) %s, second (from the cache) %s",
					mc.name, name, runs[0].Round(time.Millisecond), runs[1].Round(time.Millisecond))
				cold, warm := initTimes(t, path, mc.installation, main, lock(hosts[name]), mc.caEnv)
				t.Logf("%s, %s: init alone, median of %d: cache empty %s, from the cache %s", mc.name, name, len(cold), median(cold), median(warm))
				if mc.downloads != nil {
					return
				}
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
}

// initRounds is how many times initTimes times each init.
const initRounds = 5

// initTimes times the CLI's init with the mirror: each round on a new, empty plugin cache, then
// again in a new directory with that cache filled.
func initTimes(t *testing.T, cli, installation, main, lock string, env []string) (cold, warm []time.Duration) {
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
		cmd.Env = append(append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_PLUGIN_CACHE_DIR="+cache, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1"), env...)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s init: %v\n%s", cli, err, out)
		}
		return time.Since(start)
	}
	for range initRounds {
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
