package version_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

const (
	stampedVersion = "1.2.3-test"
	stampedCommit  = "0123456789abcdef0123456789abcdef01234567"
	pkg            = "github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

// releaseLDFlags are the ldflags of every build in .goreleaser.yml, with the templates filled in
// as a release would. Each build must stamp exactly Version and Commit of this package: the linker
// ignores an -X whose variable does not exist, so a typo would ship binaries that say "dev".
func releaseLDFlags(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", ".goreleaser.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Builds []struct {
			ID      string   `json:"id"`
			Main    string   `json:"main"`
			LDFlags []string `json:"ldflags"`
		} `json:"builds"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf(".goreleaser.yml: %v", err)
	}
	fill := strings.NewReplacer("{{ .Version }}", stampedVersion, "{{ .Commit }}", stampedCommit)
	flags := map[string]string{}
	for _, b := range cfg.Builds {
		joined := fill.Replace(strings.Join(b.LDFlags, " "))
		var stamped []string
		fields := strings.Fields(joined)
		for i, f := range fields {
			if f == "-X" && i+1 < len(fields) {
				stamped = append(stamped, fields[i+1])
			}
		}
		want := []string{pkg + ".Version=" + stampedVersion, pkg + ".Commit=" + stampedCommit}
		if strings.Join(stamped, " ") != strings.Join(want, " ") {
			t.Errorf(".goreleaser.yml build %q stamps %v, want exactly %v", b.ID, stamped, want)
		}
		flags[b.Main] = joined
	}
	for _, main := range []string{".", "./agent"} {
		if _, ok := flags[main]; !ok {
			t.Fatalf(".goreleaser.yml has no build of %s", main)
		}
	}
	return flags
}

// build builds a main package of the module with ldflags into dir/name.
func build(t *testing.T, dir, name, main, ldflags string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, main)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", main, err, b)
	}
	return out
}

// TestReleaseBuildsReportTheStampedVersion builds the agent and the orchestrator with the release
// flags and asks them their version; the provider binary is checked to hold the variables the
// flags set (it reports its version only to Terraform, in its user agents).
func TestReleaseBuildsReportTheStampedVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three binaries (about a minute): skipped under -short (make check); make test runs it")
	}
	flags := releaseLDFlags(t)
	dir := t.TempDir()

	agent := build(t, dir, "outpost-agent", "./agent", flags["./agent"])
	out, err := exec.CommandContext(t.Context(), agent, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("outpost-agent version: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "outpost-agent "+stampedVersion; got != want {
		t.Errorf("outpost-agent version says %q, want %q", got, want)
	}

	// The orchestrator is not in the release yet; it reads the same variables.
	orch := build(t, dir, "outpost-orchestrator", "./cmd/outpost-orchestrator", flags["./agent"])
	out, err = exec.CommandContext(t.Context(), orch, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("outpost-orchestrator --version: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "outpost-orchestrator "+stampedVersion+" (commit "+stampedCommit[:12]+")"; got != want {
		t.Errorf("outpost-orchestrator --version says %q, want %q", got, want)
	}

	// -s strips the symbol table that would show the variables; build the provider with the
	// release's -X flags only.
	xonly := strings.ReplaceAll(flags["."], "-s -w", "")
	provider := build(t, dir, "terraform-provider-outpost", ".", xonly)
	nm, err := exec.CommandContext(t.Context(), "go", "tool", "nm", provider).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool nm: %v\n%s", err, nm)
	}
	for _, sym := range []string{pkg + ".Version", pkg + ".Commit"} {
		if !strings.Contains(string(nm), " "+sym+"\n") {
			t.Errorf("the provider binary has no variable %s for -X to set", sym)
		}
	}
}

// TestDefaults: a build without -X (this test binary) has a version, never an empty one.
func TestDefaults(t *testing.T) {
	if version.Version == "" {
		t.Fatal("Version is empty without -X; want \"dev\" or the module version")
	}
	if version.Commit == "" && version.String() != version.Version {
		t.Errorf("String() = %q without a commit, want %q", version.String(), version.Version)
	}
	if version.Commit != "" && !strings.HasPrefix(version.String(), version.Version+" (commit ") {
		t.Errorf("String() = %q, want the version and the commit", version.String())
	}
}
