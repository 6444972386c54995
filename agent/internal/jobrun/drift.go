package jobrun

import (
	"fmt"
	"path/filepath"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// A drift check (api.JobSpec.DriftCheck, queued by a schedule) is a plan run with
// -detailed-exitcode into a plan file: exit code 2 means the plan found changes, which is the
// check's finding and not a failure; 0 means none. The job runner then summarises the plan
// (names only, plansummary.FromPlan over `show -json`) and reports both with PUT
// /api/v1/job/drift. The plan file stays in the attempt's work directory.

// exitChanges is the CLI's -detailed-exitcode for a plan with changes.
const exitChanges = 2

// driftPlanFile is the drift check's plan file in the work directory.
func driftPlanFile(workDir string) string { return filepath.Join(workDir, "drift.tfplan") }

// driftCheckArgs are the CLI arguments of a drift check's plan.
func driftCheckArgs(workDir string) []string {
	return append(operationArgs(api.OperationPlan), "-detailed-exitcode", "-out="+driftPlanFile(workDir))
}

// reportDrift summarises the drift check's plan when it found changes and reports the result.
// It returns the job runner's exit code (0 when the report was taken) and the summary, if made.
func (j *attemptRun) reportDrift(cli, cliPath, configDir, workDir string, env []string, drifted bool) (int, *api.PlanSummary) {
	rep := api.DriftReport{Drifted: drifted}
	if drifted {
		summary, err := j.summarisePlan(cli, cliPath, configDir, workDir, driftPlanFile(workDir), env)
		if err != nil {
			fmt.Fprintf(j.out, "==> error: %v; the drift check's result was not reported\n", err)
			return ExitOutputsFailed, nil
		}
		rep.Summary = &summary
	}
	ctx, cancel := boundedContext(outputsTimeout, j.st)
	defer cancel()
	if err := j.client.PutDrift(ctx, rep); err != nil {
		fmt.Fprintf(j.out, "==> error: report the drift check's result: %v\n", err)
		return ExitOutputsFailed, nil
	}
	if !drifted {
		fmt.Fprintln(j.out, "==> drift check: no changes; the infrastructure matches the configuration and the state")
		return 0, nil
	}
	fmt.Fprintf(j.out, "==> drift check: changes found and reported (%d changed outside %s, %d to change: %d create, %d update, %d replace, %d delete)\n",
		len(rep.Summary.Drift), cli, len(rep.Summary.ResourceChanges), rep.Summary.Counts.Create, rep.Summary.Counts.Update, rep.Summary.Counts.Replace, rep.Summary.Counts.Delete)
	return 0, rep.Summary
}
