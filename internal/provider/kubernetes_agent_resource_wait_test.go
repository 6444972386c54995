package provider

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/types"
	helmchart "helm.sh/helm/v3/pkg/chart"
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
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			admin := pollingAgent(ctx, t, func() string { return c.agentVersion })
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

// After an upgrade the wait lasts until the agent of the installed version polls: the previous
// agent goes on polling while the rollout replaces it, and an apply must not end before. A
// release that pins another image takes whichever agent connects.
func TestWaitForConnectionWaitsForTheUpgradedAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	polling := "0.0.9" // the previous agent
	admin := pollingAgent(ctx, t, func() string { mu.Lock(); defer mu.Unlock(); return polling })
	plan := kubernetesAgentModel{RunnerID: types.StringValue("r1")}
	rel := &release.Release{Name: "outpost-agent", Namespace: "outpost-system", Version: 2,
		Chart: &helmchart.Chart{Metadata: &helmchart.Metadata{AppVersion: "1.0.0"}}}
	pinned := &release.Release{Name: "outpost-agent", Namespace: "outpost-system", Version: 2, Chart: rel.Chart,
		Config: map[string]any{"image": map[string]any{"tag": "0.0.9"}}}
	if diags := (&kubernetesAgentResource{}).waitForConnection(ctx, admin, nil, plan, pinned, 10*time.Second); diags.HasError() {
		t.Fatalf("a release pinning the connected agent's image: %v", diags)
	}
	time.AfterFunc(2*time.Second, func() { mu.Lock(); polling = "1.0.0"; mu.Unlock() })
	start := time.Now()
	diags := (&kubernetesAgentResource{}).waitForConnection(ctx, admin, nil, plan, rel, 20*time.Second)
	if diags.HasError() {
		t.Fatalf("wait: %v", diags)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Fatalf("the wait ended after %s, while only the previous agent polled", took)
	}
	if r, _ := admin.GetRunner(ctx, "r1"); r.Status.AgentVersion != "1.0.0" {
		t.Fatalf("the wait ended with agent %q polling, want the installed 1.0.0", r.Status.AgentVersion)
	}
}

// pollingAgent registers runner r1 with a real orchestrator and polls it from now on until ctx
// ends, as an installed agent would, reporting version(); it returns the admin client.
func pollingAgent(ctx context.Context, t *testing.T, version func() string) *client.AdminClient {
	t.Helper()
	inst := orchestratortest.Start(t)
	admin, priv := inst.RegisterRunner(ctx, t)
	agent, err := client.NewAgentClient(inst.URL, agentauth.NewSigner("acme", "r1", priv))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			v := version()
			_, _ = agent.Poll(ctx, api.PollRequest{AgentVersion: v, Instance: "agent-" + v, WaitSeconds: 0})
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return admin
}
