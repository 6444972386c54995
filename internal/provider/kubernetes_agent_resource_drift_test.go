package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/helm"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// Tests of outpost_kubernetes_agent that change things behind Terraform's back, and of the wait
// for the agent's connection.

// TestAccKubernetesAgent_drift changes the release outside Terraform in every way the resource
// notices; each must show as a planned change, and the apply must put the release back.
func TestAccKubernetesAgent_drift(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	config := e.agentStack(ns, "drift-runner", `  wait_for_connection = false`)
	ctx := context.Background()
	update := resource.ConfigPlanChecks{
		PreApply: []plancheck.PlanCheck{
			plancheck.ExpectResourceAction(agentAddr, plancheck.ResourceActionUpdate),
			plancheck.ExpectUnknownValue(agentAddr, tfjsonpath.New("revision")),
		},
		PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkReleaseGone(ns, defaultReleaseName),
		Steps: []resource.TestStep{
			{Config: config},
			// `helm upgrade` with other values, outside Terraform.
			{
				PreConfig: func() {
					cfg := e.helmConfig(ns)
					rel, err := helm.Get(cfg, defaultReleaseName)
					if err != nil {
						t.Fatal(err)
					}
					vals := rel.Config
					vals["logLevel"] = "warn"
					chrt, err := agentchart.Load()
					if err != nil {
						t.Fatal(err)
					}
					if _, err := helm.Upgrade(ctx, cfg, chrt, vals, helm.InstallOptions{ReleaseName: defaultReleaseName, Namespace: ns, Timeout: time.Minute}); err != nil {
						t.Fatal(err)
					}
				},
				Config:           config,
				ConfigPlanChecks: update,
				Check: e.checkRelease(ns, func(rel *release.Release) error {
					if rel.Config["logLevel"] != defaultLogLevel {
						return fmt.Errorf("logLevel %v after the apply", rel.Config["logLevel"])
					}
					return nil
				}),
			},
			// `kubectl scale` and `kubectl set image` on the live Deployment.
			{
				PreConfig: func() {
					d, err := e.kube().AppsV1().Deployments(ns).Get(ctx, agentchart.Fullname(defaultReleaseName, nil), metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					five := int32(5)
					d.Spec.Replicas = &five
					d.Spec.Template.Spec.Containers[0].Image = "evil.example.com/agent:latest"
					if _, err := e.kube().AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
						t.Fatal(err)
					}
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: append(update.PreApply,
						plancheck.ExpectKnownValue(agentAddr, tfjsonpath.New("drift_detected"), knownvalue.Bool(false))),
					PostApplyPostRefresh: update.PostApplyPostRefresh,
				},
				Check: e.checkAgentDeployment(ns, func(d *appsv1.Deployment) error {
					if *d.Spec.Replicas != defaultReplicas || strings.HasPrefix(d.Spec.Template.Spec.Containers[0].Image, "evil") {
						return fmt.Errorf("the apply did not restore the Deployment: replicas %d, image %s", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image)
					}
					return nil
				}),
			},
			// An interrupted upgrade leaves the release pending-upgrade: Helm refuses to touch it
			// until it is recovered.
			{
				PreConfig: func() {
					cfg := e.helmConfig(ns)
					rel, err := helm.Get(cfg, defaultReleaseName)
					if err != nil {
						t.Fatal(err)
					}
					rel.Info.Status = release.StatusPendingUpgrade
					if err := cfg.Releases.Update(rel); err != nil {
						t.Fatal(err)
					}
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: append(update.PreApply,
						plancheck.ExpectKnownValue(agentAddr, tfjsonpath.New("status"), knownvalue.StringExact("deployed"))),
					PostApplyPostRefresh: update.PostApplyPostRefresh,
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("status"), knownvalue.StringExact("deployed")),
				},
				Check: func(*terraform.State) error {
					hist, err := helm.History(e.helmConfig(ns), defaultReleaseName)
					if err != nil {
						return err
					}
					for _, r := range hist {
						if strings.HasPrefix(r.Info.Description, "Rollback to") {
							return nil
						}
					}
					return fmt.Errorf("no rollback revision in the release's history")
				},
			},
			// Uninstalled outside Terraform: installed again.
			{
				PreConfig: func() {
					if err := helm.Uninstall(ctx, e.helmConfig(ns), defaultReleaseName, time.Minute); err != nil {
						t.Fatal(err)
					}
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(agentAddr, plancheck.ResourceActionCreate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("revision"), knownvalue.Int64Exact(1)),
				},
			},
		},
	})
}

// TestAccKubernetesAgent_waitForConnection lets the apply wait while the test plays the agent:
// it polls, signed with the runner's key, as soon as the runner exists.
func TestAccKubernetesAgent_waitForConnection(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	pub, priv := testKeyPair(t)
	pubPEM, err := keys.EncodePublicPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	agent := func(body string) string {
		return e.providerConfig() + fmt.Sprintf(`
resource "outpost_state_storage" "agent" {
  id   = "wait-states"
  type = "kubernetes"
  kubernetes { namespace = %[1]q }
}

resource "outpost_kubernetes_agent_runner" "agent" {
  id               = "wait-runner"
  public_keys      = [%[2]q]
  state_storage_id = outpost_state_storage.agent.id
  job { namespace = %[1]q }
}

resource "outpost_kubernetes_agent" "test" {
  namespace       = %[1]q
  job_namespace   = %[1]q
  state_namespace = %[1]q
  release_name    = "waiting-agent"
  runner_id       = outpost_kubernetes_agent_runner.agent.id
  private_key_secret { name = "agent-key" }
%[3]s
}
`, ns, pubPEM, body)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	startAgent := func() {
		go func() {
			for {
				_ = tryAgentPoll(e, "wait-runner", priv) // fails until the runner exists
				select {
				case <-stop:
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
		}()
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkReleaseGone(ns, "waiting-agent"),
		Steps: []resource.TestStep{
			// Nobody connects: the apply fails after the timeout and says what to check.
			{
				Config: agent(`  timeouts { create = "20s" }`),
				ExpectError: allPhrases("Agent Did Not Connect", `runner "wait-runner" did not report connected`,
					"has never seen an authenticated request", "logs deployment/waiting-agent-outpost-agent",
					ns+"/agent-key (private_key_secret) does NOT exist", "wait_for_connection = false"),
			},
			// The agent connects while the apply waits.
			{
				PreConfig: startAgent,
				Config:    agent(""),
				Check: e.checkRunner("wait-runner", func(r *api.Runner) error {
					if !r.Status.Connected || r.Status.AgentVersion != testAgentVersion {
						return fmt.Errorf("runner status %+v", r.Status)
					}
					return nil
				}),
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
		},
	})
}
