package orchestrator

import (
	"crypto/ed25519"
	"net/http"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

func fingerprintOf(t *testing.T, pemStr string) string {
	t.Helper()
	pub, err := keys.ParsePublicPEM(pemStr)
	if err != nil {
		t.Fatal(err)
	}
	return keys.Fingerprint(pub)
}

// replaceKeys updates runner r1 of acme to the given public keys.
func (h *harness) replaceKeys(revoke bool, pems ...string) api.Runner {
	h.t.Helper()
	var out api.Runner
	h.mustAdmin(http.MethodPut, orgPath("acme")+"/runners/r1", api.RunnerInput{
		ID: "r1", PublicKeys: pems, StateStorageID: "state", Job: api.RunnerJob{Namespace: "outpost-jobs", ServiceAccount: "outpost-job"},
		RevokeReplacedKeys: revoke,
	}, http.StatusOK, &out)
	return out
}

// A runner update that replaces the key keeps the replaced key accepted (retiring) until the
// agent signs with the new one; from then on the old key is refused, with the typed code the
// agent acts on.
func TestReplacedKeysRetireWhenTheAgentMoves(t *testing.T) {
	h := newHarness(t)
	old := h.setupRunner("acme", "r1", 1)
	newPEM, newKey := newKey(t)
	r := h.replaceKeys(false, newPEM)
	if len(r.RetiringKeys) != 1 || r.RetiringKeys[0].Fingerprint != old.signer.Fingerprint() {
		t.Fatalf("retiring keys after the update: %+v, want the replaced key", r.RetiringKeys)
	}
	if until := r.RetiringKeys[0].Until; until.Sub(h.clock.Now()) != api.KeyRetirement {
		t.Fatalf("the replaced key retires at %s, want %s after the update", until, api.KeyRetirement)
	}

	// The agent that has not moved yet still polls, and learns which keys are current.
	ans := old.poll(api.PollRequest{Instance: "a", WaitSeconds: 0, Protocol: api.AgentProtocols()})
	if len(ans.KeyFingerprints) != 1 || ans.KeyFingerprints[0] != fingerprintOf(t, newPEM) {
		t.Fatalf("poll answer key_fingerprints = %v, want the new key's only", ans.KeyFingerprints)
	}
	// An agent of protocol 1 gets no field it does not know.
	if v1 := old.poll(api.PollRequest{Instance: "a", WaitSeconds: 0, Protocol: api.ProtocolRange{Min: 1, Max: 1}}); v1.KeyFingerprints != nil {
		t.Fatalf("an answer in protocol 1 carries key_fingerprints %v", v1.KeyFingerprints)
	}
	if h.deploymentRunner(t).RetiringKeys == nil {
		t.Fatal("a poll signed with the retiring key retired it")
	}

	// The first request signed with the new key retires the old one.
	moved := h.agentFor("acme", "r1", newKey)
	moved.poll(api.PollRequest{Instance: "a", WaitSeconds: 0})
	if got := h.deploymentRunner(t).RetiringKeys; got != nil {
		t.Fatalf("retiring keys after the agent signed with the new key: %+v", got)
	}
	resp := old.post("/api/v1/agent/poll", api.PollRequest{Instance: "a"})
	if resp.code != http.StatusUnauthorized || resp.err(t).Code != api.CodeUnknownKey {
		t.Fatalf("the old key after the move: HTTP %d %s, want 401 %s", resp.code, resp.body, api.CodeUnknownKey)
	}
}

// deploymentRunner reads runner r1 of acme.
func (h *harness) deploymentRunner(t *testing.T) api.Runner {
	t.Helper()
	var r api.Runner
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/runners/r1", nil, http.StatusOK, &r)
	return r
}

// A key that leaked is revoked in the same update; and a retiring key the agent never moved off
// stops being accepted when its time is up.
func TestReplacedKeysRevokedOrExpired(t *testing.T) {
	h := newHarness(t)
	old := h.setupRunner("acme", "r1", 1)
	newPEM, _ := newKey(t)
	if r := h.replaceKeys(true, newPEM); r.RetiringKeys != nil {
		t.Fatalf("revoke_replaced_keys left retiring keys %+v", r.RetiringKeys)
	}
	if resp := old.post("/api/v1/agent/poll", api.PollRequest{Instance: "a"}); resp.code != http.StatusUnauthorized {
		t.Fatalf("a revoked key: HTTP %d, want 401", resp.code)
	}

	// Put the old key back, then replace it again without revoking, and let the time run out.
	oldPEM := h.runnerPEM(t, old)
	h.replaceKeys(false, oldPEM)
	h.replaceKeys(false, newPEM)
	old.poll(api.PollRequest{Instance: "a"})
	h.clock.Advance(api.KeyRetirement + time.Second)
	if resp := old.post("/api/v1/agent/poll", api.PollRequest{Instance: "a"}); resp.code != http.StatusUnauthorized {
		t.Fatalf("a retiring key past its time: HTTP %d, want 401", resp.code)
	}
}

// runnerPEM is the public key PEM of an agent's key.
func (h *harness) runnerPEM(t *testing.T, a *agent) string {
	t.Helper()
	pub, _ := a.key.Public().(ed25519.PublicKey)
	s, err := keys.EncodePublicPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A poll signed with a retiring key by an agent that holds a current key is answered at once, so
// the agent moves over without waiting out the long poll; one that holds no current key waits as
// any other.
func TestPollAnsweredAtOnceWhenTheAgentCanMove(t *testing.T) {
	h := newHarness(t)
	old := h.setupRunner("acme", "r1", 1)
	newPEM, _ := newKey(t)
	h.replaceKeys(false, newPEM)
	newFP := fingerprintOf(t, newPEM)

	held := old.goPost("/api/v1/agent/poll", api.PollRequest{Instance: "a", WaitSeconds: 30, Protocol: api.AgentProtocols(), KeyFingerprints: []string{old.signer.Fingerprint()}})
	select {
	case r := <-held:
		t.Fatalf("a poll from an agent without the new key was answered at once (HTTP %d %s)", r.code, r.body)
	case <-time.After(500 * time.Millisecond):
	}
	moving := old.goPost("/api/v1/agent/poll", api.PollRequest{Instance: "a", WaitSeconds: 30, Protocol: api.AgentProtocols(), KeyFingerprints: []string{newFP, old.signer.Fingerprint()}})
	select {
	case r := <-moving:
		if r.err != nil || r.code != http.StatusOK {
			t.Fatalf("poll: %v, HTTP %d %s", r.err, r.code, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a poll from an agent holding the new key was held; it must be answered at once")
	}
	h.close() // answers the held poll
	<-held
}

// A poll held while the runner's key is revoked (revoke_replaced_keys) is answered at once, so
// the agent's next poll is refused and it says so, instead of finding out when the long poll
// ends.
func TestPollAnsweredAtOnceWhenItsKeyIsRevoked(t *testing.T) {
	h := newHarness(t)
	old := h.setupRunner("acme", "r1", 1)
	newPEM, _ := newKey(t)
	held := old.goPost("/api/v1/agent/poll", api.PollRequest{Instance: "a", WaitSeconds: 30, Protocol: api.AgentProtocols(), KeyFingerprints: []string{old.signer.Fingerprint()}})
	time.Sleep(200 * time.Millisecond) // the poll waits
	h.replaceKeys(true, newPEM)
	select {
	case r := <-held:
		if r.err != nil || r.code != http.StatusOK {
			t.Fatalf("poll: %v, HTTP %d %s", r.err, r.code, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a poll whose key was revoked while it waited was held on; it must be answered at once")
	}
	if resp := old.post("/api/v1/agent/poll", api.PollRequest{Instance: "a"}); resp.code != http.StatusUnauthorized {
		t.Fatalf("the next poll with the revoked key: HTTP %d, want 401", resp.code)
	}
}
