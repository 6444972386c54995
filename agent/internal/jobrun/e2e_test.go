package jobrun

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/sourcearchive/archivetest"
)

// The configurations use only what ships inside both CLIs (terraform_data, locals, variables,
// outputs, preconditions): no provider can be downloaded here.
const (
	goodConfig = `
variable "name" {
  type = string
}

variable "replicas" {
  type    = number
  default = 1
}

resource "terraform_data" "greeting" {
  input = "hello, ${var.name}"
}

resource "terraform_data" "replicas" {
  input = var.replicas
}

output "greeting" {
  value = terraform_data.greeting.output
}

output "doubled" {
  value = [for i in range(terraform_data.replicas.output) : i * 2]
}

output "settings" {
  value = { name = var.name, replicas = var.replicas }
}

output "api_key" {
  value     = sha256("key-${var.name}")
  sensitive = true
}
`
	preconditionConfig = `
variable "replicas" {
  type = number
}

resource "terraform_data" "checked" {
  input = var.replicas
  lifecycle {
    precondition {
      condition     = var.replicas <= 5
      error_message = "replicas must be at most 5, got ${var.replicas}."
    }
  }
}
`
	invalidConfig = `
resource "terraform_data" "broken" {
  input = "never closed"
`
)

// cliUnderTest lists the real CLIs: Terraform at /usr/local/bin/terraform (or on PATH) and
// OpenTofu from $OUTPOST_TOFU (scripts/tools.sh builds it).
func cliUnderTest() map[string]string {
	out := map[string]string{}
	tf := "/usr/local/bin/terraform"
	if _, err := os.Stat(tf); err != nil {
		if p, err := exec.LookPath("terraform"); err == nil {
			tf = p
		} else {
			tf = ""
		}
	}
	out["terraform"] = tf
	out["tofu"] = os.Getenv("OUTPOST_TOFU")
	return out
}

func inlineSource(t *testing.T, files map[string]string) api.Source {
	var entries []archivetest.Entry
	for name, body := range files {
		entries = append(entries, archivetest.Entry{Name: name, Body: body})
	}
	return api.Source{Inline: &api.InlineSource{ArchiveTarGz: archivetest.Make(t, entries...)}}
}

func TestEndToEndWithRealCLIs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real terraform and tofu")
	}
	for _, name := range []string{"terraform", "tofu"} {
		path := cliUnderTest()[name]
		t.Run(name, func(t *testing.T) {
			if path == "" {
				if name == "tofu" {
					t.Skip("OUTPOST_TOFU is not set; build OpenTofu with scripts/tools.sh and export OUTPOST_TOFU=<path to tofu>")
				}
				t.Skip("terraform is not installed")
			}
			endToEnd(t, name, path)
		})
	}
}

func endToEnd(t *testing.T, name, path string) {
	h := newHarness(t, path)
	const key = "team-a/app.prod"
	vars := map[string]any{"name": "world", "replicas": 3}
	src := inlineSource(t, map[string]string{"main.tf": goodConfig, "README.md": "not terraform\n"})

	// apply
	applied := h.runJob(h.deploy(api.OperationApply, src, vars, key), runOptions{})
	t.Logf("%s apply: exit %d in %s, %d log bytes", name, applied.Code, applied.Duration.Round(time.Millisecond), len(applied.Log))
	if applied.Code != 0 || applied.Status != api.StatusSucceeded {
		t.Fatalf("apply exited %d (status %s)\n%s%s", applied.Code, applied.Status, applied.Stdout, applied.Stderr)
	}
	checkLogDelivery(t, applied)
	initAt := strings.Index(applied.Log, "==> "+name+" init -input=false -no-color")
	applyAt := strings.Index(applied.Log, "==> "+name+" apply -auto-approve -input=false -no-color -lock-timeout=60s")
	completeAt := strings.Index(applied.Log, "Apply complete! Resources: 2 added, 0 changed, 0 destroyed.")
	if initAt < 0 || applyAt < initAt || completeAt < applyAt {
		t.Fatalf("log phases out of order (init %d, apply %d, complete %d):\n%s", initAt, applyAt, completeAt, applied.Log)
	}
	sum := sha256.Sum256([]byte("key-world"))
	wantOutputs := map[string]struct {
		value     any
		sensitive bool
	}{
		"greeting": {"hello, world", false},
		"doubled":  {[]any{0.0, 2.0, 4.0}, false},
		"settings": {map[string]any{"name": "world", "replicas": 3.0}, false},
		"api_key":  {hex.EncodeToString(sum[:]), true},
	}
	if len(applied.Outputs) != len(wantOutputs) {
		t.Fatalf("outputs = %v, want %d", applied.Outputs, len(wantOutputs))
	}
	for n, want := range wantOutputs {
		got, ok := applied.Outputs[n]
		var v any
		if ok {
			_ = json.Unmarshal(got.Value, &v)
		}
		if !ok || !reflect.DeepEqual(v, want.value) || got.Sensitive != want.sensitive || len(got.Type) == 0 {
			t.Errorf("output %s = %s (sensitive %v, type %s), want %v (sensitive %v)", n, got.Value, got.Sensitive, got.Type, want.value, want.sensitive)
		}
	}
	if !strings.Contains(applied.Log, "uploaded 4 outputs (1 sensitive)") {
		t.Fatalf("the log does not report the upload:\n%s", applied.Log)
	}
	if strings.Contains(applied.Log, hex.EncodeToString(sum[:])) {
		t.Error("the sensitive output's value appears in the log")
	}
	st := h.state.state(key)
	if resourceCount(st) != 2 {
		t.Fatalf("state after apply: %v", st)
	}
	ops, paths := h.state.history()
	if !containsAll(strings.Join(ops, "\n"), "LOCK "+key, "POST "+key, "UNLOCK "+key) || h.state.locked(key) {
		t.Fatalf("the CLI did not lock, write and unlock the state: %v", ops)
	}
	if !strings.HasSuffix(paths[0], "/v1/states/team-a%2Fapp.prod") {
		t.Fatalf("state key not path-escaped: %s", paths[0])
	}

	// plan of the same configuration from git: nothing to change
	repo := gitConfigRepo(t, goodConfig)
	planned := h.runJob(h.deploy(api.OperationPlan, api.Source{Git: &api.GitSource{URL: repo, Ref: "main", Path: "stack"}}, vars, key), runOptions{})
	if planned.Code != 0 || !strings.Contains(planned.Log, "No changes.") || len(planned.Outputs) != 0 {
		t.Fatalf("plan from git exited %d, outputs %v:\n%s", planned.Code, planned.Outputs, planned.Log)
	}
	checkLogDelivery(t, planned)

	// destroy on the same state key
	destroyed := h.runJob(h.deploy(api.OperationDestroy, src, vars, key), runOptions{})
	t.Logf("%s destroy: exit %d in %s, %d log bytes", name, destroyed.Code, destroyed.Duration.Round(time.Millisecond), len(destroyed.Log))
	if destroyed.Code != 0 || !strings.Contains(destroyed.Log, "Destroy complete! Resources: 2 destroyed.") {
		t.Fatalf("destroy exited %d:\n%s", destroyed.Code, destroyed.Log)
	}
	checkLogDelivery(t, destroyed)
	if len(destroyed.Outputs) != 0 || !strings.Contains(destroyed.Log, "uploaded 0 outputs") {
		t.Fatalf("outputs after destroy = %v, want none", destroyed.Outputs)
	}
	if st := h.state.state(key); st == nil || resourceCount(st) != 0 || h.state.locked(key) {
		t.Fatalf("state after destroy: %v (locked %v)", st, h.state.locked(key))
	}

	// failing configurations: the CLI's exit code and its error in the log
	for _, tc := range []struct {
		what, config, want string
		vars               map[string]any
	}{
		{"failed precondition", preconditionConfig, "replicas must be at most 5, got 9.", map[string]any{"replicas": 9}},
		{"invalid HCL", invalidConfig, "Unclosed configuration block", nil},
	} {
		r := h.runJob(h.deploy(api.OperationApply, inlineSource(t, map[string]string{"main.tf": tc.config}), tc.vars, "broken"), runOptions{})
		if r.Code == 0 || r.Status != api.StatusFailed || !strings.Contains(r.Log, "Error: ") || !strings.Contains(r.Log, tc.want) {
			t.Fatalf("%s: exit %d, status %s, want a failure with %q:\n%s", tc.what, r.Code, r.Status, tc.want, r.Log)
		}
		if !strings.Contains(r.Log, "failed with exit code") {
			t.Fatalf("%s: the job runner does not say the phase failed:\n%s", tc.what, r.Log)
		}
		checkLogDelivery(t, r)
		if h.state.locked("broken") {
			t.Fatalf("%s left the state locked", tc.what)
		}
	}
}

// TestEndToEndInterruptReleasesLock stops a real apply midway, as a Pod deletion would: the
// CLI must be interrupted (not killed), save its state and release the lock.
func TestEndToEndInterruptReleasesLock(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real CLIs")
	}
	for _, name := range []string{"terraform", "tofu"} {
		path := cliUnderTest()[name]
		t.Run(name, func(t *testing.T) {
			if path == "" {
				t.Skip("not available (tofu: set OUTPOST_TOFU)")
			}
			h := newHarness(t, path)
			slow := `
resource "terraform_data" "fast" {
  input = "done"
}

resource "terraform_data" "slow" {
  depends_on = [terraform_data.fast]
  provisioner "local-exec" {
    command = "sleep 60"
  }
}
`
			sigs := make(chan os.Signal, 2)
			r := h.runJob(h.deploy(api.OperationApply, inlineSource(t, map[string]string{"main.tf": slow}), nil, "slow"), runOptions{
				sigs: sigs,
				during: func(h *harness, d *api.Deployment, stdout *clienttest.Buffer) {
					waitFor(t, 60*time.Second, "the provisioner to start", func() bool { return strings.Contains(stdout.String(), "Provisioning with 'local-exec'") })
					sigs <- os.Interrupt
				},
			})
			t.Logf("%s interrupted: exit %d after %s", name, r.Code, r.Duration.Round(time.Millisecond))
			if r.Code == 0 || r.Duration > 45*time.Second {
				t.Fatalf("exit %d after %s, want a failure well before the provisioner's 60 s:\n%s", r.Code, r.Duration, r.Log)
			}
			if !strings.Contains(r.Log, "Interrupt received") || !strings.Contains(r.Log, "==> stopping (received interrupt)") {
				t.Fatalf("the CLI was not interrupted gracefully:\n%s", r.Log)
			}
			checkLogDelivery(t, r)
			if h.state.locked("slow") {
				t.Fatal("the interrupted CLI left the state locked")
			}
			// terraform_data.fast was created before the interrupt and must be in the saved state.
			st := h.state.state("slow")
			if st == nil || !strings.Contains(mustJSON(t, st), `"fast"`) {
				t.Fatalf("state after the interrupt does not hold the resource created before it: %v", st)
			}
		})
	}
}

// resourceCount is the number of resources in a decoded state, -1 when it has none.
func resourceCount(st map[string]any) int {
	list, ok := st["resources"].([]any)
	if !ok {
		return -1
	}
	return len(list)
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// gitConfigRepo makes a git repository holding config in stack/main.tf on branch main.
func gitConfigRepo(t *testing.T, config string) string {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "stack"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stack", "main.tf"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "config"}} {
		cmd := exec.CommandContext(t.Context(), "git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return "file://" + dir
}
