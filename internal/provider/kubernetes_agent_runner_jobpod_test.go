package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// jobPodSettings sets every job pod setting; affinity and volumes are written in another key
// order than the orchestrator stores, so a diff after refresh would show.
const jobPodSettings = `
    resources = {
      requests = { cpu = "500m", memory = "1Gi" }
      limits   = { memory = "4Gi" }
    }
    node_selector = { "kubernetes.io/os" = "linux", pool = "iac" }
    tolerations = [
      { key = "dedicated", operator = "Equal", value = "iac", effect = "NoSchedule" },
      { key = "spot", operator = "Exists", effect = "NoExecute", toleration_seconds = 300 },
    ]
    affinity = <<-EOT
      { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": [
        { "matchExpressions": [ { "values": ["amd64"], "operator": "In", "key": "kubernetes.io/arch" } ] } ] } } }
    EOT
    env = [
      { name = "TF_LOG", value = "INFO" },
      { name = "DB_PASSWORD", secret_key_ref = { name = "db", key = "password" } },
      { name = "REGION", config_map_key_ref = { name = "settings", key = "region", optional = true } },
      { name = "EMPTY" },
    ]
    labels      = { team = "payments" }
    annotations = { "example.com/owner" = "payments@example.com" }
    volumes = jsonencode([
      { name = "plugin-cache", emptyDir = { sizeLimit = "2Gi" } },
      { name = "settings", configMap = { name = "settings" } },
    ])
    volume_mounts = [
      { name = "plugin-cache", mount_path = "/cache" },
      { name = "settings", mount_path = "/etc/settings", read_only = true },
    ]
    priority_class_name = "iac-high"
`

func TestAccKubernetesAgentRunner_jobPodSettings(t *testing.T) {
	e := newAccEnv(t)
	addr := "outpost_kubernetes_agent_runner.test"
	config := func(settings string) string {
		return e.providerConfig() + runnerBase + `
resource "outpost_kubernetes_agent_runner" "test" {
  id               = "runner-pod"
  public_keys      = [outpost_key_pair.a.public_key_pem]
  state_storage_id = outpost_state_storage.test.id
  job {
    namespace = terraform_data.job_namespace.output
` + settings + `
  }
}
`
	}
	job := tfjsonpath.New("job")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkRunnerGone("runner-pod"),
		Steps: []resource.TestStep{
			{
				Config: config(jobPodSettings),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, job.AtMapKey("resources").AtMapKey("limits").AtMapKey("memory"), knownvalue.StringExact("4Gi")),
					statecheck.ExpectKnownValue(addr, job.AtMapKey("tolerations").AtSliceIndex(1).AtMapKey("toleration_seconds"), knownvalue.Int64Exact(300)),
					statecheck.ExpectKnownValue(addr, job.AtMapKey("env").AtSliceIndex(2).AtMapKey("config_map_key_ref").AtMapKey("optional"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, job.AtMapKey("env").AtSliceIndex(1).AtMapKey("secret_key_ref").AtMapKey("optional"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(addr, job.AtMapKey("volume_mounts").AtSliceIndex(0).AtMapKey("read_only"), knownvalue.Bool(false)),
				},
				Check: e.checkRunner("runner-pod", func(r *api.Runner) error {
					p := r.Job.Pod
					switch {
					case p == nil:
						return fmt.Errorf("the orchestrator holds no job pod settings")
					case p.Resources.Requests["cpu"] != "500m" || p.NodeSelector["pool"] != "iac" || len(p.Tolerations) != 2:
						return fmt.Errorf("settings %+v", p)
					case p.Env[1].SecretKeyRef == nil || p.Env[1].SecretKeyRef.Key != "password" || p.Env[3].Value != "":
						return fmt.Errorf("env %+v", p.Env)
					case !strings.HasPrefix(p.Affinity, `{"nodeAffinity":`) || !strings.Contains(p.Volumes, `"sizeLimit":"2Gi"`):
						return fmt.Errorf("affinity %s volumes %s", p.Affinity, p.Volumes)
					case p.PriorityClassName != "iac-high" || p.Labels["team"] != "payments" || !p.VolumeMounts[1].ReadOnly:
						return fmt.Errorf("settings %+v", p)
					}
					return nil
				}),
			},
			// Import round trip: every setting comes back from the orchestrator as configured;
			// affinity, written as a heredoc, in the orchestrator's normal form.
			{ResourceName: addr, ImportState: true, ImportStateVerify: true, ImportStateVerifyIgnore: []string{"job.affinity"},
				ImportStateCheck: func(states []*terraform.InstanceState) error {
					want := `{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/arch","operator":"In","values":["amd64"]}]}]}}}`
					if len(states) != 1 || states[0].Attributes["job.affinity"] != want {
						return fmt.Errorf("imported affinity %q, want %s", states[0].Attributes["job.affinity"], want)
					}
					return nil
				}},
			// Removing the settings clears them at the orchestrator.
			{
				Config: config(""),
				Check: e.checkRunner("runner-pod", func(r *api.Runner) error {
					if r.Job.Pod != nil {
						return fmt.Errorf("settings %+v left after removing them", r.Job.Pod)
					}
					return nil
				}),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, job.AtMapKey("env"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, job.AtMapKey("volumes"), knownvalue.Null()),
				},
			},
		},
	})
}

func TestKubernetesAgentRunner_invalidJobPodSettings(t *testing.T) {
	pub, _ := testKeyPEMs(t)
	runner := func(settings string) string {
		return unitProviderConfig + fmt.Sprintf(`
resource "outpost_kubernetes_agent_runner" "test" {
  id               = "r"
  public_keys      = [%q]
  state_storage_id = "states"
  job {
    namespace = "jobs"
    %s
  }
}
`, pub, settings)
	}
	cases := []struct{ settings, want string }{
		{`resources = { limits = { memory = "lots" } }`, `"lots" is not a Kubernetes quantity`},
		{`resources = { requests = { memory = "4Gi" }, limits = { memory = "1Gi" } }`, "above the limit"},
		{`resources = {}`, "set requests, limits or both"},
		{`node_selector = { pool = "a b" }`, `"a b" is not a valid value`},
		{`tolerations = [{ key = "k", operator = "In" }]`, "value must be one of"},
		{`tolerations = [{ key = "k", effect = "NoSchedule", toleration_seconds = 5 }]`, `applies only to effect "NoExecute"`},
		{`affinity = jsonencode({ NodeAffinity = {} })`, "not a Kubernetes Affinity"},
		{`env = [{ name = "OUTPOST_API_URL", value = "http://evil" }]`, "variables under OUTPOST_ are set by the runner"},
		{`env = [{ name = "A", value = "1", secret_key_ref = { name = "s", key = "k" } }]`, "set exactly one of value, secret_key_ref and config_map_key_ref"},
		{`env = [{ name = "A", value = "" }]`, "string length must be at least 1"},
		{`labels = { "outpost.dev/runner-id" = "x" }`, "keys under outpost.dev/ are set by the runner"},
		{`labels = {}`, "map must contain at least 1 elements"},
		{`volumes = jsonencode([{ name = "outpost-runner", emptyDir = {} }])`, "volume names starting with outpost- are the runner's"},
		{`volumes = jsonencode({ name = "a" })`, "not a list of Kubernetes Volumes"},
		{`volume_mounts = [{ name = "nope", mount_path = "/x" }]`, `no volume is named "nope"`},
		{"volumes = jsonencode([{ name = \"a\", emptyDir = {} }])\nvolume_mounts = [{ name = \"a\", mount_path = \"/var/run/outpost\" }]", "where the runner mounts its own files"},
		{`priority_class_name = "High!"`, "is not a PriorityClass name"},
	}
	steps := make([]resource.TestStep, 0, len(cases)+1)
	for _, tc := range cases {
		steps = append(steps, resource.TestStep{Config: runner(tc.settings), PlanOnly: true, ExpectError: errorPhrase(tc.want)})
	}
	// A mount of a volume of the pod template is fine.
	steps = append(steps, resource.TestStep{Config: runner(`pod_template = jsonencode({ spec = { volumes = [{ name = "t", emptyDir = {} }] } })
    volume_mounts = [{ name = "t", mount_path = "/t" }]`), PlanOnly: true, ExpectNonEmptyPlan: true})
	resource.UnitTest(t, resource.TestCase{ProtoV6ProviderFactories: testAccProtoV6ProviderFactories, Steps: steps})
}
