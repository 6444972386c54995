package orchestrator

import (
	"net/http"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// An orchestrator of a release that speaks agent protocols 2 and 3 works with agents whose range
// meets its own (choosing the highest common version) and refuses the others with 409
// incompatible_protocol and a message naming both releases and ranges. A refused poll renews
// nothing and marks the runner seen by no agent.
func TestPollNegotiatesTheAgentProtocol(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *testConfig) { c.Version, c.AgentProtocols = "2.0.0", api.ProtocolRange{Min: 2, Max: 3} })
	a := h.setupRunner("acme", "r1", 1)

	for _, c := range []struct {
		name  string
		req   api.PollRequest
		wants []string
	}{
		{"older agent", api.PollRequest{AgentVersion: "1.0.0", Protocol: api.ProtocolRange{Min: 1, Max: 1}},
			[]string{"agent 1.0.0 speaks agent protocol 1, orchestrator 2.0.0 speaks 2 to 3", "upgrade the agent"}},
		{"agent from before negotiation", api.PollRequest{AgentVersion: "0.1.0"},
			[]string{"agent 0.1.0 speaks agent protocol 1, orchestrator 2.0.0 speaks 2 to 3"}},
		{"newer agent", api.PollRequest{AgentVersion: "9.0.0", Protocol: api.ProtocolRange{Min: 4, Max: 5}},
			[]string{"agent 9.0.0 speaks agent protocol 4 to 5, orchestrator 2.0.0 speaks 2 to 3", "upgrade the orchestrator"}},
	} {
		r := a.post(pollPath, c.req)
		if r.code != http.StatusConflict {
			t.Fatalf("%s: HTTP %d %s, want 409", c.name, r.code, r.body)
		}
		e := r.err(t)
		if e.Code != api.CodeIncompatibleProtocol {
			t.Errorf("%s: code %q, want %q", c.name, e.Code, api.CodeIncompatibleProtocol)
		}
		for _, w := range c.wants {
			if !strings.Contains(e.Message, w) {
				t.Errorf("%s: message %q lacks %q", c.name, e.Message, w)
			}
		}
	}
	runner := api.Runner{}
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/runners/r1", nil, http.StatusOK, &runner)
	if runner.Status.LastSeenAt != nil || runner.Status.AgentVersion != "" {
		t.Errorf("refused polls marked the runner seen: %+v", runner.Status)
	}

	resp := a.poll(api.PollRequest{AgentVersion: "2.5.0", Protocol: api.ProtocolRange{Min: 1, Max: 4}})
	if resp.Protocol != 3 || resp.OrchestratorVersion != "2.0.0" || resp.OrchestratorProtocol != (api.ProtocolRange{Min: 2, Max: 3}) {
		t.Errorf("a compatible poll was answered with protocol %d by %q speaking %+v; want 3 by 2.0.0 speaking 2 to 3",
			resp.Protocol, resp.OrchestratorVersion, resp.OrchestratorProtocol)
	}
	if r := a.post(pollPath, api.PollRequest{Protocol: api.ProtocolRange{Min: 3, Max: 2}}); r.code != http.StatusBadRequest || r.err(t).Field != "protocol" {
		t.Errorf("an empty range: HTTP %d %s, want 400 blaming protocol", r.code, r.body)
	}
}

// A plan with save_plan is offered only to an agent whose poll chose agent protocol 4: one of
// protocol 3 would run it as a plain plan (and the apply of it as a plain apply). An
// orchestrator that speaks only up to 3 offers it to nobody; the plain plan beside it goes to
// every agent.
func TestSavedPlansOnlyForProtocol4(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		orch       api.ProtocolRange
		agent      api.ProtocolRange
		savedPlans bool
	}{
		{"agent of protocol 3", api.AgentProtocols(), api.ProtocolRange{Min: 1, Max: 3}, false},
		{"agent of protocol 4", api.AgentProtocols(), api.ProtocolRange{Min: 1, Max: 4}, true},
		{"orchestrator of protocol 3", api.ProtocolRange{Min: 1, Max: 3}, api.ProtocolRange{Min: 1, Max: 4}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(tc *testConfig) { tc.AgentProtocols = c.orch })
			a := h.setupRunner("acme", "r1", 5)
			var saved api.Deployment
			h.mustAdmin(http.MethodPost, orgPath("acme")+"/deployments", api.DeploymentInput{
				RunnerID: "r1", Operation: api.OperationPlan, StateKey: "stacks/r1", SavePlan: true,
				Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}},
			}, http.StatusCreated, &saved)
			plain := h.deploy(api.OperationPlan)
			resp := a.poll(api.PollRequest{Protocol: c.agent, CapacityFree: 5, Instance: "a"})
			offered := map[string]bool{}
			for _, o := range resp.Offers {
				offered[o.DeploymentID] = true
			}
			if offered[saved.ID] != c.savedPlans || !offered[plain.ID] {
				t.Errorf("protocol %d: offered %v; saved plan %s offered %v, want %v; plain plan %s offered",
					resp.Protocol, resp.Offers, saved.ID, offered[saved.ID], c.savedPlans, plain.ID)
			}
		})
	}
}
