package cli_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/cli"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
)

// TestScheduleCommands: `outpost schedule create` packs a directory into a schedule that the
// orchestrator fires (a per-second cron, swept every 200 ms); the check's drift report shows in
// `schedule list`, `schedule get` (with the summary by address) and `state list`; delete removes
// the schedule; bad flags are usage errors.
func TestScheduleCommands(t *testing.T) {
	h := configured(t)
	ag := clienttest.Register(t, h.admin(), h.inst.URL, "eu-1")
	h.write("infra/main.tf", `resource "terraform_data" "x" {}`)
	dir := h.dir + "/infra"
	h.expect(cli.ExitUsage, []string{"schedule", "create", "web", dir, "--runner", "eu-1", "--state-key", "apps/web"}, "--state-key and --cron are required")
	h.expect(cli.ExitError, []string{"schedule", "create", "web", dir, "--runner", "eu-1", "--state-key", "apps/web", "--cron", "nightly"}, "cron", "is not a cron expression")
	h.expect(cli.ExitOK, []string{"schedule", "create", "web", dir, "--runner", "eu-1", "--state-key", "apps/web", "--cron", "* * * * * *"},
		"schedule web created in org acme", "Packed")
	h.expect(cli.ExitOK, []string{"schedule", "list"}, "web", "eu-1", "apps/web", "* * * * * *")

	var sc api.Schedule
	deadline := time.Now().Add(30 * time.Second)
	for sc.LastDeploymentID == "" {
		r := h.must("schedule", "get", "web", "-o", "json")
		if err := json.Unmarshal([]byte(r.stdout), &sc); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the schedule did not fire within 30 s: %+v", sc)
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.expect(cli.ExitOK, []string{"deployment", "get", sc.LastDeploymentID}, "Drift check:", "of schedule web")
	run := ag.Start(t, sc.LastDeploymentID)
	run.Drift(t, api.DriftReport{Drifted: true, Summary: &api.PlanSummary{Counts: api.PlanCounts{Create: 1},
		ResourceChanges: []api.ResourceChange{{Address: "terraform_data.x", Action: api.PlanCreate}},
		Drift:           []api.ResourceChange{{Address: "terraform_data.x", Action: api.PlanDelete}}}})
	run.Finish(t, api.StatusSucceeded, 0)
	h.expect(cli.ExitOK, []string{"schedule", "get", "web"}, "DRIFTED: 1 changed outside, 1 to change", "CHANGED OUTSIDE", "terraform_data.x", "AN APPLY WOULD", "create")
	h.expect(cli.ExitOK, []string{"state", "list", "eu-1-states"}, "apps/web", "DRIFT", "DRIFTED")

	h.expect(cli.ExitOK, []string{"schedule", "delete", "web"}, "schedule web deleted")
	h.expect(cli.ExitError, []string{"schedule", "get", "web"}, "schedule web does not exist")
	if _, err := h.admin().GetSchedule(context.Background(), "web"); err == nil {
		t.Fatal("the schedule is still there")
	}
}
