package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// State operations (api.StateOperation): show, diff and rollback of the versions a kubernetes
// state storage keeps. The orchestrator cannot reach the agent, so an operation waits here,
// queued, until a poll of an agent whose runner uses the storage takes it (running, for that
// runner); the agent posts the result, names only. Each storage's operations that have not
// ended are listed in one queue record (KindStateOperationQueue, id = storage id), so a poll
// finds them with one read and an idle poll writes nothing.

// StateOperationTTL is how long an operation may wait for an agent to take it and post its
// result before it fails with the error expired.
const StateOperationTTL = 2 * time.Minute

// stateOperationQueue lists the operations of one state storage that have not ended, oldest
// first.
type stateOperationQueue struct {
	IDs []string `json:"ids"`
}

// newStateOperationID returns a random id that is a DNS-1123 label.
func newStateOperationID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate state operation id: %w", err)
	}
	return "sop-" + IDEncoding.EncodeToString(b), nil
}

// CreateStateOperation queues a state operation on a state of a kubernetes state storage of org,
// asked for by requestedBy. It returns the operation and the runners whose agents may take it
// (to wake their polls). A storage of another type, or one no runner uses, is refused: no agent
// could run the operation.
func (s *Store) CreateStateOperation(ctx context.Context, org, storage, key string, in api.StateOperationInput, requestedBy string) (*api.StateOperation, []string, error) {
	id, err := newStateOperationID()
	if err != nil {
		return nil, nil, err
	}
	var out *api.StateOperation
	var runners []string
	err = s.Update(ctx, func(tx Tx) error {
		st, err := getStorageTx(tx, org, storage)
		if err != nil {
			return err
		}
		if st.Type != api.StateStorageKubernetes {
			return conflict("state storage %q is of type %s: the versions of its states are kept by that service, not by an agent; state operations run on kubernetes state storages", storage, st.Type)
		}
		runners, err = runnersOfStorage(tx, org, storage)
		if err != nil {
			return err
		}
		if len(runners) == 0 {
			return conflict("no runner uses state storage %q, so no agent serves its states; register a runner with state_storage_id %q and install its agent", storage, storage)
		}
		now := s.TimeNow()
		op := api.StateOperation{ID: id, StateStorageID: storage, StateKey: key, StateOperationInput: in, RequestedBy: requestedBy,
			Status: api.StateOperationQueued, CreatedAt: now, ExpiresAt: now.Add(StateOperationTTL)}
		if err := tx.PutDoc(KindStateOperation, org, id, op); err != nil {
			return err
		}
		var q stateOperationQueue
		if _, err := tx.GetDoc(KindStateOperationQueue, org, storage, &q); err != nil {
			return err
		}
		q.IDs = append(q.IDs, id)
		out = &op
		return tx.PutDoc(KindStateOperationQueue, org, storage, q)
	})
	return out, runners, err
}

// runnersOfStorage lists the runners of org whose state storage is storage.
func runnersOfStorage(tx Tx, org, storage string) ([]string, error) {
	var out []string
	err := tx.ListDocs(KindRunner, org, func(data []byte) (bool, error) {
		var r api.Runner
		if err := Unmarshal(data, &r); err != nil {
			return false, err
		}
		if r.StateStorageID == storage {
			out = append(out, r.ID)
		}
		return true, nil
	})
	return out, err
}

// expireStateOperation fails op with the error expired when it is due and has not ended, and
// reports whether it did.
func expireStateOperation(op *api.StateOperation, now time.Time) bool {
	if op.Status.Terminal() || now.Before(op.ExpiresAt) {
		return false
	}
	msg := fmt.Sprintf("no agent took the operation within %s: is the agent of a runner that uses state storage %q running, connected (outpost runner get), "+
		"and of a release that runs state operations (agent protocol %d or later)?", StateOperationTTL, op.StateStorageID, api.ProtocolStateOperations)
	if op.Status == api.StateOperationRunning {
		msg = fmt.Sprintf("the agent of runner %q took the operation at %s but posted no result by %s (it may have restarted); ask again",
			op.RunnerID, op.StartedAt.Format(time.RFC3339), op.ExpiresAt.Format(time.RFC3339))
	}
	op.Status, op.EndedAt = api.StateOperationFailed, &now
	op.Error = &api.StateOperationError{Code: api.StateOpExpired, Message: msg}
	return true
}

// endStateOperationTx saves an ended operation and takes it off its storage's queue.
func endStateOperationTx(tx Tx, org string, op *api.StateOperation) error {
	if err := tx.PutDoc(KindStateOperation, org, op.ID, op); err != nil {
		return err
	}
	var q stateOperationQueue
	if _, err := tx.GetDoc(KindStateOperationQueue, org, op.StateStorageID, &q); err != nil {
		return err
	}
	q.IDs = slices.DeleteFunc(q.IDs, func(id string) bool { return id == op.ID })
	if len(q.IDs) == 0 {
		return tx.DeleteDoc(KindStateOperationQueue, org, op.StateStorageID)
	}
	return tx.PutDoc(KindStateOperationQueue, org, op.StateStorageID, q)
}

// GetStateOperation returns a state operation of org; one that is due ends now as expired.
func (s *Store) GetStateOperation(ctx context.Context, org, id string) (*api.StateOperation, error) {
	var out *api.StateOperation
	err := s.Update(ctx, func(tx Tx) error {
		op, err := getOrgObject[api.StateOperation](tx, KindStateOperation, org, id, "state operation")
		if err != nil {
			return err
		}
		if expireStateOperation(op, s.TimeNow()) {
			if err := endStateOperationTx(tx, org, op); err != nil {
				return err
			}
		}
		out = op
		return nil
	})
	return out, err
}

// ListStateOperations lists the operations on a state storage of org, newest first: those on
// key when it is not empty, and of kind k when it is not empty. Rollbacks listed this way are
// the record of who rolled a state back, when and why.
func (s *Store) ListStateOperations(ctx context.Context, org, storage, key string, k api.StateOperationKind) ([]api.StateOperation, error) {
	out := []api.StateOperation{}
	err := s.view(ctx, func(tx Tx) error {
		if _, err := getStorageTx(tx, org, storage); err != nil {
			return err
		}
		now := s.TimeNow()
		return tx.ListDocs(KindStateOperation, org, func(data []byte) (bool, error) {
			var op api.StateOperation
			if err := Unmarshal(data, &op); err != nil {
				return false, err
			}
			if op.StateStorageID == storage && (key == "" || op.StateKey == key) && (k == "" || op.Kind == k) {
				expireStateOperation(&op, now) // as GetStateOperation would answer
				out = append(out, op)
			}
			return true, nil
		})
	})
	slices.SortFunc(out, func(a, b api.StateOperation) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.ID, a.ID))
	})
	return out, err
}

// stateOperationsPending reports whether state operations wait in the queue of runner r's state
// storage, and the namespace of that storage; a storage no agent serves has none.
func stateOperationsPending(tx Tx, org string, r *api.Runner) (pending bool, ns string, err error) {
	var st api.StateStorage
	ok, err := tx.GetDoc(KindStorage, org, r.StateStorageID, &st)
	if err != nil || !ok || st.Type != api.StateStorageKubernetes || st.Kubernetes == nil {
		return false, "", err // none, or no state storage an agent serves: nothing for it here
	}
	var q stateOperationQueue
	_, err = tx.GetDoc(KindStateOperationQueue, org, st.ID, &q)
	return len(q.IDs) > 0, st.Kubernetes.Namespace, err
}

// TakeStateOperations returns the state operations the polling agent is to run: the queued ones
// of its runner's kubernetes state storage, now marked running for its runner, and those it
// took before without posting a result yet (the answer that carried them may have been lost;
// the agent runs an operation once and posts its result again). taken counts the newly taken
// ones. A poll finds nothing to do with one read.
func (s *Store) TakeStateOperations(ctx context.Context, id agentauth.Identity) (offers []api.StateOperationOffer, taken int, err error) {
	var pending bool
	var ns string
	if err := s.view(ctx, func(tx Tx) error {
		r, err := agentRunnerTx(tx, id)
		if err != nil {
			return err
		}
		pending, ns, err = stateOperationsPending(tx, id.Org, r)
		return err
	}); err != nil || !pending {
		return nil, 0, err
	}
	err = s.Update(ctx, func(tx Tx) error {
		offers, taken = nil, 0
		r, err := agentRunnerTx(tx, id)
		if err != nil {
			return err
		}
		var q stateOperationQueue
		if _, err := tx.GetDoc(KindStateOperationQueue, id.Org, r.StateStorageID, &q); err != nil {
			return err
		}
		now := s.TimeNow()
		for _, opID := range q.IDs {
			op, err := getOrgObject[api.StateOperation](tx, KindStateOperation, id.Org, opID, "state operation")
			if err != nil {
				return err
			}
			switch {
			case expireStateOperation(op, now):
				if err := endStateOperationTx(tx, id.Org, op); err != nil {
					return err
				}
				continue
			case op.Status == api.StateOperationQueued:
				op.Status, op.RunnerID, op.StartedAt = api.StateOperationRunning, id.RunnerID, &now
				if err := tx.PutDoc(KindStateOperation, id.Org, op.ID, op); err != nil {
					return err
				}
				taken++
			case op.RunnerID != id.RunnerID:
				continue // another runner's agent runs it
			}
			offers = append(offers, api.StateOperationOffer{ID: op.ID, Namespace: ns, StateKey: op.StateKey,
				StateOperationInput: op.StateOperationInput, RequestedBy: op.RequestedBy})
		}
		return nil
	})
	return offers, taken, err
}

// RecordStateOperationResult keeps the result an agent posts for an operation its runner took.
// An agent speaks only for operations on its runner's state storage: any other gets the 404 an
// unknown one does. A result for an operation that already ended changes nothing and gets the
// operation as it is, so a result posted twice is harmless.
func (s *Store) RecordStateOperationResult(ctx context.Context, id agentauth.Identity, opID string, res api.StateOperationResult) (*api.StateOperation, error) {
	var out *api.StateOperation
	err := s.Update(ctx, func(tx Tx) error {
		now := s.TimeNow()
		r, err := touchRunner(tx, id, "", now)
		if err != nil {
			return err
		}
		op := &api.StateOperation{}
		ok, err := tx.GetDoc(KindStateOperation, id.Org, opID, op)
		if err != nil {
			return err
		}
		if !ok || op.StateStorageID != r.StateStorageID {
			return NotFound("state operation %q is not one on runner %q's state storage", opID, id.RunnerID)
		}
		out = op
		if op.Status.Terminal() {
			return nil
		}
		if op.RunnerID != "" && op.RunnerID != id.RunnerID {
			return conflict("state operation %q was taken by runner %q", opID, op.RunnerID)
		}
		if err := res.Validate(op.Kind); err != nil {
			return err
		}
		op.Status, op.RunnerID, op.EndedAt, op.StateOperationOutcome = res.Status, id.RunnerID, &now, res.StateOperationOutcome
		op.StartedAt = cmp.Or(op.StartedAt, &now)
		return endStateOperationTx(tx, id.Org, op)
	})
	return out, err
}

// deleteStateOperationsTx removes the operations of a deleted state storage.
func deleteStateOperationsTx(tx Tx, org, storage string) error {
	var ids []string
	if err := tx.ListDocs(KindStateOperation, org, func(data []byte) (bool, error) {
		var op api.StateOperation
		if err := Unmarshal(data, &op); err != nil {
			return false, err
		}
		if op.StateStorageID == storage {
			ids = append(ids, op.ID)
		}
		return true, nil
	}); err != nil {
		return err
	}
	for _, id := range ids {
		if err := tx.DeleteDoc(KindStateOperation, org, id); err != nil {
			return fmt.Errorf("delete state operation %s: %w", id, err)
		}
	}
	return tx.DeleteDoc(KindStateOperationQueue, org, storage)
}
