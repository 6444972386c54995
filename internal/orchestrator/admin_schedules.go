package orchestrator

import (
	"context"
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Schedules of drift checks (admin side). Firing is the sweeper's (sweep.go), the rules the
// store's (store/store_schedules.go).

func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request, c *call) error {
	return create(w, r, c, (*api.ScheduleInput).Validate, func(ctx context.Context, in api.ScheduleInput) (*api.Schedule, error) {
		return s.store.CreateSchedule(ctx, c.org, in)
	})
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request, c *call) error {
	list, err := s.store.ListSchedules(r.Context(), c.org)
	return listed(w, list, err)
}

func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request, c *call) error {
	return read(w, r, func(ctx context.Context, id string) (*api.Schedule, error) {
		return s.store.GetSchedule(ctx, c.org, id)
	})
}

func (s *Server) updateSchedule(w http.ResponseWriter, r *http.Request, c *call) error {
	idOf := func(in *api.ScheduleInput) *string { return &in.ID }
	return replace(w, r, c, "schedule", idOf, (*api.ScheduleInput).Validate, func(ctx context.Context, in api.ScheduleInput) (*api.Schedule, error) {
		return s.store.UpdateSchedule(ctx, c.org, in)
	})
}

func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request, c *call) error {
	return remove(w, r, func(ctx context.Context, id string) error { return s.store.DeleteSchedule(ctx, c.org, id) })
}

// putDrift takes a drift check's result from its job runner.
func (s *Server) putDrift(w http.ResponseWriter, r *http.Request, c *call) error {
	var rep api.DriftReport
	if err := decodeJSON(c.body, &rep); err != nil {
		return err
	}
	if err := s.store.RecordDrift(r.Context(), c.job, rep, s.cfg.JobTokenGrace); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
