package orchestrator

import (
	"context"
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// validateRunner checks a runner body, pod template and job pod settings included (package api leaves that check to
// package podtemplate, which has the Kubernetes types).
func validateRunner(in *api.RunnerInput) error {
	if err := in.Validate(); err != nil {
		return err
	}
	if err := podtemplate.Validate("job.pod_template", in.Job.PodTemplate); err != nil {
		return err
	}
	return podtemplate.ValidatePod("job.pod", in.Job.Pod, in.Job.PodTemplate)
}

// runnerView fills in what is computed, not stored: whether the agent is connected now.
func (s *Server) runnerView(org string, r *api.Runner) api.Runner {
	out := *r
	now := s.cfg.Now()
	recent := r.Status.LastSeenAt != nil && now.Sub(*r.Status.LastSeenAt) < ConnectedWindow
	out.Status.Connected = recent || s.notify.Polling(org+"/"+r.ID)
	return out
}

// runnerViewOf is runnerView of what a store call returned, passing its error on.
func (s *Server) runnerViewOf(org string, r *api.Runner, err error) (api.Runner, error) {
	if err != nil {
		return api.Runner{}, err
	}
	return s.runnerView(org, r), nil
}

func (s *Server) createRunner(w http.ResponseWriter, r *http.Request, c *call) error {
	return create(w, r, c, validateRunner, func(ctx context.Context, in api.RunnerInput) (api.Runner, error) {
		out, err := s.store.CreateRunner(ctx, c.org, in)
		return s.runnerViewOf(c.org, out, err)
	})
}

func (s *Server) listRunners(w http.ResponseWriter, r *http.Request, c *call) error {
	list, err := s.store.ListRunners(r.Context(), c.org)
	for i := range list {
		list[i] = s.runnerView(c.org, &list[i])
	}
	return listed(w, list, err)
}

func (s *Server) getRunner(w http.ResponseWriter, r *http.Request, c *call) error {
	return read(w, r, func(ctx context.Context, id string) (api.Runner, error) {
		out, err := s.store.GetRunner(ctx, c.org, id)
		return s.runnerViewOf(c.org, out, err)
	})
}

func (s *Server) updateRunner(w http.ResponseWriter, r *http.Request, c *call) error {
	idOf := func(in *api.RunnerInput) *string { return &in.ID }
	return replace(w, r, c, "runner", idOf, validateRunner, func(ctx context.Context, in api.RunnerInput) (api.Runner, error) {
		out, err := s.store.UpdateRunner(ctx, c.org, in)
		if err == nil {
			// max_concurrency may have changed: let a waiting poll hand out offers under the new
			// limit.
			s.notify.Wake(c.org + "/" + in.ID)
		}
		return s.runnerViewOf(c.org, out, err)
	})
}

func (s *Server) deleteRunner(w http.ResponseWriter, r *http.Request, c *call) error {
	return remove(w, r, func(ctx context.Context, id string) error {
		err := s.store.DeleteRunner(ctx, c.org, id)
		if err == nil {
			s.notify.Wake(c.org + "/" + id)
		}
		return err
	})
}
