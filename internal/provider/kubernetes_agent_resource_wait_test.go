package provider

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/types"
	"helm.sh/helm/v3/pkg/release"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// The wait for the agent's connection, against a real orchestrator polled by an agent reporting
// a version: the agent this provider installs connects without a word, any other version
// connects with a warning naming both versions.
func TestWaitForConnectionWarnsOfAnotherAgentVersion(t *testing.T) {
	_, installed := agentchart.InstallVersions()
	for _, c := range []struct {
		agentVersion string
		warn         bool
	}{{installed, false}, {"0.0.9", true}} {
		t.Run(c.agentVersion, func(t *testing.T) {
			inst := orchestratortest.Start(t)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			admin, priv := inst.RegisterRunner(ctx, t)
			agent, err := client.NewAgentClient(inst.URL, agentauth.NewSigner("acme", "r1", priv))
			if err != nil {
				t.Fatal(err)
			}
			// The agent polls from now on, as an installed agent would.
			go func() {
				for ctx.Err() == nil {
					_, _ = agent.Poll(ctx, api.PollRequest{AgentVersion: c.agentVersion, Instance: "agent-0", WaitSeconds: 1})
				}
			}()
			plan := kubernetesAgentModel{RunnerID: types.StringValue("r1")}
			rel := &release.Release{Name: "outpost-agent", Namespace: "outpost-system", Version: 1}
			diags := (&kubernetesAgentResource{}).waitForConnection(ctx, admin, nil, plan, rel, 30*time.Second)
			if diags.HasError() {
				t.Fatalf("wait: %v", diags)
			}
			if !c.warn {
				if len(diags) != 0 {
					t.Fatalf("the agent of this provider's version connected with diagnostics %v", diags)
				}
				return
			}
			if len(diags) != 1 || diags[0].Summary() != "Agent Version Differs From Provider" ||
				!strings.Contains(diags[0].Detail(), `reports version "0.0.9"`) || !strings.Contains(diags[0].Detail(), "installs agent "+installed) {
				t.Fatalf("diagnostics %v; want one warning naming agent 0.0.9 and the installed %s", diags, installed)
			}
		})
	}
}
