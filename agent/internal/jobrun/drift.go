package jobrun

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/plansummary"
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
// It returns the job runner's exit code: 0 when the report was taken.
func (j *attemptRun) reportDrift(cli, cliPath, configDir, workDir string, env []string, drifted bool) int {
	rep := api.DriftReport{Drifted: drifted}
	if drifted {
		summary, err := j.summarisePlan(cli, cliPath, configDir, workDir, env)
		if err != nil {
			fmt.Fprintf(j.out, "==> error: %v; the drift check's result was not reported\n", err)
			return ExitOutputsFailed
		}
		rep.Summary = &summary
	}
	ctx, cancel := boundedContext(outputsTimeout, j.st)
	defer cancel()
	if err := j.client.PutDrift(ctx, rep); err != nil {
		fmt.Fprintf(j.out, "==> error: report the drift check's result: %v\n", err)
		return ExitOutputsFailed
	}
	if !drifted {
		fmt.Fprintln(j.out, "==> drift check: no changes; the infrastructure matches the configuration and the state")
		return 0
	}
	fmt.Fprintf(j.out, "==> drift check: changes found and reported (%d changed outside %s, %d to change: %d create, %d update, %d replace, %d delete)\n",
		len(rep.Summary.Drift), cli, len(rep.Summary.ResourceChanges), rep.Summary.Counts.Create, rep.Summary.Counts.Update, rep.Summary.Counts.Replace, rep.Summary.Counts.Delete)
	return 0
}

// summarisePlan runs `show -json` of the drift check's plan file into a file of the work
// directory (it holds values, so never into the log) and summarises it.
func (j *attemptRun) summarisePlan(cli, cliPath, configDir, workDir string, env []string) (api.PlanSummary, error) {
	planFile := driftPlanFile(workDir)
	jsonPath := filepath.Join(workDir, "drift-plan.json")
	f, err := os.OpenFile(jsonPath, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return api.PlanSummary{}, fmt.Errorf("create %s: %w", jsonPath, err)
	}
	defer func() { f.Close(); os.Remove(jsonPath) }()
	fmt.Fprintf(j.out, "\n==> %s show -json (summarised; the values stay in the cluster)\n", cli)
	code, err := runCLI(j.st, cliRun{Path: cliPath, Args: []string{"show", "-json", "-no-color", planFile}, Dir: configDir, Env: env, Stdout: f, Stderr: j.out, Log: j.out})
	if err != nil {
		return api.PlanSummary{}, fmt.Errorf("%s show -json: %w", cli, err)
	}
	if code != 0 {
		return api.PlanSummary{}, fmt.Errorf("%s show -json failed with exit code %d", cli, code)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return api.PlanSummary{}, err
	}
	s, err := plansummary.FromPlan(f, planFile)
	if err != nil {
		return api.PlanSummary{}, fmt.Errorf("summarise the plan: %w", err)
	}
	return s, nil
}
