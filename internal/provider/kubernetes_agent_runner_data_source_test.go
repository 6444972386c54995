package provider

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// testAgentVersion is what the fake agent of these tests reports: the version of the agent the
// installed chart deploys, for which the provider's wait_for_connection waits.
var testAgentVersion = agentchart.AppVersion

// TestAccKubernetesAgentRunnerDataSource reads a runner before and after its "agent" (a signed
// poll made by the test, as the real agent would) connects.
func TestAccKubernetesAgentRunnerDataSource(t *testing.T) {
	e := newAccEnv(t)
	pub, priv := testKeyPair(t)
	pubPEM, err := keys.EncodePublicPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	data := "data.outpost_kubernetes_agent_runner.test"
	config := e.providerConfig() + fmt.Sprintf(`
resource "outpost_state_storage" "test" {
  id   = "ds-states"
  type = "gcs"
  gcs { bucket = "my-states" }
}

resource "outpost_kubernetes_agent_runner" "test" {
  id               = "ds-runner"
  description      = "read me"
  public_keys      = [%q]
  state_storage_id = outpost_state_storage.test.id
  job_timeout      = "2h"
  job {
    namespace    = "jobs"
    pod_template = jsonencode({ spec = { containers = [{ name = "main" }] } })
  }
}

data "outpost_kubernetes_agent_runner" "test" {
  id = outpost_kubernetes_agent_runner.test.id
}
`, pubPEM)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(data, tfjsonpath.New("status"), knownvalue.StringExact(runnerDisconnected)),
					statecheck.ExpectKnownValue(data, tfjsonpath.New("last_seen_at"), knownvalue.Null()),
					statecheck.ExpectKnownValue(data, tfjsonpath.New("job_timeout"), knownvalue.StringExact("2h")),
					statecheck.ExpectKnownValue(data, tfjsonpath.New("description"), knownvalue.StringExact("read me")),
					statecheck.ExpectKnownValue(data, tfjsonpath.New("job").AtMapKey("namespace"), knownvalue.StringExact("jobs")),
					statecheck.CompareValuePairs(data, tfjsonpath.New("public_keys"),
						"outpost_kubernetes_agent_runner.test", tfjsonpath.New("public_keys"), compare.ValuesSame()),
					statecheck.CompareValuePairs(data, tfjsonpath.New("job").AtMapKey("pod_template"),
						"outpost_kubernetes_agent_runner.test", tfjsonpath.New("job").AtMapKey("pod_template"), compare.ValuesSame()),
				},
			},
			{
				// The agent connects: both the data source and the resource's refresh see it, and a
				// changed status is no diff.
				PreConfig: func() { agentPoll(t, e, "ds-runner", priv) },
				Config:    config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(data, tfjsonpath.New("status"), knownvalue.StringExact(runnerConnected)),
					statecheck.ExpectKnownValue(data, tfjsonpath.New("agent_version"), knownvalue.StringExact(testAgentVersion)),
					statecheck.ExpectKnownValue(data, tfjsonpath.New("agent_key_fingerprint"), knownvalue.StringExact(keys.Fingerprint(pub))),
					statecheck.ExpectKnownValue(data, tfjsonpath.New("last_seen_at"), knownvalue.NotNull()),
					statecheck.ExpectKnownValue("outpost_kubernetes_agent_runner.test", tfjsonpath.New("status"), knownvalue.StringExact(runnerConnected)),
				},
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				Config: e.providerConfig() + `
data "outpost_kubernetes_agent_runner" "missing" {
  id = "no-such-runner"
}
`,
				ExpectError: allPhrases("Runner Not Found", `No runner "no-such-runner" is registered`),
			},
		},
	})
}

func testKeyPair(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// agentPoll makes one authenticated poll as the runner's agent would, which marks the runner
// connected.
func agentPoll(t *testing.T, e *accEnv, runnerID string, priv ed25519.PrivateKey) {
	t.Helper()
	if err := tryAgentPoll(e, runnerID, priv); err != nil {
		t.Fatalf("poll as the agent of runner %q: %v", runnerID, err)
	}
}

func tryAgentPoll(e *accEnv, runnerID string, priv ed25519.PrivateKey) error {
	agent, err := client.NewAgentClient(e.orch.URL, agentauth.NewSigner(e.org, runnerID, priv),
		client.WithRetryPolicy(client.RetryPolicy{MaxTries: 1}))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = agent.Poll(ctx, api.PollRequest{AgentVersion: testAgentVersion, Instance: "test-agent", WaitSeconds: 0})
	return err
}
