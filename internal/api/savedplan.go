package api

import "time"

// Saved plans: a plan deployment with SavePlan keeps its plan file in the cluster, next to the
// state (the agent's state backend holds it, never the orchestrator), and sends the orchestrator
// only its PlanSummary. A person reviews the summary and approves it; an apply of the plan
// (POST …/deployments/{id}/apply) is then a new apply deployment with the plan's source and
// variables, whose job runner runs `apply <planfile>` on exactly that plan.

// Limits and defaults of saved plans.
const (
	// DefaultPlanTTLSeconds is how long a saved plan can be applied after it was made, when the
	// deployment does not say.
	DefaultPlanTTLSeconds = 24 * 3600
	// MinPlanTTLSeconds and MaxPlanTTLSeconds bound DeploymentInput.PlanTTLSeconds.
	MinPlanTTLSeconds = 10
	MaxPlanTTLSeconds = 7 * 24 * 3600
	// MaxPlanSummaryBytes is the largest summary a job runner may upload.
	MaxPlanSummaryBytes = 4 << 20
)

// PlanStatus is where a saved plan stands.
type PlanStatus string

// Saved plan statuses. Pending until the plan deployment succeeded with its summary uploaded,
// then ready for review; approved by a person; applied once an apply of it was queued (a plan
// is applied at most once); discarded by a person; expired once its time is up unless applied.
const (
	PlanPending   PlanStatus = "pending"
	PlanReady     PlanStatus = "ready"
	PlanApproved  PlanStatus = "approved"
	PlanApplied   PlanStatus = "applied"
	PlanDiscarded PlanStatus = "discarded"
	PlanExpired   PlanStatus = "expired"
)

// SavedPlan is the saved plan of a plan deployment, as GET …/deployments/{id}/plan returns it: its
// summary and its review.
type SavedPlan struct {
	// DeploymentID is the plan deployment.
	DeploymentID string     `json:"deployment_id"`
	Status       PlanStatus `json:"status"`
	// Summary is what the plan changes, by name only; nil until the job runner uploaded it.
	Summary *PlanSummary `json:"summary,omitempty"`
	// SavedAt is when the summary arrived; ExpiresAt is SavedAt plus the deployment's
	// plan_ttl_seconds: the plan file is deleted in the cluster then, and no apply of it is
	// queued after.
	SavedAt   *time.Time `json:"saved_at,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// ApprovedBy and DiscardedBy name the admin token that approved or discarded the plan (its
	// id and name), with when.
	ApprovedBy  string     `json:"approved_by,omitempty"`
	ApprovedAt  *time.Time `json:"approved_at,omitempty"`
	DiscardedBy string     `json:"discarded_by,omitempty"`
	DiscardedAt *time.Time `json:"discarded_at,omitempty"`
	// AppliedBy is the apply deployment of this plan, queued at AppliedAt.
	AppliedBy string     `json:"applied_by,omitempty"`
	AppliedAt *time.Time `json:"applied_at,omitempty"`
}

// PlanRef names the saved plan an apply runs, and the state it was made against, in the claim's
// placement: the agent refuses the claim (ReasonStalePlan, ReasonPlanExpired) before it creates
// anything when the state has moved since or the plan file is gone.
type PlanRef struct {
	DeploymentID string `json:"deployment_id"`
	Lineage      string `json:"lineage,omitempty"`
	Serial       int64  `json:"serial"`
}

// ValidatePlanSummary checks a summary a job runner uploads: names only, bounded.
func ValidatePlanSummary(s *PlanSummary) error {
	if s.Serial < 0 {
		return fieldErr("serial", "must not be negative")
	}
	if len(s.Lineage) > maxReportedText {
		return fieldErr("lineage", "at most %d bytes", maxReportedText)
	}
	for i, rc := range append(append([]ResourceChange{}, s.ResourceChanges...), s.Drift...) {
		if rc.Address == "" {
			return fieldErr("resource_changes", "entry %d has no address", i)
		}
		switch rc.Action {
		case PlanCreate, PlanUpdate, PlanReplace, PlanDelete, PlanRead, PlanForget:
		default:
			return fieldErr("resource_changes", "entry %d (%s): %q is not an action; use create, update, replace, delete, read or forget", i, rc.Address, rc.Action)
		}
	}
	for i, oc := range s.OutputChanges {
		if oc.Name == "" {
			return fieldErr("output_changes", "entry %d has no name", i)
		}
	}
	return nil
}
