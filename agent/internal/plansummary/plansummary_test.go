package plansummary

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

const before = `
variable "secret" {
  type      = string
  sensitive = true
}
resource "terraform_data" "a" { input = "value-one" }
resource "terraform_data" "b" { input = var.secret }
resource "terraform_data" "d" {
  input            = "kept"
  triggers_replace = "trigger-one"
}
output "o" { value = terraform_data.a.output }
output "s" {
  value     = var.secret
  sensitive = true
}
`

const after = `
variable "secret" {
  type      = string
  sensitive = true
}
resource "terraform_data" "a" { input = "value-two" }
resource "terraform_data" "c" { input = "new-one" }
resource "terraform_data" "d" {
  input            = "kept"
  triggers_replace = "trigger-two"
}
output "o" { value = terraform_data.a.output }
output "n" { value = "new-output" }
output "s" {
  value     = var.secret
  sensitive = true
}
`

// clis are the real CLIs the test runs: terraform where the tests find it, tofu from OUTPOST_TOFU
// (set by make test).
func clis() map[string]string {
	out := map[string]string{"terraform": "/usr/local/bin/terraform", "tofu": os.Getenv("OUTPOST_TOFU")}
	if _, err := os.Stat(out["terraform"]); err != nil {
		out["terraform"], _ = exec.LookPath("terraform")
	}
	return out
}

// TestSummaryOfARealPlan plans a change of every kind with the real CLIs and checks the summary
// against the CLI's own `show -json` of the same plan: the same resources with the same actions,
// the attributes that change, the replacement's cause, the outputs, the state the plan was made
// against, and no value anywhere in the summary.
func TestSummaryOfARealPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real terraform and tofu")
	}
	const oldSecret, newSecret = "hunter2-old-secret", "hunter2-new-secret"
	for name, path := range clis() {
		t.Run(name, func(t *testing.T) {
			if path == "" {
				t.Skip("the CLI is not available (OUTPOST_TOFU unset or terraform not installed)")
			}
			dir := t.TempDir()
			run := func(args ...string) []byte {
				t.Helper()
				cmd := exec.CommandContext(t.Context(), path, args...)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
				}
				return out
			}
			write := func(body string) {
				t.Helper()
				if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			write(before)
			run("init", "-input=false", "-no-color")
			run("apply", "-auto-approve", "-input=false", "-no-color", "-var", "secret="+oldSecret)
			write(after)
			planFile := filepath.Join(dir, "saved.tfplan")
			run("plan", "-input=false", "-no-color", "-var", "secret="+newSecret, "-out="+planFile)
			showJSON := run("show", "-json", planFile)

			s, err := FromPlan(bytes.NewReader(showJSON), planFile)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]api.ResourceChange{}
			for _, c := range s.ResourceChanges {
				got[c.Address] = c
			}
			want := map[string]api.PlanAction{
				"terraform_data.a": api.PlanUpdate, "terraform_data.b": api.PlanDelete,
				"terraform_data.c": api.PlanCreate, "terraform_data.d": api.PlanReplace,
			}
			if len(got) != len(want) {
				t.Errorf("summary lists %d resources, want %d: %+v", len(got), len(want), s.ResourceChanges)
			}
			for addr, action := range want {
				if got[addr].Action != action {
					t.Errorf("%s: action %q, want %q", addr, got[addr].Action, action)
				}
			}
			// The same resources and actions as the CLI's own JSON says, read independently.
			var raw struct {
				ResourceChanges []struct {
					Address string `json:"address"`
					Change  struct {
						Actions []string `json:"actions"`
					} `json:"change"`
				} `json:"resource_changes"`
			}
			if err := json.Unmarshal(showJSON, &raw); err != nil {
				t.Fatal(err)
			}
			for _, rc := range raw.ResourceChanges {
				if slices.Equal(rc.Change.Actions, []string{"no-op"}) {
					continue
				}
				if _, ok := got[rc.Address]; !ok {
					t.Errorf("show -json changes %s (%v); the summary does not list it", rc.Address, rc.Change.Actions)
				}
			}
			if a := got["terraform_data.a"].Attributes; !slices.Contains(a, "input") || !slices.Contains(a, "output") || slices.Contains(a, "id") {
				t.Errorf("terraform_data.a: attributes %v, want input and output (id stays)", a)
			}
			if r := got["terraform_data.d"].ReplaceBecause; !slices.Equal(r, []string{"triggers_replace"}) {
				t.Errorf("terraform_data.d: replaced because of %v, want [triggers_replace]", r)
			}
			if s.Counts != (api.PlanCounts{Create: 1, Update: 1, Replace: 1, Delete: 1}) {
				t.Errorf("counts %+v", s.Counts)
			}
			outs := map[string]api.OutputChange{}
			for _, o := range s.OutputChanges {
				outs[o.Name] = o
			}
			if outs["n"].Action != api.PlanCreate || outs["o"].Action != api.PlanUpdate || !outs["s"].Sensitive {
				t.Errorf("output changes %+v", s.OutputChanges)
			}

			var state struct {
				Lineage string `json:"lineage"`
				Serial  int64  `json:"serial"`
			}
			b, err := os.ReadFile(filepath.Join(dir, "terraform.tfstate"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &state); err != nil {
				t.Fatal(err)
			}
			if state.Lineage == "" || s.Lineage != state.Lineage || s.Serial != state.Serial {
				t.Errorf("planned against lineage %q serial %d; the state is lineage %q serial %d", s.Lineage, s.Serial, state.Lineage, state.Serial)
			}

			enc, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			for _, value := range []string{oldSecret, newSecret, "value-one", "value-two", "new-one", "trigger-", "new-output", "kept"} {
				if bytes.Contains(enc, []byte(value)) {
					t.Errorf("the summary holds the value %q: %s", value, enc)
				}
			}
			if !bytes.Contains(showJSON, []byte("value-two")) {
				t.Error("show -json lacks the new value, so the check above proves nothing")
			}
		})
	}
}

func TestNotAPlan(t *testing.T) {
	if _, err := FromPlan(strings.NewReader(`{"version":4,"serial":3,"lineage":"x"}`), ""); !errors.Is(err, ErrNotAPlan) {
		t.Errorf("a state's JSON: err %v, want ErrNotAPlan", err)
	}
	if _, err := FromPlan(strings.NewReader(`{"format_version":`), ""); err == nil {
		t.Error("cut-off JSON was taken")
	}
}

func TestChangedAttributes(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		before, after, unknow string
		want                  []string
	}{
		{"update", `{"id":"1","a":"x","b":[1,2]}`, `{"id":"1","a":"y","b":[1,2]}`, `{}`, []string{"a"}},
		{"create", `null`, `{"a":"x","b":null}`, `{"id":true}`, []string{"a", "id"}},
		{"removed attribute", `{"a":"x","b":"y"}`, `{"a":"x"}`, `{}`, []string{"b"}},
		{"nested unknown", `{"a":{"k":1}}`, `{"a":{"k":1}}`, `{"a":{"k":true}}`, []string{"a"}},
		{"equal by meaning", `{"a":{"x":1,"y":2}}`, `{"a":{"y":2, "x":1}}`, `{"a":{"x":false}}`, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := changedAttributes(json.RawMessage(tc.before), json.RawMessage(tc.after), json.RawMessage(tc.unknow))
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReplaceBecauseKeepsOnlyTopLevelNames(t *testing.T) {
	got := replaceBecause([]json.RawMessage{json.RawMessage(`["tags","secret-key-name"]`), json.RawMessage(`["ami"]`), json.RawMessage(`["tags","other"]`), json.RawMessage(`[0]`)})
	if !slices.Equal(got, []string{"tags", "ami"}) {
		t.Errorf("got %v", got)
	}
}
