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

// applyPlanArgs are the arguments of the apply of a saved plan: no variables (the plan holds
// them), no -auto-approve (a saved plan is applied without a prompt).
func applyPlanArgs(planFile string) []string {
	return []string{"apply", "-input=false", "-no-color", "-lock-timeout=60s", planFile}
}

// savePlan keeps the plan file with the state backend and uploads its summary. The output of
// `show -json` holds values (sensitive ones too) and never reaches the log.
func (j *attemptRun) savePlan(spec *api.JobSpec, cli, cliPath, configDir, planFile, stateBase string, env []string) int {
	fmt.Fprintf(j.out, "\n==> %s show -json (the summary of the plan: names only, not logged)\n", cli)
	var show bytes.Buffer
	code, err := runCLI(j.st, cliRun{Path: cliPath, Args: []string{"show", "-json", "-no-color", planFile}, Dir: configDir, Env: env, Stdout: &show, Stderr: j.out, Log: j.out})
	if err != nil || code != 0 {
		return j.fail("%s show -json of the plan failed (exit code %d, %v); the plan was not saved", cli, code, err)
	}
	sum, err := plansummary.FromPlan(&show, planFile)
	show.Reset()
	if err != nil {
		return j.fail("summarise the plan: %v; the plan was not saved", err)
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
	if err := j.client.PutPlanSummary(ctx, sum); err != nil {
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
