package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// TestPlanReview: a saved plan reads as a reviewer wants it: actions with their markers, the
// attribute names that change, why a resource is replaced, drift, outputs (sensitive ones
// marked, never a value), the counts, who approved and what to do next.
func TestPlanReview(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	approved, expires := now.Add(-time.Hour), now.Add(23*time.Hour)
	p := &api.SavedPlan{DeploymentID: "dep-4kq2x7mbh3z9p", Status: api.PlanApproved, ApprovedBy: "org acme token tok-1 (alice)", ApprovedAt: &approved, ExpiresAt: &expires,
		Summary: &api.PlanSummary{Lineage: "6f1c2f0e", Serial: 7, Counts: api.PlanCounts{Create: 1, Update: 1, Replace: 1, Delete: 1},
			ResourceChanges: []api.ResourceChange{
				{Address: "aws_s3_bucket.logs", Action: api.PlanCreate},
				{Address: "aws_instance.web", Action: api.PlanUpdate, Attributes: []string{"instance_type", "tags"}},
				{Address: "aws_db_instance.main", Action: api.PlanReplace, ReplaceBecause: []string{"engine"}, Attributes: []string{"engine"}, Reason: "replace_because_cannot_update"},
				{Address: "aws_iam_role.old", Action: api.PlanDelete, Reason: "delete_because_no_resource_config"},
			},
			Drift:         []api.ResourceChange{{Address: "aws_instance.web", Action: api.PlanUpdate, Attributes: []string{"tags"}}},
			OutputChanges: []api.OutputChange{{Name: "url", Action: api.PlanCreate}, {Name: "db_password", Action: api.PlanUpdate, Sensitive: true}}}}
	var b bytes.Buffer
	printPlan(&b, now, p)
	golden(t, "deployment-plan.txt", b.String())
}
