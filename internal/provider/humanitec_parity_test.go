package provider

import (
	"fmt"
	"os"
	"path/filepath"
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

// TestAccHumanitecSelfHostingSetup is what Humanitec's self-hosting setup writes, at the level of
// the resources: the key pair as the two files openssl makes (the private one written into a
// Secret by the provider, none existing before), the runner registered with the public file, and
// their self-hosting pod template (their runner image on main, an image pull Secret, a version
// label). It must apply, the runner's key must be the key pair's, and a second plan be empty.
func TestAccHumanitecSelfHostingSetup(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	pub, priv := testKeyPEMs(t)
	dir := t.TempDir()
	for name, body := range map[string]string{"runner_private_key.pem": priv, "runner_public_key.pem": pub} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const template = `{"metadata":{"labels":{"app.kubernetes.io/name":"humanitec-runner","app.kubernetes.io/version":"vX.Y.Z"}},` +
		`"spec":{"containers":[{"image":"myregistry.example.com/humanitec/humanitec-runner:vX.Y.Z","imagePullPolicy":"IfNotPresent","name":"main"}],` +
		`"imagePullSecrets":[{"name":"regcred"}]}}`
	config := e.providerConfig() + fmt.Sprintf(`
locals {
  kubernetes_agent_runner_image_repository = "myregistry.example.com/humanitec/humanitec-runner"
  kubernetes_agent_runner_image_tag        = "vX.Y.Z"
}

resource "outpost_key_pair" "runner" {
  private_key_file = "%[1]s/runner_private_key.pem"
  kubernetes_secret {
    namespace = %[2]q
    name      = "humanitec-kubernetes-agent-runner-private-key"
  }
}

resource "outpost_state_storage" "humanitec" {
  id   = "self-hosted-states"
  type = "kubernetes"
  kubernetes {
    namespace = "humanitec-kubernetes-agent-runner-job-ns"
  }
}

resource "outpost_kubernetes_agent_runner" "my_runner" {
  id               = "self-hosted"
  description      = "runner for all the envs"
  public_keys      = [file("%[1]s/runner_public_key.pem")]
  state_storage_id = outpost_state_storage.humanitec.id
  job {
    namespace       = "humanitec-kubernetes-agent-runner-job-ns"
    service_account = "humanitec-kubernetes-agent-runner-job"
    pod_template = jsonencode({
      metadata = {
        labels = {
          "app.kubernetes.io/name"    = "humanitec-runner"
          "app.kubernetes.io/version" = local.kubernetes_agent_runner_image_tag
        }
      }
      spec = {
        containers = [
          {
            name            = "main"
            image           = "${local.kubernetes_agent_runner_image_repository}:${local.kubernetes_agent_runner_image_tag}"
            imagePullPolicy = "IfNotPresent"
          }
        ]
        imagePullSecrets = [
          {
            name = "regcred"
          }
        ]
      }
    })
  }
}
`, dir, ns)
	runner := "outpost_kubernetes_agent_runner.my_runner"
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             resource.ComposeTestCheckFunc(e.checkRunnerGone("self-hosted"), e.checkSecretGone(ns, "humanitec-kubernetes-agent-runner-private-key")),
		Steps: []resource.TestStep{{
			Config: config,
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectKnownValue("outpost_key_pair.runner", tfjsonpath.New("public_key_pem"), knownvalue.StringExact(pub)),
				},
				PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
			},
			ConfigStateChecks: []statecheck.StateCheck{
				noPrivateKeyInState{},
				statecheck.ExpectKnownValue(runner, tfjsonpath.New("job").AtMapKey("pod_template"), knownvalue.StringExact(template)),
			},
			Check: e.checkRunner("self-hosted", func(r *api.Runner) error {
				if len(r.PublicKeys) != 1 || r.PublicKeys[0] != pub || r.Job.PodTemplate != template {
					return fmt.Errorf("registered %+v", r)
				}
				return nil
			}),
		}},
	})
}
