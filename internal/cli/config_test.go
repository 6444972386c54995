package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/cli"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// TestConfigProfilesAndTokenSources sets up profiles with `outpost config`, checks the file
// (0600, the token never printed), and that flags, the environment and profiles take effect in
// that order, with a 401 naming the token source that was refused.
func TestConfigProfilesAndTokenSources(t *testing.T) {
	h := newHarness(t)
	path := h.getenv("OUTPOST_CONFIG")

	h.expect(cli.ExitError, []string{"runner", "list"}, "not configured", "outpost config set api_url", "OUTPOST_TOKEN")
	h.expect(0, []string{"config", "view"}, "No profiles yet")
	h.must("config", "set", "api_url", h.inst.URL)
	h.must("config", "set", "org", "acme")
	r := h.run(h.inst.AdminToken+"\n", "config", "set", "token")
	h.check(r, 0, []string{"config set token"}, `Saved profile "default"`)
	h.expect(cli.ExitUsage, []string{"config", "set", "api_url", "outpost.example.com"}, "must be an absolute http(s) URL")
	h.expect(cli.ExitUsage, []string{"config", "set", "colour", "blue"}, `unknown key "colour"`, "api_url, org, token")
	h.expect(cli.ExitUsage, []string{"config", "set", "org", "Not_A_Label"}, "org")

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("config file mode %v, want 0600", fi.Mode().Perm())
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Errorf("config directory mode %v, want 0700", di.Mode().Perm())
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "current_profile: default") || !strings.Contains(string(b), "token: "+h.inst.AdminToken) {
		t.Errorf("config file:\n%s", b)
	}

	view := h.must("config", "view")
	for _, want := range []string{"default", h.inst.URL, "acme", "stored (hidden)", `from profile "default" of ` + path} {
		if !strings.Contains(view.stdout, want) {
			t.Errorf("config view lacks %q:\n%s", want, view.stdout)
		}
	}
	asJSON := h.must("config", "view", "-o", "json")
	var v struct {
		CurrentProfile string `json:"current_profile"`
		Effective      struct {
			Token struct{ Value, From string } `json:"token"`
		} `json:"effective"`
	}
	if err := json.Unmarshal([]byte(asJSON.stdout), &v); err != nil || v.CurrentProfile != "default" || v.Effective.Token.Value != "(hidden)" {
		t.Errorf("config view -o json: %+v, %v\n%s", v, err, asJSON.stdout)
	}
	if _, err := h.admin().CreateStateStorage(t.Context(), api.StateStorageInput{ID: "s", Type: api.StateStorageKubernetes,
		Kubernetes: &api.KubernetesStateSpec{Namespace: "x"}}); err != nil {
		t.Fatal(err)
	}
	h.must("runner", "list")

	// The environment wins over the profile, and a refused token names its source.
	h.setenv("OUTPOST_TOKEN", "not-the-token")
	h.expect(cli.ExitError, []string{"runner", "list"}, "refused the token from OUTPOST_TOKEN", "outpost config set token")
	h.setenv("OUTPOST_TOKEN", "")
	tokenFile := h.write("token", h.inst.AdminToken+"\n")
	h.setenv("OUTPOST_TOKEN_FILE", tokenFile)
	h.must("runner", "list")
	h.setenv("OUTPOST_TOKEN_FILE", "")

	// A second profile with a token file; --profile, OUTPOST_PROFILE and `config use` pick it.
	wrong := h.write("wrong-token", "wrong\n")
	h.must("config", "set", "--profile", "other", "api_url", h.inst.URL)
	h.must("config", "set", "--profile", "other", "org", "acme")
	h.must("config", "set", "--profile", "other", "token_file", wrong)
	h.expect(cli.ExitError, []string{"runner", "list", "--profile", "other"}, "refused the token from token_file "+wrong+` of profile "other"`)
	h.setenv("OUTPOST_PROFILE", "other")
	h.expect(cli.ExitError, []string{"runner", "list"}, "token_file "+wrong)
	h.setenv("OUTPOST_PROFILE", "")
	h.must("config", "use", "other")
	h.expect(cli.ExitError, []string{"runner", "list"}, "token_file "+wrong)
	h.expect(0, []string{"runner", "list", "--profile", "default"})
	h.expect(cli.ExitError, []string{"config", "use", "nope"}, `profile "nope" is not in`, "default, other")
	h.expect(cli.ExitError, []string{"runner", "list", "--profile", "nope"}, `profile "nope" is not in`)
	h.must("config", "use", "default")
	h.must("config", "delete", "other")
	h.must("config", "unset", "token")
	h.expect(cli.ExitError, []string{"runner", "list"}, "no token")
	r = h.run(h.inst.AdminToken, "config", "set", "token", "-")
	h.check(r, 0, []string{"config set token -"})

	// Flags win over everything; a wrong URL says where it came from.
	h.expect(cli.ExitError, []string{"runner", "list", "--api-url", "http://127.0.0.1:1"}, "cannot reach the orchestrator at http://127.0.0.1:1 (URL from flag --api-url)")
	h.expect(cli.ExitUsage, []string{"runner", "list", "-o", "xml"}, `-o "xml" is not an output format`)

	for _, r := range []result{view, asJSON} {
		if strings.Contains(r.stdout+r.stderr, h.inst.AdminToken) {
			t.Fatal("config view printed the token")
		}
	}
}

// TestTokenFilesReadableByOthersAreNamed (N11): a token read from a config file or token file
// that other users can read is used, with a warning on stderr that says so and how to fix it;
// the same files kept to their owner give no warning.
func TestTokenFilesReadableByOthersAreNamed(t *testing.T) {
	h := newHarness(t)
	path := h.getenv("OUTPOST_CONFIG")
	h.must("config", "set", "api_url", h.inst.URL)
	h.must("config", "set", "org", "acme")
	h.check(h.run(h.inst.AdminToken+"\n", "config", "set", "token"), 0, []string{"config set token"})
	// The organisation exists (a list in one that does not is an error of its own).
	admin, err := client.NewAdminClient(h.inst.URL, "acme", h.inst.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateStateStorage(t.Context(), api.StateStorageInput{ID: "s", Type: api.StateStorageKubernetes,
		Kubernetes: &api.KubernetesStateSpec{Namespace: "states"}}); err != nil {
		t.Fatal(err)
	}
	if r := h.must("runner", "list"); strings.Contains(r.stderr, "Warning") {
		t.Errorf("a 0600 config file gave a warning:\n%s", r)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.must("runner", "list")
	if !strings.Contains(r.stderr, "Warning: the config file, which holds a token, "+path+" can be read by other users (mode 0644)") || !strings.Contains(r.stderr, "chmod 600 "+path) {
		t.Errorf("a world-readable config file with a token:\n%s", r)
	}
	if strings.Count(r.stderr, "Warning") != 1 || strings.Contains(r.stderr, h.inst.AdminToken) {
		t.Errorf("one warning, never the token:\n%s", r)
	}
	tokenFile := h.write("token", h.inst.AdminToken+"\n") // 0644
	h.setenv("OUTPOST_TOKEN_FILE", tokenFile)
	if r := h.must("runner", "list"); !strings.Contains(r.stderr, "the token file "+tokenFile+" can be read by other users") {
		t.Errorf("a world-readable token file:\n%s", r)
	}
	if err := os.Chmod(tokenFile, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := h.must("runner", "list"); strings.Contains(r.stderr, "Warning") {
		t.Errorf("a 0600 token file gave a warning:\n%s", r)
	}
}
