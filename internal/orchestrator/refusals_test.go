package orchestrator

import (
	"net/http"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// An agent the orchestrator refuses for a reason retrying cannot fix (a key its runner does not
// have, a protocol the orchestrator does not speak) shows on its runner with the reason, until an
// agent of the runner gets in again; a burst of refusals writes once per refusalNoteEvery, and a
// token naming no runner notes nothing.
func TestRefusedAgentsShowOnTheirRunner(t *testing.T) {
	h := newHarness(t)
	good := h.setupRunner("acme", "r1", 1)
	_, strayKey := newKey(t)
	stray := h.agentFor("acme", "r1", strayKey)
	poll := api.PollRequest{Instance: "a", Protocol: api.AgentProtocols()}

	refusedAt := h.clock.Now()
	if resp := stray.post("/api/v1/agent/poll", poll); resp.code != http.StatusUnauthorized || resp.err(t).Code != api.CodeUnknownKey {
		t.Fatalf("a poll signed with a stray key: HTTP %d %s, want 401 %s", resp.code, resp.body, api.CodeUnknownKey)
	}
	ref := h.deploymentRunner(t).Status.Refused()
	if ref == nil || ref.Code != api.CodeUnknownKey || ref.KeyFingerprint != stray.signer.Fingerprint() || !ref.At.Equal(refusedAt) {
		t.Fatalf("the runner after a stray key's poll: refusal %+v, want unknown_key of %s at %s", ref, stray.signer.Fingerprint(), refusedAt)
	}

	// Within the window another refusal writes nothing; after it, it does.
	h.clock.Advance(refusalNoteEvery / 2)
	stray.post("/api/v1/agent/poll", poll)
	if got := h.deploymentRunner(t).Status.LastRefusal.At; !got.Equal(refusedAt) {
		t.Fatalf("a refusal %s after the first was written (at %s); the window is %s", refusalNoteEvery/2, got, refusalNoteEvery)
	}
	h.clock.Advance(refusalNoteEvery)
	stray.post("/api/v1/agent/poll", poll)
	if got := h.deploymentRunner(t).Status.LastRefusal.At; !got.Equal(h.clock.Now()) {
		t.Fatalf("a refusal after the window was not written: last at %s, now %s", got, h.clock.Now())
	}

	// A token naming a runner that does not exist: refused, nothing created or noted.
	ghost := h.agentFor("acme", "nobody", strayKey)
	if resp := ghost.post("/api/v1/agent/poll", poll); resp.code != http.StatusUnauthorized {
		t.Fatalf("a poll of a runner that does not exist: HTTP %d %s", resp.code, resp.body)
	}
	if r := h.admin(http.MethodGet, orgPath("acme")+"/runners/nobody", nil); r.code != http.StatusNotFound {
		t.Fatalf("after a refused poll naming it, runner nobody answers %d", r.code)
	}

	// The right key gets in: the refusal is kept but is no longer the runner's state.
	h.clock.Advance(time.Second)
	good.poll(api.PollRequest{Instance: "a", Protocol: api.AgentProtocols()})
	if st := h.deploymentRunner(t).Status; st.Refused() != nil || st.LastRefusal == nil {
		t.Fatalf("after the right key's poll: refused %+v, last refusal %+v; want none refused and the last one kept", st.Refused(), st.LastRefusal)
	}

	// An agent that speaks only a protocol the orchestrator does not.
	h.clock.Advance(time.Second)
	old := api.PollRequest{Instance: "a", AgentVersion: "v9.0.0", Protocol: api.ProtocolRange{Min: 99, Max: 99}}
	if resp := good.post("/api/v1/agent/poll", old); resp.code != http.StatusConflict || resp.err(t).Code != api.CodeIncompatibleProtocol {
		t.Fatalf("a poll of protocol 99: HTTP %d %s, want 409 %s", resp.code, resp.body, api.CodeIncompatibleProtocol)
	}
	ref = h.deploymentRunner(t).Status.Refused()
	if ref == nil || ref.Code != api.CodeIncompatibleProtocol || ref.AgentVersion != "v9.0.0" || ref.Message == "" {
		t.Fatalf("the runner after an incompatible poll: refusal %+v, want incompatible_protocol of v9.0.0 with the message", ref)
	}
}
