package orchestratortest

import (
	"context"
	"crypto/ed25519"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// RegisterRunner sets up what a test needs to act as an agent: in the organisation "acme", the
// state storage "s" (kubernetes, namespace "states") and the runner "r1" with a fresh key pair,
// its jobs in namespace "jobs" as service account "outpost-job". It returns the admin client and
// the runner's private key.
func (i *Instance) RegisterRunner(ctx context.Context, t testing.TB) (*client.AdminClient, ed25519.PrivateKey) {
	t.Helper()
	admin, err := client.NewAdminClient(i.URL, "acme", i.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := keys.EncodePublicPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateStateStorage(ctx, api.StateStorageInput{ID: "s", Type: api.StateStorageKubernetes,
		Kubernetes: &api.KubernetesStateSpec{Namespace: "states"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateRunner(ctx, api.RunnerInput{ID: "r1", PublicKeys: []string{pubPEM}, StateStorageID: "s",
		Job: api.RunnerJob{Namespace: "jobs", ServiceAccount: "outpost-job"}}); err != nil {
		t.Fatal(err)
	}
	return admin, priv
}

// EventCounts counts a deployment's events by type: a deployment that ran once has one started
// and one finished event.
func EventCounts(evs []api.Event) map[api.EventType]int {
	n := map[api.EventType]int{}
	for _, ev := range evs {
		n[ev.Type]++
	}
	return n
}
