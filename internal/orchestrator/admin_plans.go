package orchestrator

import (
	"context"
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// The saved plan of a plan deployment: its summary, its review and the apply of it. Who approves,
// discards or applies is the admin token of the request (its id and name), kept with the plan
// and in its events.

func (s *Server) getPlan(w http.ResponseWriter, r *http.Request, c *call) error {
	return read(w, r, func(ctx context.Context, id string) (*api.SavedPlan, error) {
		return s.store.GetPlan(ctx, c.org, id)
	})
}

func (s *Server) approvePlan(w http.ResponseWriter, r *http.Request, c *call) error {
	return read(w, r, func(ctx context.Context, id string) (*api.SavedPlan, error) {
		return s.store.ApprovePlan(ctx, c.org, id, c.admin.String())
	})
}

func (s *Server) discardPlan(w http.ResponseWriter, r *http.Request, c *call) error {
	return read(w, r, func(ctx context.Context, id string) (*api.SavedPlan, error) {
		return s.store.DiscardPlan(ctx, c.org, id, c.admin.String())
	})
}

// applyPlan queues the apply of an approved saved plan: 201 with the new apply deployment.
func (s *Server) applyPlan(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	out, err := s.store.ApplyPlan(r.Context(), c.org, id, c.admin.String())
	if err != nil {
		return err
	}
	s.notify.Wake(c.org + "/" + out.RunnerID)
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// putPlanSummary keeps the summary of a save_plan deployment's plan (names only; the plan file
// stays in the cluster).
func (s *Server) putPlanSummary(w http.ResponseWriter, r *http.Request, c *call) error {
	var sum api.PlanSummary
	if err := decodeJSON(c.body, &sum); err != nil {
		return err
	}
	if err := api.ValidatePlanSummary(&sum); err != nil {
		return err
	}
	if err := s.store.PutPlanSummary(r.Context(), c.job, sum, s.cfg.JobTokenGrace); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
