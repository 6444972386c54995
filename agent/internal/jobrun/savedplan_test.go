package jobrun

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// savedConfig declares a sensitive variable that goes into a resource.
const savedConfig = `
variable "name" {
  type = string
}

variable "token" {
  type      = string
  sensitive = true
}

resource "terraform_data" "greeting" {
  input = "hello, ${var.name}"
}

resource "terraform_data" "token" {
  input = var.token
}

output "greeting" {
  value = terraform_data.greeting.output
}
`

// TestSavedPlanWithRealCLIs: with Terraform and OpenTofu, a save_plan plan from a git source
// keeps its plan file with the state backend and uploads a summary of it (no value of the
// sensitive variable in it or in the log); the branch then moves on (another resource, another
// greeting); the apply of the approved plan lays out the new commit but applies exactly the plan
// (apply <planfile>, no variables), deletes the plan file, and the state holds what was planned.
func TestSavedPlanWithRealCLIs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real terraform and tofu")
	}
	for _, name := range []string{"terraform", "tofu"} {
		path := cliUnderTest()[name]
		t.Run(name, func(t *testing.T) {
			if path == "" {
				t.Skip(name + " is not installed (OUTPOST_TOFU names OpenTofu)")
			}
			savedPlan(t, name, path)
		})
	}
}

func savedPlan(t *testing.T, name, path string) {
	h := newHarness(t, path)
	ctx := context.Background()
	const key = "reviewed"
	const token = "tok-4f9a1c7e2b8d6051"
	repo := gitConfigRepo(t, savedConfig)
	vars, _ := json.Marshal(map[string]string{"name": "world", "token": token})
	var in api.DeploymentInput
	in.Variables = map[string]json.RawMessage{}
	_ = json.Unmarshal(vars, &in.Variables)
	d, err := h.admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: testRunner, Operation: api.OperationPlan, StateKey: key, SavePlan: true,
		Source: api.Source{Git: &api.GitSource{URL: repo, Ref: "main", Path: "stack"}}, Variables: in.Variables})
	if err != nil {
		t.Fatal(err)
	}
	planned := h.runJob(d, runOptions{})
	if planned.Code != 0 || !strings.Contains(planned.Log, "-out=") || !strings.Contains(planned.Log, "==> plan saved in the cluster") {
		t.Fatalf("%s plan exited %d:\n%s", name, planned.Code, planned.Log)
	}
	if len(h.state.plan(key)) == 0 {
		t.Fatal("no plan file was kept with the state backend")
	}
	p, err := h.admin.GetPlan(ctx, d.ID)
	if err != nil || p.Summary == nil || p.Summary.Counts.Create != 2 || len(p.Summary.OutputChanges) != 1 {
		t.Fatalf("saved plan: %+v, %v", p, err)
	}
	if b, _ := json.Marshal(p); strings.Contains(string(b), token) || strings.Contains(planned.Log, token) {
		t.Fatalf("the sensitive variable's value left the job runner (summary or log)")
	}

	// The branch moves on after the plan.
	dir := strings.TrimPrefix(repo, "file://")
	if err := os.WriteFile(filepath.Join(dir, "stack", "main.tf"), []byte(strings.ReplaceAll(savedConfig, "hello, ", "goodbye, ")+`
resource "terraform_data" "extra" {
  input = "added after the plan"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false", "commit", "-qam", "after the plan")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git commit: %v\n%s", err, out)
	}

	if _, err := h.admin.ApprovePlan(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	a, err := h.admin.ApplyPlan(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	applied := h.runJob(a, runOptions{})
	if applied.Code != 0 || !strings.Contains(applied.Log, "==> applied the saved plan of deployment "+d.ID) ||
		!strings.Contains(applied.Log, name+" apply -input=false -no-color -lock-timeout=60s ") {
		t.Fatalf("%s apply of the saved plan exited %d:\n%s", name, applied.Code, applied.Log)
	}
	if strings.Contains(applied.Log, "terraform_data.extra") || string(applied.Outputs["greeting"].Value) != `"hello, world"` || resourceCount(h.state.state(key)) != 2 {
		t.Fatalf("the apply did not apply exactly the plan: outputs %v, state %v\n%s", applied.Outputs, h.state.state(key), applied.Log)
	}
	if strings.Contains(applied.Log, token) {
		t.Fatal("the sensitive variable's value is in the apply's log")
	}
	if len(h.state.plan(key)) != 0 {
		t.Error("the applied plan file was not deleted")
	}
}
