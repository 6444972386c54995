package orchestrator

import (
	"context"
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

func (s *Server) createStorage(w http.ResponseWriter, r *http.Request, c *call) error {
	return create(w, r, c, (*api.StateStorageInput).Validate, func(ctx context.Context, in api.StateStorageInput) (*api.StateStorage, error) {
		return s.store.CreateStorage(ctx, c.org, in)
	})
}

func (s *Server) listStorages(w http.ResponseWriter, r *http.Request, c *call) error {
	list, err := s.store.ListStorages(r.Context(), c.org)
	return listed(w, list, err)
}

func (s *Server) getStorage(w http.ResponseWriter, r *http.Request, c *call) error {
	return read(w, r, func(ctx context.Context, id string) (*api.StateStorage, error) {
		return s.store.GetStorage(ctx, c.org, id)
	})
}

func (s *Server) updateStorage(w http.ResponseWriter, r *http.Request, c *call) error {
	idOf := func(in *api.StateStorageInput) *string { return &in.ID }
	return replace(w, r, c, "state storage", idOf, (*api.StateStorageInput).Validate, func(ctx context.Context, in api.StateStorageInput) (*api.StateStorage, error) {
		return s.store.UpdateStorage(ctx, c.org, in)
	})
}

func (s *Server) deleteStorage(w http.ResponseWriter, r *http.Request, c *call) error {
	return remove(w, r, func(ctx context.Context, id string) error { return s.store.DeleteStorage(ctx, c.org, id) })
}

// listStates answers what the agents reported of the states of a state storage.
func (s *Server) listStates(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	list, err := s.store.ListStates(r.Context(), c.org, id)
	return listed(w, list, err)
}

// getState answers what the agent reported of one state: its kept versions and its lock.
func (s *Server) getState(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	key := r.PathValue("key")
	if err := api.ValidateStateKey("key", key); err != nil {
		return err
	}
	st, err := s.store.GetState(r.Context(), c.org, id, key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}
