package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// statusLog records the status of every try the client makes.
type statusLog struct {
	mu    sync.Mutex
	codes []int
}

func (l *statusLog) hook(_ context.Context, info client.RequestInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.codes = append(l.codes, info.Status)
}

func (l *statusLog) take() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.codes
	l.codes = nil
	return out
}

// A key rotation seen from the agent's client, against a real orchestrator: whichever of the
// agent and the runner gets the new key first, no call fails. An agent that holds the new key
// before the runner has it signs with it once, is refused as unknown_key and signs the same call
// again with the old key; it then signs with the key the poll answers name. Once the runner has
// the new key the agent moves onto it, the old key retires, and an agent with only the old key
// is refused with api.ErrUnknownKey.
func TestAgentClientFollowsAKeyRotation(t *testing.T) {
	o := orchestratortest.Start(t)
	ctx := context.Background()
	admin, oldKey := o.RegisterRunner(ctx, t)
	newPub, newKey, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	newPEM, _ := keys.EncodePublicPEM(newPub)
	var tries statusLog
	signer := agentauth.NewSigner("acme", "r1", newKey, oldKey)
	ac, err := client.NewAgentClient(o.URL, signer, client.WithRequestHook(tries.hook), client.WithRetryPolicy(client.RetryPolicy{MaxTries: 1}))
	if err != nil {
		t.Fatal(err)
	}
	poll := api.PollRequest{AgentVersion: "test", Instance: "i", CapacityFree: 1, WaitSeconds: 0}

	// The Secret has the new key, the runner only the old one.
	if _, err := ac.Poll(ctx, poll); err != nil {
		t.Fatalf("poll holding a key the runner lacks and the old one: %v", err)
	}
	if got := tries.take(); len(got) != 2 || got[0] != 401 || got[1] != 200 {
		t.Fatalf("tries %v, want one 401 (the new key) and one 200 (the old key, signed again at once)", got)
	}
	if _, err := ac.Poll(ctx, poll); err != nil {
		t.Fatal(err)
	}
	if got := tries.take(); len(got) != 1 || got[0] != 200 || signer.Fingerprint() != agentauth.NewSigner("acme", "r1", oldKey).Fingerprint() {
		t.Fatalf("tries %v signing with %s: the answer named the runner's keys, so the old key is used without a refusal", got, signer.Fingerprint())
	}

	// The runner gets the new key (the old one retires): the next answer names it, and the agent
	// moves over.
	r, err := admin.GetRunner(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	in := api.RunnerInput{ID: "r1", PublicKeys: []string{newPEM}, StateStorageID: r.StateStorageID, Job: r.Job}
	if _, err := admin.UpdateRunner(ctx, in); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := ac.Poll(ctx, poll); err != nil {
			t.Fatalf("poll during the rotation: %v", err)
		}
	}
	if got := tries.take(); len(got) != 2 || got[0] != 200 || got[1] != 200 {
		t.Fatalf("tries %v during the rotation, want only 200s", got)
	}
	if r, err = admin.GetRunner(ctx, "r1"); err != nil || len(r.RetiringKeys) != 0 || r.Status.KeyFingerprint != signer.Fingerprint() {
		t.Fatalf("runner after the agent moved: retiring %v, signing with %s (%v); want no retiring key and the new key", r.RetiringKeys, r.Status.KeyFingerprint, err)
	}

	// The old key alone is refused now, with the typed error the agent's readiness reports.
	stale, err := client.NewAgentClient(o.URL, agentauth.NewSigner("acme", "r1", oldKey), client.WithRetryPolicy(client.RetryPolicy{MaxTries: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Poll(ctx, poll); !errors.Is(err, api.ErrUnknownKey) || !errors.Is(err, api.ErrUnauthorized) {
		t.Fatalf("the old key after the rotation: %v, want api.ErrUnknownKey", err)
	}
}
