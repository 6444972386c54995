package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// TestSavedPlanReview: the deployment page of a save_plan plan shows its summary (actions,
// addresses, changing attribute names, outputs) with Approve and Discard; approving takes the
// session's CSRF token, is recorded with the signed-in token and shown in the timeline; then the
// page offers Apply, which queues the apply of the plan and shows it applying that plan.
func TestSavedPlanReview(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	d, err := f.acme.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan, StateKey: "apps/web", SavePlan: true,
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": ""})}}})
	if err != nil {
		t.Fatal(err)
	}
	run := f.inst.NewAgent(t, "acme", "r1", f.key, "v-test").Claim(ctx, d.ID)
	if err := run.Job.PutPlanSummary(ctx, api.PlanSummary{Lineage: "L", Serial: 3, Counts: api.PlanCounts{Update: 1},
		ResourceChanges: []api.ResourceChange{{Address: `aws_instance.web["<b>"]`, Action: api.PlanUpdate, Attributes: []string{"instance_type"}}},
		OutputChanges:   []api.OutputChange{{Name: "db_password", Action: api.PlanUpdate, Sensitive: true}}}); err != nil {
		t.Fatal(err)
	}
	run.Finish(ctx, api.StatusSucceeded, nil)

	b := signIn(t, f.inst.URL, f.acmeToken, "")
	page := "/orgs/acme/deployments/" + d.ID
	_, body := b.get(page)
	for _, want := range []string{`id="plan-changes"`, `aws_instance.web[&#34;&lt;b&gt;&#34;]`, "instance_type", "db_password</code> (sensitive)", `id="approve"`, `id="discard"`, "1 to update"} {
		if !strings.Contains(body, want) {
			t.Fatalf("the plan deployment's page lacks %q:\n%s", want, body)
		}
	}
	if resp := b.post(page+"/plan/approve", url.Values{"csrf": {"forged"}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("approve with a forged CSRF token answered %d, want 403", resp.StatusCode)
	}
	if resp := b.post(page+"/plan/approve", url.Values{"csrf": {b.csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("approve answered %d: %s", resp.StatusCode, resp.Body)
	}
	p, err := f.acme.GetPlan(ctx, d.ID)
	if err != nil || p.Status != api.PlanApproved || !strings.Contains(p.ApprovedBy, "console: org acme token") {
		t.Fatalf("after the console's approve: %+v, %v", p, err)
	}
	_, body = b.get(page)
	if !strings.Contains(body, "plan approved (by console: org acme token") || !strings.Contains(body, `id="apply"`) || strings.Contains(body, `id="approve"`) {
		t.Fatalf("the approved plan's page:\n%s", body)
	}
	resp := b.post(page+"/plan/apply", url.Values{"csrf": {b.csrf}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("apply answered %d: %s", resp.StatusCode, resp.Body)
	}
	_, body = b.get(resp.Header.Get("Location"))
	if !strings.Contains(body, `id="plan-of"`) || !strings.Contains(body, d.ID) {
		t.Fatalf("the apply's page does not say which plan it applies:\n%s", body)
	}
}
