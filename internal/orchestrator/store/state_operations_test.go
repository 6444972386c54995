package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/storetest"
)

// TestStateOperations: an operation is queued, taken by the poll of the runner that uses the
// storage (and by no other runner, of this organisation or another), offered again to that
// runner until its result arrives, and ends with the first result posted (a second changes
// nothing); one nobody takes expires with the error expired; rollbacks are listed with who
// asked and why. On both engines.
func TestStateOperations(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, eng store.Engine) {
		s, clk := newStore(t, eng)
		ctx := t.Context()
		if _, err := s.CreateStorage(ctx, "acme", api.StateStorageInput{ID: "other", Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: "other-state"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateRunner(ctx, "acme", api.RunnerInput{ID: "r2", StateStorageID: "other", MaxConcurrency: 1, Job: api.RunnerJob{Namespace: "j", ServiceAccount: "sa"}}); err != nil {
			t.Fatal(err)
		}
		r2 := agentauth.Identity{Org: "acme", RunnerID: "r2", Fingerprint: "SHA256:test"}
		stranger := agentauth.Identity{Org: "globex", RunnerID: "r1", Fingerprint: "SHA256:test"}

		rb := api.StateOperationInput{Kind: api.StateOperationRollback, Generation: 3, Reason: "apply 5 broke it"}
		op, runners, err := s.CreateStateOperation(ctx, "acme", "state", "stacks/a", rb, "token ci (tok-1)")
		if err != nil || op.Status != api.StateOperationQueued || len(runners) != 1 || runners[0] != "r1" {
			t.Fatalf("create: %+v, runners %v, %v", op, runners, err)
		}
		if _, _, err := s.CreateStateOperation(ctx, "acme", "nowhere", "stacks/a", rb, "x"); !refused(err, api.CodeNotFound) {
			t.Errorf("operation on an unknown storage: %v", err)
		}
		if _, _, err := s.CreateStateOperation(ctx, "globex", "state", "stacks/a", rb, "x"); err == nil {
			t.Error("an operation on another organisation's storage was queued")
		}
		if offers, _, err := s.TakeStateOperations(ctx, r2); err != nil || len(offers) != 0 {
			t.Errorf("runner of another storage was offered %+v, %v", offers, err)
		}
		if _, _, err := s.TakeStateOperations(ctx, stranger); !refused(err, api.CodeUnauthorized) {
			t.Errorf("runner of another organisation: %v, want unauthorized", err)
		}
		offers, taken, err := s.TakeStateOperations(ctx, runnerOf)
		if err != nil || taken != 1 || len(offers) != 1 || offers[0].ID != op.ID || offers[0].Namespace != "outpost-state" || offers[0].RequestedBy != "token ci (tok-1)" || offers[0].Reason != rb.Reason {
			t.Fatalf("take: %+v, %d taken, %v", offers, taken, err)
		}
		if again, taken, err := s.TakeStateOperations(ctx, runnerOf); err != nil || taken != 0 || len(again) != 1 {
			t.Errorf("a running operation without result is offered again to its runner: %+v, %d, %v", again, taken, err)
		}
		got, err := s.GetStateOperation(ctx, "acme", op.ID)
		if err != nil || got.Status != api.StateOperationRunning || got.RunnerID != "r1" {
			t.Fatalf("after take: %+v, %v", got, err)
		}
		if _, err := s.RecordStateOperationResult(ctx, r2, op.ID, api.StateOperationResult{Status: api.StateOperationDone, StateOperationOutcome: api.StateOperationOutcome{Rollback: &api.StateRolledBack{Generation: 9, Serial: 9}}}); !refused(err, api.CodeNotFound) {
			t.Errorf("result from a runner of another storage: %v, want not found", err)
		}
		if _, err := s.RecordStateOperationResult(ctx, runnerOf, op.ID, api.StateOperationResult{Status: api.StateOperationDone}); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("a done rollback without its result: %v, want invalid", err)
		}
		done := api.StateOperationResult{Status: api.StateOperationDone, StateOperationOutcome: api.StateOperationOutcome{Rollback: &api.StateRolledBack{Generation: 7, Serial: 12}}}
		if got, err = s.RecordStateOperationResult(ctx, runnerOf, op.ID, done); err != nil || got.Status != api.StateOperationDone || got.Rollback.Generation != 7 {
			t.Fatalf("result: %+v, %v", got, err)
		}
		late := api.StateOperationResult{Status: api.StateOperationFailed, StateOperationOutcome: api.StateOperationOutcome{Error: &api.StateOperationError{Code: api.StateOpFailed, Message: "x"}}}
		if got, err = s.RecordStateOperationResult(ctx, runnerOf, op.ID, late); err != nil || got.Status != api.StateOperationDone || got.Rollback == nil {
			t.Errorf("a second result changed the first: %+v, %v", got, err)
		}
		if offers, _, err := s.TakeStateOperations(ctx, runnerOf); err != nil || len(offers) != 0 {
			t.Errorf("an ended operation is offered: %+v, %v", offers, err)
		}

		// Nobody takes this one: it expires.
		clk.Advance(time.Second)
		show, _, err := s.CreateStateOperation(ctx, "acme", "state", "stacks/a", api.StateOperationInput{Kind: api.StateOperationShow}, "admin")
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(store.StateOperationTTL + time.Second)
		if got, err = s.GetStateOperation(ctx, "acme", show.ID); err != nil || got.Status != api.StateOperationFailed || got.Error == nil || got.Error.Code != api.StateOpExpired {
			t.Fatalf("an operation nobody took: %+v, %v", got, err)
		}
		if offers, _, err := s.TakeStateOperations(ctx, runnerOf); err != nil || len(offers) != 0 {
			t.Errorf("an expired operation is offered: %+v, %v", offers, err)
		}

		list, err := s.ListStateOperations(ctx, "acme", "state", "stacks/a", api.StateOperationRollback)
		if err != nil || len(list) != 1 || list[0].ID != op.ID || list[0].RequestedBy != "token ci (tok-1)" || list[0].Reason != rb.Reason {
			t.Errorf("rollbacks of stacks/a: %+v, %v", list, err)
		}
		if all, err := s.ListStateOperations(ctx, "acme", "state", "", ""); err != nil || len(all) != 2 || all[0].ID != show.ID {
			t.Errorf("all operations, newest first: %+v, %v", all, err)
		}
		if _, err := s.GetStateOperation(ctx, "globex", op.ID); !refused(err, api.CodeNotFound) {
			t.Errorf("another organisation reads the operation: %v", err)
		}

		// Deleting the storage deletes its operations and its queue.
		if _, _, err := s.CreateStateOperation(ctx, "acme", "state", "stacks/a", api.StateOperationInput{Kind: api.StateOperationShow}, "admin"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteRunner(ctx, "acme", "r1"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteStorage(ctx, "acme", "state"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetStateOperation(ctx, "acme", op.ID); !refused(err, api.CodeNotFound) {
			t.Errorf("an operation of a deleted storage: %v, want not found", err)
		}
	})
}
