package orchestrator

import (
	"context"
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// State operations on the admin side: asked for here, run by the agent that serves the state
// storage (it takes them with its poll), read back here once it posted the result.

// createStateOperation queues a show, diff or rollback of a state and wakes the polls of the
// runners whose agents may take it.
func (s *Server) createStateOperation(w http.ResponseWriter, r *http.Request, c *call) error {
	storage, err := pathID(r)
	if err != nil {
		return err
	}
	return create(w, r, c, (*api.StateOperationRequest).Validate, func(ctx context.Context, in api.StateOperationRequest) (*api.StateOperation, error) {
		op, runners, err := s.store.CreateStateOperation(ctx, c.org, storage, in.StateKey, in.StateOperationInput, requestedBy(c.admin))
		for _, rn := range runners {
			s.notify.Wake(c.org + "/" + rn)
		}
		return op, err
	})
}

// requestedBy names the admin token of a request in the operation's record: its name and id,
// never the token.
func requestedBy(p principal) string {
	if p.bootstrap {
		return "admin"
	}
	return "token " + p.tokenName + " (" + p.tokenID + ")"
}

// getStateOperation answers one state operation: its status and, once ended, its result.
func (s *Server) getStateOperation(w http.ResponseWriter, r *http.Request, c *call) error {
	return read(w, r, func(ctx context.Context, id string) (*api.StateOperation, error) {
		return s.store.GetStateOperation(ctx, c.org, id)
	})
}

// listStateOperations lists the operations on a state storage, newest first, optionally of one
// state key (state_key) and kind (kind): kind=rollback is the record of rollbacks.
func (s *Server) listStateOperations(w http.ResponseWriter, r *http.Request, c *call) error {
	storage, err := pathID(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	key, kind := q.Get("state_key"), api.StateOperationKind(q.Get("kind"))
	if key != "" {
		if err := api.ValidateStateKey("state_key", key); err != nil {
			return err
		}
	}
	switch kind {
	case "", api.StateOperationShow, api.StateOperationDiff, api.StateOperationRollback:
	default:
		return store.Invalid("kind", "%q is not a state operation; use show, diff or rollback", kind)
	}
	list, err := s.store.ListStateOperations(r.Context(), c.org, storage, key, kind)
	return listed(w, list, err)
}

// stateOperationResult takes the result of a state operation from the agent that ran it.
func (s *Server) stateOperationResult(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var res api.StateOperationResult
	if err := decodeJSON(c.body, &res); err != nil {
		return err
	}
	op, err := s.store.RecordStateOperationResult(r.Context(), c.agent, id, res)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, op)
	return nil
}
