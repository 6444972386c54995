package recipe

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/tools/image"
)

// The tofu scripts/tools.sh built for the tests is taken as the image's when it was built the
// same way, and refused otherwise.
func TestReuseToolsTofu(t *testing.T) {
	ctx := context.Background()
	gov, err := goVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	version := tofuVersion()
	place := func(t *testing.T, src string) (cache, bin string) {
		t.Helper()
		cache = t.TempDir()
		dir := filepath.Join(cache, "tools", "tofu-"+version)
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tofu"), data, 0o755); err != nil {
			t.Fatal(err)
		}
		return cache, filepath.Join(t.TempDir(), "tofu")
	}

	// Another Go program in its place is refused.
	self, _ := os.Executable()
	cache, bin := place(t, self)
	if reuseToolsTofu(ctx, cache, version, runtime.GOARCH, gov, bin) {
		t.Error("reused a binary that is not OpenTofu")
	}
	if _, err := os.Stat(bin); !os.IsNotExist(err) {
		t.Errorf("something was written to %s", bin)
	}

	tofu := os.Getenv("OUTPOST_TOFU") // set by `make test`: scripts/tools.sh's build
	if tofu == "" {
		t.Skip("OUTPOST_TOFU is not set (make test sets it to the tofu of scripts/tools.sh)")
	}
	cache, bin = place(t, tofu)
	if reuseToolsTofu(ctx, cache, version, otherArch(), gov, bin) {
		t.Error("reused the tools' tofu for another architecture")
	}
	if reuseToolsTofu(ctx, cache, "v0.0.1", runtime.GOARCH, gov, bin) {
		t.Error("reused the tools' tofu for another version")
	}
	if !reuseToolsTofu(ctx, cache, version, runtime.GOARCH, gov, bin) {
		t.Fatalf("the tofu of scripts/tools.sh (%s) was not reused", tofu)
	}
	a, _ := os.ReadFile(tofu)
	b, _ := os.ReadFile(bin)
	if !bytes.Equal(a, b) {
		t.Error("the reused tofu differs from the tools' one")
	}
}

func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

func TestCacheDir(t *testing.T) {
	env := map[string]string{"OUTPOST_CACHE": "/c/outpost", "XDG_CACHE_HOME": "/x"}
	if got := CacheDir(func(k string) string { return env[k] }); got != "/c/outpost" {
		t.Errorf("with OUTPOST_CACHE: %s", got)
	}
	delete(env, "OUTPOST_CACHE")
	if got := CacheDir(func(k string) string { return env[k] }); got != "/x/outpost" {
		t.Errorf("with XDG_CACHE_HOME: %s", got)
	}
	// N8: without a home, no shared temporary directory: the build asks for OUTPOST_CACHE.
	t.Setenv("HOME", "")
	delete(env, "XDG_CACHE_HOME")
	got := CacheDir(func(k string) string { return env[k] })
	if got != "" {
		t.Errorf("without a home: %q, want none (never a shared temporary directory)", got)
	}
	_, err := Build(t.Context(), Options{ModuleRoot: ".", Registry: "r", Version: "v", TofuVersion: "v1", OutDir: t.TempDir(), CacheDir: got,
		Platforms: []image.Platform{{OS: "linux", Architecture: "amd64"}}})
	if err == nil || !strings.Contains(err.Error(), "OUTPOST_CACHE") {
		t.Errorf("a build without a cache: %v", err)
	}
}
