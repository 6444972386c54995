package orchestrator

import (
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

func (s *Server) createStorage(w http.ResponseWriter, r *http.Request, c *call) error {
	var in api.StateStorageInput
	if err := decodeJSON(c.body, &in); err != nil {
		return err
	}
	if err := in.Validate(); err != nil {
		return err
	}
	out, err := s.store.createStorage(r.Context(), c.org, in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) listStorages(w http.ResponseWriter, r *http.Request, c *call) error {
	list, err := s.store.listStorages(r.Context(), c.org)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.List[api.StateStorage]{Items: list})
	return nil
}

func (s *Server) getStorage(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	out, err := s.store.getStorage(r.Context(), c.org, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) updateStorage(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var in api.StateStorageInput
	if err := decodeJSON(c.body, &in); err != nil {
		return err
	}
	if in.ID == "" {
		in.ID = id
	}
	if in.ID != id {
		return invalid("id", "%q does not match the id %q in the path; a state storage's id cannot change", in.ID, id)
	}
	if err := in.Validate(); err != nil {
		return err
	}
	out, err := s.store.updateStorage(r.Context(), c.org, in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteStorage(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := s.store.deleteStorage(r.Context(), c.org, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
