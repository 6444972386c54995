package store

import (
	"context"
	"fmt"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// The states of kubernetes state storages as their agents report them: per state key, the kept
// versions' metadata and the lock holder (api.StateReport). The orchestrator never receives a
// state's contents, so there is none to keep.

// stateDocID names the record of one state: the storage id (a DNS-1123 label, so it holds no
// '/') and the state key.
func stateDocID(storage, key string) string { return storage + "/" + key }

// RecordStates keeps what an agent reports of the states of its runner's state storage, which
// must be of type kubernetes in the report's namespace: an agent speaks only for the storage
// its runner uses.
func (s *Store) RecordStates(ctx context.Context, id agentauth.Identity, rep api.StateReport) error {
	return s.Update(ctx, func(tx Tx) error {
		now := s.TimeNow()
		r, err := touchRunner(tx, id, "", now)
		if err != nil {
			return err
		}
		st, err := getStorageTx(tx, id.Org, r.StateStorageID)
		if _, refused := AsRefusal(err); refused {
			return conflict("runner %q has no state storage to report states of (%s)", id.RunnerID, err)
		} else if err != nil {
			return err // a failed read is no refusal: refused, the transaction would commit
		}
		if st.Type != api.StateStorageKubernetes || st.Kubernetes == nil || st.Kubernetes.Namespace != rep.Namespace {
			return conflict("runner %q's state storage %q does not keep states in namespace %q of its cluster; an agent reports only the states of its runner's kubernetes state storage",
				id.RunnerID, st.ID, rep.Namespace)
		}
		for _, rs := range rep.States {
			if rs.Versions == nil {
				rs.Versions = []api.StateVersion{}
			}
			doc := api.State{StateStorageID: st.ID, ReportedState: rs, RunnerID: id.RunnerID, ReportedAt: now}
			if err := tx.PutDoc(KindState, id.Org, stateDocID(st.ID, rs.StateKey), doc); err != nil {
				return err
			}
		}
		return nil
	})
}

// ListStates returns what is known of the states of a state storage of org, by state key.
func (s *Store) ListStates(ctx context.Context, org, storage string) ([]api.State, error) {
	out := []api.State{}
	err := s.view(ctx, func(tx Tx) error {
		out = out[:0]
		if _, err := getStorageTx(tx, org, storage); err != nil {
			return err
		}
		if err := tx.ListDocs(KindState, org, func(data []byte) (bool, error) {
			var v api.State
			if err := Unmarshal(data, &v); err != nil {
				return false, err
			}
			if v.StateStorageID == storage {
				out = append(out, v)
			}
			return true, nil
		}); err != nil {
			return err
		}
		drifts, err := driftsOf(tx, org, storage)
		out = withDrifts(out, drifts, storage)
		return err
	})
	return out, err
}

// GetState returns what is known of one state of a state storage of org.
func (s *Store) GetState(ctx context.Context, org, storage, key string) (*api.State, error) {
	return viewOne(ctx, s, func(tx Tx) (*api.State, error) {
		if _, err := getStorageTx(tx, org, storage); err != nil {
			return nil, err
		}
		var v api.State
		ok, err := tx.GetDoc(KindState, org, stateDocID(storage, key), &v)
		if err != nil {
			return nil, err
		}
		var d api.Drift
		drifted, err := tx.GetDoc(KindDrift, org, stateDocID(storage, key), &d)
		switch {
		case err != nil:
			return nil, err
		case drifted && !ok:
			return &api.State{StateStorageID: storage, ReportedState: api.ReportedState{StateKey: key, Versions: []api.StateVersion{}}, Drift: &d}, nil
		case drifted:
			v.Drift = &d
		case !ok:
			return nil, NotFound("state %q of state storage %q is not known: no agent has reported it (the agent reports a state when a deployment writes or locks it)", key, storage)
		}
		return &v, nil
	})
}

// deleteStatesTx removes the records of a deleted state storage's states.
func deleteStatesTx(tx Tx, org, storage string) error {
	drifts, err := driftsOf(tx, org, storage)
	if err != nil {
		return err
	}
	for key := range drifts {
		if err := tx.DeleteDoc(KindDrift, org, stateDocID(storage, key)); err != nil {
			return fmt.Errorf("delete drift mark of %s: %w", key, err)
		}
	}
	var ids []string
	if err := tx.ListDocs(KindState, org, func(data []byte) (bool, error) {
		var v api.State
		if err := Unmarshal(data, &v); err != nil {
			return false, err
		}
		if v.StateStorageID == storage {
			ids = append(ids, stateDocID(storage, v.StateKey))
		}
		return true, nil
	}); err != nil {
		return err
	}
	for _, id := range ids {
		if err := tx.DeleteDoc(KindState, org, id); err != nil {
			return fmt.Errorf("delete state record %s: %w", id, err)
		}
	}
	return nil
}
