package provider

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// scheduleEnv is an orchestrator with the state storage "states" and the runner "eu-1": all a
// schedule needs, so its tests run without a cluster (and without TF_ACC).
type scheduleEnv struct {
	t     *testing.T
	orch  *orchestratortest.Instance
	admin *client.AdminClient
}

func newScheduleEnv(t *testing.T) *scheduleEnv {
	t.Helper()
	orch := orchestratortest.Start(t)
	admin, err := client.NewAdminClient(orch.URL, "acme", orch.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	e := &scheduleEnv{t: t, orch: orch, admin: admin}
	pub, _, err := keys.Generate()
	if err != nil {
		e.t.Fatal(err)
	}
	pemStr, _ := keys.EncodePublicPEM(pub)
	ctx := context.Background()
	if _, err := e.admin.CreateStateStorage(ctx, api.StateStorageInput{ID: "states", Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: "outpost-state"}}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.admin.CreateRunner(ctx, api.RunnerInput{ID: "eu-1", PublicKeys: []string{pemStr}, StateStorageID: "states",
		Job: api.RunnerJob{Namespace: "outpost-jobs", ServiceAccount: "outpost-job"}}); err != nil {
		e.t.Fatal(err)
	}
	return e
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
// changes its cron, on_drift and enabled in place, and refuses a bad cron expression at plan time.
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
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("state_storage_id"), knownvalue.StringExact("states")),
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
		},
	})
}
