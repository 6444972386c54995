package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedules and drift: a schedule queues a drift check (a plan with -detailed-exitcode) of one
// state key at its cron times; a check that finds changes marks the state key drifted with the
// plan's summary, and a later check without changes clears the mark.

// OnDrift is what a schedule does when its check finds drift.
type OnDrift string

// What a schedule may do on drift.
const (
	// OnDriftNone only marks the state key drifted.
	OnDriftNone OnDrift = "none"
	// OnDriftQueueApply makes each check a saved plan: one that finds drift is kept for review,
	// and its apply, once approved, applies exactly that plan; one that finds nothing is
	// discarded.
	OnDriftQueueApply OnDrift = "queue_apply"
)

// Valid reports whether o is one of the values above.
func (o OnDrift) Valid() bool { return o == OnDriftNone || o == OnDriftQueueApply }

// ScheduleInput is the body of schedule create (POST) and update (PUT).
type ScheduleInput struct {
	ID       string `json:"id"`
	RunnerID string `json:"runner_id"`
	Source   Source `json:"source"`
	// Variables are Terraform input variables; values are any JSON.
	Variables map[string]json.RawMessage `json:"variables,omitempty"`
	// StateKey names the state the checks plan against, in the runner's state storage.
	StateKey string `json:"state_key"`
	// Cron is when the checks run, in UTC: five fields (minute hour day-of-month month
	// day-of-week), six with seconds first, or a descriptor (@hourly, @daily, @every 30m).
	Cron string `json:"cron"`
	// OnDrift is what a check that finds drift does besides marking the state key (default none).
	OnDrift OnDrift `json:"on_drift,omitempty"`
	// Enabled is whether the schedule fires (default true).
	Enabled *bool `json:"enabled,omitempty"`
	// TimeoutSeconds overrides the runner's job timeout for the checks when set.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

// IsEnabled is Enabled with its default.
func (in *ScheduleInput) IsEnabled() bool { return in.Enabled == nil || *in.Enabled }

// Schedule is a stored schedule with what the orchestrator derived and saw.
type Schedule struct {
	ScheduleInput
	// StateStorageID is the runner's state storage, where the state key is.
	StateStorageID string `json:"state_storage_id"`
	// NextFireAt is the next cron time after the last firing (or the creation); a sweep at or
	// after it queues one check and moves it on. Missed periods fire once, not once each.
	NextFireAt time.Time `json:"next_fire_at"`
	// LastFiredAt and LastDeploymentID are the last firing and the check it queued.
	LastFiredAt      *time.Time `json:"last_fired_at,omitempty"`
	LastDeploymentID string     `json:"last_deployment_id,omitempty"`
	// LastMessage says why the last firing queued nothing (the previous check still runs, the
	// queue quota is full), or what the last check's on_drift did.
	LastMessage string `json:"last_message,omitempty"`
	// LastCheck is the result of the last check that reported one.
	LastCheck *Drift    `json:"last_check,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Drift is the result of a drift check of a state key: whether the infrastructure differs from
// the configuration and the state, and the plan's summary of what differs (names only).
type Drift struct {
	StateStorageID string `json:"state_storage_id"`
	StateKey       string `json:"state_key"`
	// Drifted is true when the check's plan found changes (its exit code 2).
	Drifted bool `json:"drifted"`
	// DeploymentID and ScheduleID name the check and the schedule that queued it.
	DeploymentID string    `json:"deployment_id"`
	ScheduleID   string    `json:"schedule_id,omitempty"`
	CheckedAt    time.Time `json:"checked_at"`
	// Summary is what the plan would change, as api.PlanSummary: its Drift lists what changed
	// outside Terraform/OpenTofu, its ResourceChanges what an apply would do about it.
	Summary *PlanSummary `json:"summary,omitempty"`
}

// DriftReport is the body the job runner of a drift check sends (PUT /api/v1/job/drift).
type DriftReport struct {
	// Drifted is the plan's exit code 2; false for 0.
	Drifted bool         `json:"drifted"`
	Summary *PlanSummary `json:"summary,omitempty"`
}

// cronParser takes five fields, six with seconds first, and descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// CronSchedule is a parsed cron expression, evaluated in UTC.
type CronSchedule struct{ s cron.Schedule }

// Next is the first cron time after t, in UTC.
func (c CronSchedule) Next(t time.Time) time.Time { return c.s.Next(t.UTC()).UTC() }

// ParseCron parses a schedule's cron expression; times are UTC, so a time zone prefix is
// refused rather than silently ignored.
func ParseCron(expr string) (CronSchedule, error) {
	e := strings.TrimSpace(expr)
	if strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ=") {
		return CronSchedule{}, fmt.Errorf("%q names a time zone; schedules run in UTC, so give the times in UTC without TZ=", expr)
	}
	s, err := cronParser.Parse(e)
	if err != nil {
		return CronSchedule{}, fmt.Errorf("%q is not a cron expression (five fields minute hour day-of-month month day-of-week, six with seconds first, or @hourly, @daily, @every 30m): %w", expr, err)
	}
	if spec, ok := s.(*cron.SpecSchedule); ok {
		spec.Location = time.UTC
	}
	return CronSchedule{s: s}, nil
}

// Validate checks a schedule input.
func (in *ScheduleInput) Validate() error {
	if err := ValidateID("id", in.ID); err != nil {
		return err
	}
	d := DeploymentInput{RunnerID: in.RunnerID, Operation: OperationPlan, Source: in.Source, Variables: in.Variables, StateKey: in.StateKey, TimeoutSeconds: in.TimeoutSeconds}
	if err := d.Validate(); err != nil {
		return err
	}
	if _, err := ParseCron(in.Cron); err != nil {
		return fieldErr("cron", "%v", err)
	}
	if in.OnDrift != "" && !in.OnDrift.Valid() {
		return fieldErr("on_drift", "%q is not none or queue_apply", in.OnDrift)
	}
	return nil
}
