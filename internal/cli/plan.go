package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// The review of saved plans: show a plan deployment's summary, approve or discard it, and apply
// the approved plan.

func (a *app) deploymentPlanCommand() *cobra.Command {
	return a.onDeployment(&cobra.Command{
		Use:   "plan ID",
		Short: "Show the saved plan of a plan deployment (deploy --save-plan) for review",
		Long: `Show what the saved plan of a plan deployment changes, as a reviewer reads it: each resource
with its action (+ create, ~ update, -/+ replace, - delete, <= read, forget), the attributes that
change (their names; values never leave the cluster) and why a resource is replaced, the changes
found outside Terraform (drift), the outputs that change, the counts, and the state serial the plan
was made against. Then where the plan stands: ready for review, approved (by whom, when), applied
(by which deployment), discarded or expired.`,
		Example: "  outpost deployment plan dep-4kq2x7mbh3z9p\n  outpost deployment plan dep-4kq2x7mbh3z9p -o json | jq '.summary.counts'",
	}, func(ctx context.Context, s *session, args []string) error {
		p, err := s.GetPlan(ctx, args[0])
		if err != nil {
			return err
		}
		return a.print(p, func(w io.Writer) { printPlan(w, a.env.Now(), p) })
	})
}

// planSymbols are the markers of plan actions, as the CLIs print them.
var planSymbols = map[api.PlanAction]string{
	api.PlanCreate: "+", api.PlanUpdate: "~", api.PlanReplace: "-/+", api.PlanDelete: "-", api.PlanRead: "<=", api.PlanForget: ".",
}

// printPlan prints a saved plan for a reviewer.
func printPlan(w io.Writer, now time.Time, p *api.SavedPlan) {
	fmt.Fprintf(w, "Saved plan of deployment %s: %s\n", p.DeploymentID, planStanding(now, p))
	sum := p.Summary
	if sum == nil {
		fmt.Fprintln(w, "No summary yet: the plan has not finished. Follow it: outpost deployment logs "+p.DeploymentID+" --follow")
		return
	}
	fmt.Fprintf(w, "Made against serial %d of the state (lineage %s).\n", sum.Serial, orDash(sum.Lineage))
	changes := func(title string, list []api.ResourceChange) {
		if len(list) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s\n", title)
		for _, rc := range list {
			line := fmt.Sprintf("  %-3s %-7s %s", planSymbols[rc.Action], rc.Action, rc.Address)
			if rc.PreviousAddress != "" {
				line += " (moved from " + rc.PreviousAddress + ")"
			}
			if len(rc.Attributes) > 0 {
				line += "  changes: " + strings.Join(rc.Attributes, ", ")
			}
			if len(rc.ReplaceBecause) > 0 {
				line += "  replaced because of: " + strings.Join(rc.ReplaceBecause, ", ")
			}
			if rc.Reason != "" {
				line += "  [" + rc.Reason + "]"
			}
			fmt.Fprintln(w, line)
		}
	}
	changes("Resources:", sum.ResourceChanges)
	changes("Changed outside Terraform since the last apply (drift):", sum.Drift)
	if len(sum.OutputChanges) > 0 {
		fmt.Fprintln(w, "\nOutputs:")
		for _, oc := range sum.OutputChanges {
			note := ""
			if oc.Sensitive {
				note = "  (sensitive)"
			}
			fmt.Fprintf(w, "  %-3s %-7s %s%s\n", planSymbols[oc.Action], oc.Action, oc.Name, note)
		}
	}
	c := sum.Counts
	fmt.Fprintf(w, "\nPlan: %d to create, %d to update, %d to replace, %d to delete", c.Create, c.Update, c.Replace, c.Delete)
	if c.Read > 0 || c.Forget > 0 {
		fmt.Fprintf(w, ", %d to read, %d to forget", c.Read, c.Forget)
	}
	fmt.Fprintln(w, ".")
	if !sum.Changes() {
		fmt.Fprintln(w, "No changes: applying this plan changes nothing.")
	}
	switch p.Status {
	case api.PlanReady:
		fmt.Fprintf(w, "\nApprove it: outpost deployment approve %s (or discard it: outpost deployment discard %s)\n", p.DeploymentID, p.DeploymentID)
	case api.PlanApproved:
		fmt.Fprintf(w, "\nApply it: outpost deployment apply-plan %s --follow\n", p.DeploymentID)
	}
}

// planStanding says where a saved plan stands, in a sentence.
func planStanding(now time.Time, p *api.SavedPlan) string {
	at := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return " at " + t.Local().Format(time.RFC3339)
	}
	expires := ""
	if p.ExpiresAt != nil {
		expires = fmt.Sprintf("; expires in %s", p.ExpiresAt.Sub(now).Round(time.Second))
	}
	switch p.Status {
	case api.PlanPending:
		return "pending (the plan deployment has not succeeded yet)"
	case api.PlanReady:
		return "ready for review" + expires
	case api.PlanApproved:
		return "approved by " + p.ApprovedBy + at(p.ApprovedAt) + expires
	case api.PlanApplied:
		return "applied by deployment " + p.AppliedBy + at(p.AppliedAt)
	case api.PlanDiscarded:
		return "discarded by " + p.DiscardedBy + at(p.DiscardedAt)
	case api.PlanExpired:
		return "expired" + at(p.ExpiresAt) + "; queue a new plan"
	}
	return string(p.Status)
}

func (a *app) deploymentApproveCommand() *cobra.Command {
	return a.onDeployment(&cobra.Command{
		Use:   "approve ID",
		Short: "Approve the saved plan of a plan deployment, so it can be applied",
		Long: `Approve the saved plan of a plan deployment once you reviewed it (outpost deployment plan ID).
The orchestrator records your token and the time, as an event of the deployment. Approving does not
apply: apply it with outpost deployment apply-plan ID. A plan that is not ready (still running),
expired, applied or discarded cannot be approved (exit code 1).`,
		Example: "  outpost deployment approve dep-4kq2x7mbh3z9p",
	}, func(ctx context.Context, s *session, args []string) error {
		p, err := s.ApprovePlan(ctx, args[0])
		if err != nil {
			return err
		}
		return a.print(p, func(w io.Writer) {
			fmt.Fprintf(w, "Saved plan of deployment %s %s.\nApply it: outpost deployment apply-plan %s --follow\n", p.DeploymentID, planStanding(a.env.Now(), p), p.DeploymentID)
		})
	})
}

func (a *app) deploymentDiscardCommand() *cobra.Command {
	return a.onDeployment(&cobra.Command{
		Use:   "discard ID",
		Short: "Discard the saved plan of a plan deployment, so it is never applied",
		Long: `Discard the saved plan of a plan deployment: it can no longer be approved or applied. The
orchestrator records your token and the time, as an event of the deployment; the plan file in the
cluster is deleted by the agent when it expires. An applied plan cannot be discarded.`,
		Example: "  outpost deployment discard dep-4kq2x7mbh3z9p",
	}, func(ctx context.Context, s *session, args []string) error {
		p, err := s.DiscardPlan(ctx, args[0])
		if err != nil {
			return err
		}
		return a.print(p, func(w io.Writer) {
			fmt.Fprintf(w, "Saved plan of deployment %s %s.\n", p.DeploymentID, planStanding(a.env.Now(), p))
		})
	})
}

func (a *app) deploymentApplyPlanCommand() *cobra.Command {
	var follow bool
	cmd := a.onDeployment(&cobra.Command{
		Use:   "apply-plan ID [--follow]",
		Short: "Apply the approved saved plan of a plan deployment, exactly as reviewed",
		Long: `Queue the apply of the approved saved plan of a plan deployment: a new apply deployment with the
plan's source and variables, whose job runs apply on the plan file kept in the cluster, so exactly
the reviewed changes are applied. It is refused before anything runs (exit code 1, with the reason)
when the plan is not approved (plan_not_approved), expired (plan_expired), was applied already
(plan_applied), was discarded (plan_discarded), or the state changed since the plan was made
(stale_plan); the agent checks the state again before it creates the job, and a plan that went
stale meanwhile fails with reason stale_plan without running.

Without --follow it prints the new deployment's id; with --follow it streams the log until the
apply ends and exits with its result, like deploy --follow.`,
		Example: "  outpost deployment apply-plan dep-4kq2x7mbh3z9p --follow",
	}, func(ctx context.Context, s *session, args []string) error {
		dep, err := s.ApplyPlan(ctx, args[0])
		if err != nil {
			return err
		}
		if !follow {
			if !a.machine() {
				fmt.Fprintf(a.env.Stderr, "Applying the saved plan of %s as deployment %s. Follow it: outpost deployment logs %s --follow\n", args[0], dep.ID, dep.ID)
			}
			return a.print(dep, func(w io.Writer) { fmt.Fprintln(w, dep.ID) })
		}
		return a.follow(ctx, s, dep)
	})
	followFlag(cmd, &follow)
	return cmd
}
