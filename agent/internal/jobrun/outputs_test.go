package jobrun

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// An apply with more outputs than a deployment keeps (1,100 small ones, one of 1.4 MiB, one
// named with a non-ASCII letter, as Terraform allows) succeeds: the apply has changed the
// infrastructure by the time the outputs are read, so what does not fit is left out, named in
// the log and counted on the deployment, never a reason to fail it. Before, the upload was
// refused (more than 1,000 outputs, a body over 1 MiB) and the deployment failed with exit code 3.
func TestOutputsBeyondTheCapDoNotFailTheApply(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real terraform")
	}
	path := cliUnderTest()["terraform"]
	if path == "" {
		t.Skip("terraform is not installed")
	}
	var cfg strings.Builder
	cfg.WriteString(`output "a_big" { value = format("%01400000d", 0) }
output "größe" { value = 1 }
`)
	for i := range 1100 {
		fmt.Fprintf(&cfg, "output \"o%04d\" { value = %d }\n", i, i)
	}
	h := newHarness(t, path)
	r := h.runJob(h.deploy(api.OperationApply, inlineSource(t, map[string]string{"main.tf": cfg.String()}), nil, "many-outputs"), runOptions{})
	if r.Code != 0 || r.Status != api.StatusSucceeded {
		t.Fatalf("apply with 1,102 outputs exited %d (status %s):\n%s", r.Code, r.Status, tail(r.Log, 3000))
	}
	if _, ok := r.Outputs["größe"]; len(r.Outputs) != api.MaxOutputs || !ok {
		t.Errorf("%d outputs stored (größe among them: %v), want %d", len(r.Outputs), ok, api.MaxOutputs)
	}
	for _, gone := range []string{"a_big", "o0999", "o1099"} {
		if _, ok := r.Outputs[gone]; ok {
			t.Errorf("output %s stored, want it left out", gone)
		}
	}
	d, err := h.admin.GetDeployment(context.Background(), r.DeploymentID)
	if err != nil {
		t.Fatal(err)
	}
	if d.OutputsOmitted != 102 {
		t.Errorf("outputs_omitted %d, want 102 (a_big and o0999 … o1099)", d.OutputsOmitted)
	}
	if !strings.Contains(r.Log, "==> warning: 102 outputs left out") || !strings.Contains(r.Log, "a_big, o0999, o1000") ||
		!strings.Contains(r.Log, "and 82 more") || !strings.Contains(r.Log, "uploaded 1000 outputs") {
		t.Errorf("the log does not say what was left out:\n%s", tail(r.Log, 3000))
	}
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
