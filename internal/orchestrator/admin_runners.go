package orchestrator

import (
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// validateRunner checks a runner body, pod template included (package api leaves that check to
// package podtemplate, which has the Kubernetes types).
func validateRunner(in *api.RunnerInput) error {
	if err := in.Validate(); err != nil {
		return err
	}
	return podtemplate.Validate("job.pod_template", in.Job.PodTemplate)
}

// runnerView fills in what is computed, not stored: whether the agent is connected now.
func (s *Server) runnerView(org string, r *api.Runner) api.Runner {
	out := *r
	now := s.cfg.Now()
	recent := r.Status.LastSeenAt != nil && now.Sub(*r.Status.LastSeenAt) < ConnectedWindow
	out.Status.Connected = recent || s.notify.polling(org+"/"+r.ID)
	return out
}

func (s *Server) createRunner(w http.ResponseWriter, r *http.Request, c *call) error {
	var in api.RunnerInput
	if err := decodeJSON(c.body, &in); err != nil {
		return err
	}
	if err := validateRunner(&in); err != nil {
		return err
	}
	out, err := s.store.createRunner(r.Context(), c.org, in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, s.runnerView(c.org, out))
	return nil
}

func (s *Server) listRunners(w http.ResponseWriter, r *http.Request, c *call) error {
	list, err := s.store.listRunners(r.Context(), c.org)
	if err != nil {
		return err
	}
	for i := range list {
		list[i] = s.runnerView(c.org, &list[i])
	}
	writeJSON(w, http.StatusOK, api.List[api.Runner]{Items: list})
	return nil
}

func (s *Server) getRunner(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	out, err := s.store.getRunner(r.Context(), c.org, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.runnerView(c.org, out))
	return nil
}

func (s *Server) updateRunner(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var in api.RunnerInput
	if err := decodeJSON(c.body, &in); err != nil {
		return err
	}
	if in.ID == "" {
		in.ID = id
	}
	if in.ID != id {
		return invalid("id", "%q does not match the id %q in the path; a runner's id cannot change", in.ID, id)
	}
	if err := validateRunner(&in); err != nil {
		return err
	}
	out, err := s.store.updateRunner(r.Context(), c.org, in)
	if err != nil {
		return err
	}
	// max_concurrency may have changed: let a waiting poll hand out offers under the new limit.
	s.notify.wake(c.org + "/" + id)
	writeJSON(w, http.StatusOK, s.runnerView(c.org, out))
	return nil
}

func (s *Server) deleteRunner(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := s.store.deleteRunner(r.Context(), c.org, id); err != nil {
		return err
	}
	s.notify.wake(c.org + "/" + id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
