package client

import (
	"context"
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// CreateSchedule stores a schedule of drift checks. api.ErrConflict when the id is taken.
func (c *AdminClient) CreateSchedule(ctx context.Context, in api.ScheduleInput) (*api.Schedule, error) {
	return roundTrip[api.Schedule](ctx, c.t, call{method: http.MethodPost, path: c.path("schedules"), retryable: retry.Unapplied}, in)
}

// GetSchedule reads a schedule with its last check. api.ErrNotFound when it does not exist.
func (c *AdminClient) GetSchedule(ctx context.Context, id string) (*api.Schedule, error) {
	return roundTrip[api.Schedule](ctx, c.t, call{method: http.MethodGet, path: c.path("schedules", id), retryable: retry.Idempotent}, nil)
}

// ListSchedules lists the organisation's schedules, without their inline archives.
func (c *AdminClient) ListSchedules(ctx context.Context) ([]api.Schedule, error) {
	return items(roundTrip[api.List[api.Schedule]](ctx, c.t, call{method: http.MethodGet, path: c.path("schedules"), retryable: retry.Idempotent}, nil))
}

// UpdateSchedule replaces a schedule's settings.
func (c *AdminClient) UpdateSchedule(ctx context.Context, in api.ScheduleInput) (*api.Schedule, error) {
	return roundTrip[api.Schedule](ctx, c.t, call{method: http.MethodPut, path: c.path("schedules", in.ID), retryable: retry.Idempotent}, in)
}

// DeleteSchedule removes a schedule.
func (c *AdminClient) DeleteSchedule(ctx context.Context, id string) error {
	return c.t.do(ctx, call{method: http.MethodDelete, path: c.path("schedules", id), retryable: retry.Idempotent})
}

// PutDrift reports a drift check's result: whether its plan found changes, and their summary.
func (c *JobClient) PutDrift(ctx context.Context, rep api.DriftReport) error {
	body, err := jsonBody(rep)
	if err != nil {
		return err
	}
	return c.t.do(ctx, call{method: http.MethodPut, path: "/api/v1/job/drift", body: body, retryable: retry.Idempotent})
}
