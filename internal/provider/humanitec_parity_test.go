package provider

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Users of the closed agents paste their configuration first. These tests keep what they paste
// working: make test runs them with Terraform and again with OpenTofu.

// TestAccHumanitecRunnerExample is the Humanitec kubernetes-agent runner example as its
// documentation writes it, with the resource renamed, key given as public_keys and the state
// storage configuration moved into its own resource: a pod template that sets only labels, a
// public key in a heredoc. It must plan, apply, and plan empty afterwards.
func TestAccHumanitecRunnerExample(t *testing.T) {
	e := newAccEnv(t)
	pub, _ := testKeyPEMs(t)
	addr := "outpost_kubernetes_agent_runner.my_runner"
	config := e.providerConfig() + fmt.Sprintf(`
resource "outpost_state_storage" "humanitec" {
  id   = "humanitec-states"
  type = "kubernetes"
  kubernetes {
    namespace = "humanitec"
  }
}

resource "outpost_kubernetes_agent_runner" "my_runner" {
  id          = "my-runner"
  description = "runner for all the envs"
  public_keys = [<<EOT
%sEOT
  ]
  state_storage_id = outpost_state_storage.humanitec.id
  job {
    namespace       = "default"
    service_account = "humanitec-runner"
    pod_template = jsonencode({
      metadata = {
        labels = {
          "app.kubernetes.io/name" = "humanitec-runner"
        }
      }
    })
  }
}
`, pub)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkRunnerGone("my-runner"),
		Steps: []resource.TestStep{{
			Config: config,
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("org_id"), knownvalue.StringExact(e.org)),
				},
				PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
			},
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("job").AtMapKey("pod_template"),
					knownvalue.StringExact(`{"metadata":{"labels":{"app.kubernetes.io/name":"humanitec-runner"}}}`)),
			},
			Check: e.checkRunner("my-runner", func(r *api.Runner) error {
				if r.Job.Namespace != "default" || r.Job.ServiceAccount != "humanitec-runner" || r.StateStorageID != "humanitec-states" ||
					r.Job.PodTemplate != `{"metadata":{"labels":{"app.kubernetes.io/name":"humanitec-runner"}}}` {
					return fmt.Errorf("registered %+v", r)
				}
				return nil
			}),
		}},
	})
}
