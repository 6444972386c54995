package provider

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// scheduleEnv is an orchestrator with the runner "eu-1" and its state storage "eu-1-states", and
// an agent of that runner: all a schedule needs, so its tests run without a cluster (and without
// TF_ACC).
type scheduleEnv struct {
	t     *testing.T
	orch  *orchestratortest.Instance
	admin *client.AdminClient
	agent *clienttest.Agent
}

func newScheduleEnv(t *testing.T) *scheduleEnv {
	t.Helper()
	orch := orchestratortest.Start(t)
	admin, err := client.NewAdminClient(orch.URL, "acme", orch.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	return &scheduleEnv{t: t, orch: orch, admin: admin, agent: clienttest.Register(t, admin, orch.URL, "eu-1")}
}

// reportDrift waits for the schedule's next check (the orchestrator sweeps every 200 ms), runs
// it as an agent and its job runner would, and reports drift of local_file.f.
func (e *scheduleEnv) reportDrift() {
	e.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := e.admin.GetSchedule(ctx, "web-nightly")
		if err != nil {
			e.t.Fatal(err)
		}
		if s.LastDeploymentID != "" {
			run := e.agent.Start(e.t, s.LastDeploymentID)
			run.Drift(e.t, api.DriftReport{Drifted: true, Summary: &api.PlanSummary{Counts: api.PlanCounts{Create: 1},
				ResourceChanges: []api.ResourceChange{{Address: "local_file.f", Action: api.PlanCreate}}}})
			run.Finish(e.t, api.StatusSucceeded, 0)
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatal("the schedule fired no check within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *scheduleEnv) providerConfig() string {
	return fmt.Sprintf("provider \"outpost\" {\n  api_url = %q\n  org_id  = \"acme\"\n  token   = %q\n}\n", e.orch.URL, e.orch.AdminToken)
}

func testAccScheduleConfig(cron, extra string) string {
	return fmt.Sprintf(`
resource "outpost_schedule" "test" {
  id        = "web-nightly"
  runner_id = "eu-1"
  state_key = "apps/web"
  cron      = %q
  variables = { env = "prod" }
  git {
    url  = "https://git.example.com/acme/infra.git"
    path = "stacks/web"
  }
  %s
}
`, cron, extra)
}

func (e *scheduleEnv) checkSchedule(check func(*api.Schedule) error) resource.TestCheckFunc {
	return func(*terraform.State) error {
		s, err := e.admin.GetSchedule(context.Background(), "web-nightly")
		if err != nil {
			return err
		}
		return check(s)
	}
}

// TestSchedule_lifecycle creates a schedule of drift checks from a git source, imports it,
// changes its cron, on_drift and enabled in place, refuses a bad cron expression at plan time,
// and reads back a check's drift as drifted.
func TestSchedule_lifecycle(t *testing.T) {
	t.Parallel()
	e := newScheduleEnv(t)
	addr := "outpost_schedule.test"
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: func(*terraform.State) error {
			list, err := e.admin.ListSchedules(context.Background())
			if err != nil {
				return err
			}
			if len(list) != 0 {
				return fmt.Errorf("schedules left after destroy: %+v", list)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config:      e.providerConfig() + testAccScheduleConfig("at three", ""),
				ExpectError: regexp.MustCompile(`is not a cron expression`),
			},
			{
				Config: e.providerConfig() + testAccScheduleConfig("0 3 * * *", ""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("on_drift"), knownvalue.StringExact("none")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("enabled"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("state_storage_id"), knownvalue.StringExact("eu-1-states")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("next_fire_at"), knownvalue.StringRegexp(regexp.MustCompile(`T03:00:00Z$`))),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("drifted"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("last_checked_at"), knownvalue.Null()),
				},
				Check: e.checkSchedule(func(s *api.Schedule) error {
					if s.Source.Git == nil || s.Source.Git.Path != "stacks/web" || string(s.Variables["env"]) != `"prod"` || s.StateKey != "apps/web" {
						return fmt.Errorf("stored %+v", s)
					}
					return nil
				}),
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{ResourceName: addr, ImportState: true, ImportStateVerify: true},
			{
				Config: e.providerConfig() + testAccScheduleConfig("@hourly", `on_drift = "queue_apply"
  enabled  = false`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: e.checkSchedule(func(s *api.Schedule) error {
					if s.Cron != "@hourly" || s.IsEnabled() || s.OnDrift != api.OnDriftQueueApply {
						return fmt.Errorf("after the update %+v", s)
					}
					return nil
				}),
			},
			// Every second: a check fires; its drift shows in drifted and last_checked_at, and
			// changes no plan.
			{Config: e.providerConfig() + testAccScheduleConfig("* * * * * *", "")},
			{
				PreConfig:        e.reportDrift,
				Config:           e.providerConfig() + testAccScheduleConfig("* * * * * *", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("drifted"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("last_checked_at"), knownvalue.NotNull()),
				},
			},
		},
	})
}
