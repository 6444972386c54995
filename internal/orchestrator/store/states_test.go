package store_test

import (
	"errors"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/storetest"
)

// TestStateReports: an agent's report of its runner's state storage is kept per state key and
// replaced by the next one; a report for another namespace, or by a runner of another
// organisation, is refused; deleting the state storage removes its states. On both engines.
func TestStateReports(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, eng store.Engine) {
		s, clk := newStore(t, eng)
		ctx := t.Context()
		v := func(gen, serial int64) api.StateVersion {
			return api.StateVersion{Generation: gen, Serial: serial, Lineage: "L", Size: 100 * gen, Resources: gen, DeploymentID: "dep-1", Attempt: 1, WrittenAt: clk.Now()}
		}
		rep := api.StateReport{Namespace: "outpost-state", States: []api.ReportedState{
			{StateKey: "stacks/a", Versions: []api.StateVersion{v(2, 5), v(1, 4)}, Lock: &api.StateLock{Holder: "job/dep-1/1", DeploymentID: "dep-1", Attempt: 1, Pod: "dep-1-1-x"}},
			{StateKey: "stacks/b", Versions: []api.StateVersion{v(1, 1)}},
		}}
		if err := s.RecordStates(ctx, runnerOf, rep); err != nil {
			t.Fatal(err)
		}
		// The next report of stacks/a replaces the first: a new version, the lock released.
		rep.States = []api.ReportedState{{StateKey: "stacks/a", Versions: []api.StateVersion{v(3, 6), v(2, 5), v(1, 4)}}}
		if err := s.RecordStates(ctx, runnerOf, rep); err != nil {
			t.Fatal(err)
		}
		a, err := s.GetState(ctx, "acme", "state", "stacks/a")
		if err != nil || len(a.Versions) != 3 || a.Versions[0].Serial != 6 || a.Lock != nil || a.RunnerID != "r1" || a.StateStorageID != "state" {
			t.Fatalf("stacks/a: %+v, %v", a, err)
		}
		list, err := s.ListStates(ctx, "acme", "state")
		if err != nil || len(list) != 2 || list[0].StateKey != "stacks/a" || list[1].StateKey != "stacks/b" {
			t.Fatalf("list: %+v, %v", list, err)
		}
		if _, err := s.GetState(ctx, "acme", "state", "stacks/c"); !refused(err, api.CodeNotFound) {
			t.Errorf("unreported state: %v, want not found", err)
		}
		if err := s.RecordStates(ctx, runnerOf, api.StateReport{Namespace: "other", States: rep.States}); !refused(err, api.CodeConflict) {
			t.Errorf("report for another namespace: %v, want a conflict", err)
		}
		stranger := agentauth.Identity{Org: "globex", RunnerID: "r1", Fingerprint: "SHA256:test"}
		if err := s.RecordStates(ctx, stranger, rep); !refused(err, api.CodeUnauthorized) {
			t.Errorf("report by a runner of another organisation: %v, want unauthorized", err)
		}
		if err := s.DeleteRunner(ctx, "acme", "r1"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteStorage(ctx, "acme", "state"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateStorage(ctx, "acme", api.StateStorageInput{ID: "state", Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: "outpost-state"}}); err != nil {
			t.Fatal(err)
		}
		if list, err := s.ListStates(ctx, "acme", "state"); err != nil || len(list) != 0 {
			t.Errorf("states of a deleted and recreated storage: %+v, %v", list, err)
		}
	})
}

// refused reports whether err is a refusal with code.
func refused(err error, code string) bool {
	var r *store.Refusal
	return errors.As(err, &r) && r.Code == code
}
