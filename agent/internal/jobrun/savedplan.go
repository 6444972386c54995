package jobrun

// Saved plans in the job runner. A plan with save_plan runs `plan -out`, then `show -json` of
// the plan file, keeps the plan file with the agent's state backend (beside the state, in the
// cluster) and uploads to the orchestrator only the summary package plansummary makes of it:
// names, never values. The apply of an approved plan fetches that plan file back and runs
// `apply <planfile>`: the CLI applies exactly the reviewed changes, with the variables and the
// configuration the plan holds, and refuses on its own when the state moved since.
//
// The state backend's address travels in TF_HTTP_ADDRESS (and the lock and unlock addresses
// beside it) for these attempts instead of the backend file: a plan file records the backend
// configuration, and the state proxy's address of the plan's job pod is not the one of the
// apply's.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/plansummary"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

const (
	// planFileName is the plan file in the work directory (outside the source directory).
	planFileName = "outpost.tfplan"
	// planTransferTimeout bounds storing or fetching a plan file, retries included.
	planTransferTimeout = 5 * time.Minute
)

// savedPlanEnv is the environment that names the state backend's addresses for an attempt of a
// saved plan (see the file comment).
func savedPlanEnv(stateBaseURL, stateKey string) []string {
	addr := stateURL(stateBaseURL, stateKey)
	return []string{"TF_HTTP_ADDRESS=" + addr, "TF_HTTP_LOCK_ADDRESS=" + addr, "TF_HTTP_UNLOCK_ADDRESS=" + addr}
}

// planURL is where the state backend keeps the plan file of a state.
func planURL(base, stateKey string) string {
	return strings.TrimRight(base, "/") + "/v1/plans/" + url.PathEscape(stateKey)
}

// planArgs are the arguments of a plan that saves its plan file at planFile.
func planArgs(planFile string, destroy bool) []string {
	args := []string{"plan", "-input=false", "-no-color", "-lock-timeout=60s", "-out=" + planFile}
	if destroy {
		args = append(args, "-destroy")
	}
	return args
}

// operation is the CLI's arguments of the attempt's operation and the plan file it writes or
// applies: a drift check's plan (kept for review when its schedule queues applies), a saved
// plan, or the apply of one, whose plan file is fetched from the state backend first.
func (j *attemptRun) operation(spec *api.JobSpec, workDir, stateURL string) (args []string, planFile string, err error) {
	planFile = filepath.Join(workDir, planFileName)
	switch {
	case spec.DriftCheck:
		return driftCheckArgs(workDir), driftPlanFile(workDir), nil
	case spec.SavePlan:
		return planArgs(planFile, spec.PlanDestroy), planFile, nil
	case spec.ApplyPlan != "":
		if err := j.fetchPlan(spec, planFile, stateURL); err != nil {
			return nil, "", fmt.Errorf("fetch the saved plan of deployment %s from the agent's state backend: %w", spec.ApplyPlan, err)
		}
		return applyPlanArgs(planFile), planFile, nil
	}
	return operationArgs(spec.Operation), planFile, nil
}

// afterPlan does what follows the operation's phases for plans: a drift check's report, the
// keeping of a saved plan (a drift check's only when it found drift, summarised once for both),
// and the deletion of an applied plan's file. It returns the job runner's exit code.
func (j *attemptRun) afterPlan(spec *api.JobSpec, cli, cliPath, configDir, workDir, planFile, stateURL string, env []string, drifted bool) int {
	var summary *api.PlanSummary
	if spec.DriftCheck {
		code, s := j.reportDrift(cli, cliPath, configDir, workDir, env, drifted)
		if code != 0 {
			return code
		}
		summary = s
	}
	if spec.SavePlan && (!spec.DriftCheck || drifted) {
		if code := j.savePlan(spec, summary, cli, cliPath, configDir, workDir, planFile, stateURL, env); code != 0 {
			return code
		}
	}
	if spec.ApplyPlan != "" {
		fmt.Fprintf(j.out, "==> applied the saved plan of deployment %s\n", spec.ApplyPlan)
		j.dropPlan(spec, stateURL)
	}
	return 0
}

// applyPlanArgs are the arguments of the apply of a saved plan: no variables (the plan holds
// them), no -auto-approve (a saved plan is applied without a prompt).
func applyPlanArgs(planFile string) []string {
	return []string{"apply", "-input=false", "-no-color", "-lock-timeout=60s", planFile}
}

// savePlan keeps the plan file with the state backend and uploads its summary, made here unless
// sum already holds it (a drift check's).
func (j *attemptRun) savePlan(spec *api.JobSpec, sum *api.PlanSummary, cli, cliPath, configDir, workDir, planFile, stateBase string, env []string) int {
	if sum == nil {
		s, err := j.summarisePlan(cli, cliPath, configDir, workDir, planFile, env)
		if err != nil {
			return j.fail("%v; the plan was not saved", err)
		}
		sum = &s
	}
	data, err := os.ReadFile(planFile)
	if err != nil {
		return j.fail("read the plan file: %v", err)
	}
	ctx, cancel := boundedContext(planTransferTimeout, j.st)
	defer cancel()
	if err := j.planRequest(ctx, http.MethodPut, planURL(stateBase, spec.StateKey), spec.DeploymentID, data, nil); err != nil {
		return j.fail("keep the plan file with the agent's state backend: %v", err)
	}
	if err := j.client.PutPlanSummary(ctx, *sum); err != nil {
		return j.fail("upload the plan's summary: %v", err)
	}
	c := sum.Counts
	fmt.Fprintf(j.out, "==> plan saved in the cluster (%d bytes) against serial %d of the state: %d to create, %d to update, %d to replace, %d to delete, %d to read, %d to forget, %d output(s) changing; "+
		"review it with `outpost deployment plan %s`, approve it, then apply it with `outpost deployment apply-plan %s`\n",
		len(data), sum.Serial, c.Create, c.Update, c.Replace, c.Delete, c.Read, c.Forget, len(sum.OutputChanges), spec.DeploymentID, spec.DeploymentID)
	return 0
}

// fetchPlan writes the saved plan of the apply's plan deployment to planFile.
func (j *attemptRun) fetchPlan(spec *api.JobSpec, planFile, stateBase string) error {
	ctx, cancel := boundedContext(planTransferTimeout, j.st)
	defer cancel()
	var buf bytes.Buffer
	if err := j.planRequest(ctx, http.MethodGet, planURL(stateBase, spec.StateKey), spec.DeploymentID, nil, &buf); err != nil {
		return err
	}
	if err := replaceFile(planFile, buf.Bytes()); err != nil {
		return fmt.Errorf("write the plan file: %w", err)
	}
	fmt.Fprintf(j.out, "==> fetched the saved plan of deployment %s (%d bytes) from the cluster\n", spec.ApplyPlan, buf.Len())
	return nil
}

// dropPlan deletes the plan file once it was applied; the agent's sweep deletes it at its expiry
// otherwise.
func (j *attemptRun) dropPlan(spec *api.JobSpec, stateBase string) {
	ctx, cancel := boundedContext(time.Minute, j.st)
	defer cancel()
	if err := j.planRequest(ctx, http.MethodDelete, planURL(stateBase, spec.StateKey), spec.DeploymentID, nil, nil); err != nil {
		fmt.Fprintf(j.out, "==> warning: could not delete the applied plan file (%v); it is deleted when it expires\n", err)
	}
}

// planRequest sends a request about the plan file to the state backend through the state proxy,
// with the attempt's state credential, and sends it again on what a retry can cure (storing,
// reading and deleting a plan file may each happen twice): the proxy answers 502 for a write
// whose connection broke, and the backend 503 while it takes over from another replica.
func (j *attemptRun) planRequest(ctx context.Context, method, u, deploymentID string, body []byte, out *bytes.Buffer) error {
	back := retry.Backoff{Base: time.Second, Max: 8 * time.Second}
	for try := 1; ; try++ {
		if out != nil {
			out.Reset()
		}
		err := j.planTry(ctx, method, u, deploymentID, body, out)
		if err == nil || try >= planTries || !retry.Idempotent(err) {
			return err
		}
		fmt.Fprintf(j.out, "==> %s of the plan file failed (%v); trying again\n", method, err)
		if retry.Sleep(ctx, back.Next(0)) != nil {
			return err
		}
	}
}

// planTries bounds the tries of one plan file request.
const planTries = 6

func (j *attemptRun) planTry(ctx context.Context, method, u, deploymentID string, body []byte, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.SetBasicAuth(deploymentID, j.stateToken)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return errors.Join(err, api.ErrUnavailable)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &api.Error{StatusCode: resp.StatusCode, Code: "state_backend", Message: fmt.Sprintf("%s %s: %s", method, filepath.Base(u), strings.TrimSpace(string(msg)))}
	}
	if out != nil {
		_, err = io.Copy(out, resp.Body)
	}
	return err
}

// summarisePlan runs `show -json` of a plan file into a file of the work directory (it holds
// values, sensitive ones too, so it never reaches the log) and summarises it, names only.
func (j *attemptRun) summarisePlan(cli, cliPath, configDir, workDir, planFile string, env []string) (api.PlanSummary, error) {
	jsonPath := filepath.Join(workDir, "plan-show.json")
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
