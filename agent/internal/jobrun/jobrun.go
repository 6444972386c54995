// Package jobrun is the job runner: `outpost-agent job`, the entrypoint of the main container
// of the Job of every attempt (or of the process the agent's process executor starts).
//
// It fetches the attempt's job spec from the orchestrator with the job token, lays out the
// Terraform/OpenTofu source (inline archive or git), points the backend at the runner's state
// storage (for kubernetes storage, the agent's http backend), runs init and then plan, apply or
// destroy with the configured CLI, streams the combined output to the orchestrator by byte
// offset and to its own stdout, uploads the outputs after an apply or destroy, and exits with
// the CLI's exit code.
//
// Exit codes:
//
//	0..    the CLI's exit code (of init when init failed, else of plan/apply/destroy)
//	2      ExitRunnerError: the job runner failed before the CLI ran (configuration, token, spec
//	       fetch or validation, source layout, backend file); the reason is in the log
//	3      ExitOutputsFailed: the CLI succeeded but its outputs could not be read or uploaded
//	128+N  the CLI was ended by signal N, or the job runner was stopped by signal N before the CLI
//	       (or its next phase) started; 130 when ctx ended without a signal
package jobrun

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
)

// Exit codes of the job runner itself; see the package documentation.
const (
	ExitRunnerError   = 2
	ExitOutputsFailed = 3
	ExitInterrupted   = 130
)

const (
	// finalFlushTimeout bounds delivering the rest of the log after the CLI exited. A Pod's
	// default termination grace period is 30 s; the log copy in stdout remains either way.
	finalFlushTimeout = 20 * time.Second
	// outputsTimeout bounds the output upload, retries included.
	outputsTimeout = 2 * time.Minute
	// killGrace is what the network work after the CLI still gets once a kill was requested.
	killGrace = 3 * time.Second
	userAgent = "outpost-agent-job"
)

// specRetry is patient: a Job may start while the orchestrator restarts, and a job runner that
// cannot fetch its job spec cannot do anything else.
var specRetry = client.RetryPolicy{MaxTries: 8, BaseDelay: 500 * time.Millisecond, MaxDelay: 15 * time.Second}

// Main runs the attempt and returns the process exit code. args are the arguments after `job`.
// stdout receives the complete log (what the orchestrator receives, so `kubectl logs` shows it
// even when the orchestrator is unreachable); stderr only gets errors that occur before there is
// a log, such as a missing OUTPOST_API_URL. SIGTERM and SIGINT are handled as described on
// stopper; ctx ending counts as the first of them.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	return run(ctx, args, takeTraceparent(), sigs, stdout, stderr)
}

// run is Main with its environment and signals injectable, for tests.
func run(ctx context.Context, args []string, getenv func(string) string, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	cfg, err := loadConfig(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "outpost-agent job: %v\n", err)
		writeTerminationMessage(cfg.TerminationMessageFile, err.Error())
		return ExitRunnerError
	}
	token, err := readToken(cfg.TokenFile)
	var stateToken string
	if err == nil {
		stateToken, err = readStateToken(cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "outpost-agent job: %v\n", err)
		writeTerminationMessage(cfg.TerminationMessageFile, err.Error())
		return ExitRunnerError
	}
	// A minute per attempt: the job runner's requests are short (no long poll).
	hc, caPEM, err := client.NewHTTPClient(cfg.CABundleFile, time.Minute)
	if err != nil {
		fmt.Fprintf(stderr, "outpost-agent job: %s: %v\n", jobenv.CABundleFile, err)
		return ExitRunnerError
	}
	opts := []client.Option{client.WithHTTPClient(hc), client.WithUserAgent(userAgent)}
	if cfg.InsecureAllowHTTP {
		opts = append(opts, client.AllowInsecureHTTP())
	}
	orch, err := client.NewJobClient(cfg.APIURL, token, append(opts, client.WithRetryPolicy(specRetry))...)
	if err != nil {
		fmt.Fprintf(stderr, "outpost-agent job: %s: %v\n", jobenv.APIURL, err)
		return ExitRunnerError
	}
	// The streamer does its own retrying so that new output keeps buffering meanwhile.
	logClient, _ := client.NewJobClient(cfg.APIURL, token, append(opts, client.WithRetryPolicy(client.RetryPolicy{MaxTries: 1}))...)

	st := newStopper(ctx, sigs)
	defer st.close()
	console := &lockedWriter{w: stdout}
	stream := newLogStreamer(logClient, console, streamerOptions{OnStop: func(reason string) { st.request(nil, reason) }})
	out := newRedactor(teeWriter{console, stream}, secretForms(token)...)
	if stateToken != "" {
		out.add(secretForms(stateToken)...)
	}

	j := &attemptRun{cfg: cfg, token: token, stateToken: stateToken, caPEM: string(caPEM), client: orch, out: out, st: st,
		trace: startJobTrace(ctx, getenv, out)}
	code := j.run()
	traceCtx, cancelTrace := boundedContext(finalFlushTimeout, st)
	j.trace.end(traceCtx, code)
	cancelTrace()

	_ = out.Flush()
	flushCtx, cancel := boundedContext(finalFlushTimeout, st)
	stats := stream.Close(flushCtx)
	cancel()
	fmt.Fprintf(console, "[outpost: log: %d bytes written, %d delivered to the orchestrator%s]\n", stats.Produced, stats.Delivered, describeLoss(stats))
	return code
}

func describeLoss(s logStats) string {
	var parts []string
	if s.Truncated {
		parts = append(parts, "truncated by the orchestrator")
	}
	if s.GaveUp != nil {
		parts = append(parts, "delivery stopped: "+oneLine(s.GaveUp))
	}
	if s.Dropped > 0 {
		parts = append(parts, fmt.Sprintf("%d bytes dropped", s.Dropped))
	}
	if s.Pending > 0 {
		parts = append(parts, fmt.Sprintf("%d bytes undelivered at exit", s.Pending))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, "; ")
}

// boundedContext is a context for the network work after the CLI: it ends after timeout, or
// killGrace after a kill request, so a second signal makes the job runner exit soon without
// giving up on the log at once.
func boundedContext(timeout time.Duration, st *stopper) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	go func() {
		select {
		case <-st.killed:
			t := time.NewTimer(killGrace)
			defer t.Stop()
			select {
			case <-t.C:
				cancel()
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// attemptRun is one run of the job runner: one attempt.
type attemptRun struct {
	cfg   config
	token string // the job token: the orchestrator's credential
	// stateToken is the state backend's credential ("" without a state URL).
	stateToken string
	caPEM      string
	client     *client.JobClient
	out        *redactor // the log: redacted, to stdout and the orchestrator
	st         *stopper
	trace      *jobTrace // the attempt's spans (trace.go)
}

// fail logs a job runner error, leaves it as the container's termination message, and returns
// ExitRunnerError.
func (j *attemptRun) fail(format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(j.out, "==> error: %s\n", msg)
	writeTerminationMessage(j.cfg.TerminationMessageFile, msg)
	return ExitRunnerError
}

func (j *attemptRun) run() int {
	start := time.Now()
	netCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-j.st.interrupted:
			cancel()
		case <-netCtx.Done():
		}
	}()
	_, endSpec := j.trace.phase(tracing.SpanFetchSpec)
	spec, err := j.client.Spec(netCtx)
	endSpec(0, err)
	if err != nil {
		if j.st.isInterrupted() {
			return j.st.exitCode()
		}
		return j.fail("fetch the job spec: %v%s", err, specHint(err))
	}
	if err := validateSpec(spec); err != nil {
		return j.fail("the job spec cannot be used: %v", err)
	}
	j.trace.describe(spec)
	// TF_LOG=trace would print the backend's Basic credentials in this form.
	if j.stateToken != "" {
		j.out.add(secretForms(spec.DeploymentID + ":" + j.stateToken)...)
	}

	cliPath, err := resolveCLI(j.cfg.CLI, j.cfg.Image)
	if err != nil {
		return j.fail("%v", err)
	}
	cli := strings.TrimSuffix(filepath.Base(cliPath), ".exe")
	fmt.Fprintf(j.out, "==> outpost deployment %s (attempt %d): %s on runner %s, state key %q, %s, %s state storage %q\n",
		spec.DeploymentID, spec.Attempt, spec.Operation, spec.RunnerID, spec.StateKey, cliVersion(cliPath), spec.StateStorage.Type, spec.StateStorage.ID)

	workDir, cleanup, err := prepareWorkDir(j.cfg.WorkDir, spec.DeploymentID)
	if err != nil {
		return j.fail("%v", err)
	}
	defer cleanup()
	srcDir := filepath.Join(workDir, "source")
	if err := os.RemoveAll(srcDir); err != nil {
		return j.fail("clear %s: %v", srcDir, err)
	}
	if err := os.Mkdir(srcDir, 0o700); err != nil {
		return j.fail("create %s: %v", srcDir, err)
	}
	toolEnv, note, err := trustEnv(workDir, []byte(j.caPEM), os.Getenv)
	if err != nil {
		return j.fail("%v", err)
	}
	if note != "" {
		fmt.Fprintf(j.out, "==> %s\n", note)
	}
	if spec.Source.Git != nil {
		j.out.add(gitSecrets(spec.Source.Git.URL)...)
	}
	gitCtx, gitCancel := context.WithCancel(netCtx)
	_, endSource := j.trace.phase(tracing.SpanFetchSource)
	configDir, err := layoutSource(gitCtx, spec.Source, srcDir, toolEnv, j.out)
	endSource(0, err)
	gitCancel()
	if err != nil {
		if j.st.isInterrupted() {
			return j.st.exitCode()
		}
		return j.fail("lay out the source: %v", err)
	}
	stateURL := j.cfg.StateURL
	if spec.StateStorage.Type == api.StateStorageKubernetes && stateURL != "" {
		proxy, err := startStateProxy(netCtx, stateURL, cmp.Or(j.cfg.StateCA, j.caPEM), j.out, j.trace.stateWrites)
		if err != nil {
			return j.fail("start the state proxy: %v", err)
		}
		defer proxy.Close()
		stateURL = proxy.URL()
	}
	savedPlan := spec.SavePlan || spec.ApplyPlan != ""
	if savedPlan && (spec.StateStorage.Type != api.StateStorageKubernetes || stateURL == "") {
		return j.fail("a saved plan is kept with the agent's state backend, and this attempt has none (state storage %q of type %s)", spec.StateStorage.ID, spec.StateStorage.Type)
	}
	backend, err := backendConfig(spec.StateStorage, spec.StateKey, stateURL)
	if err != nil {
		return j.fail("%v", err)
	}
	vars := spec.Variables
	if savedPlan {
		// The state backend's address goes in the environment (savedPlanEnv), not into the
		// plan file, and the apply of a saved plan takes its variables from the plan.
		backend = withoutAddresses(backend)
	}
	if spec.ApplyPlan != "" {
		vars = nil
	}
	if err := writeConfigFiles(configDir, backend, vars); err != nil {
		return j.fail("%v", err)
	}
	// Before the CLI prints anything: the values of sensitive variables never reach the log.
	forms, tooShort := sensitiveSecrets(configDir, spec.Variables)
	j.out.add(forms...)
	if len(tooShort) > 0 {
		fmt.Fprintf(j.out, "==> outpost: sensitive variable(s) %s hold a value shorter than %d characters, which this log cannot tell from ordinary words and so does not redact; give secrets at least %d characters\n",
			strings.Join(tooShort, ", "), minSecretLen, minSecretLen)
	}

	env := append(append([]string{"TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1"}, toolEnv...),
		backendEnv(spec.StateStorage, spec.DeploymentID, j.stateToken)...)
	providerEnv, err := providerSettings(workDir, j.cfg.PluginCacheDir, j.cfg.ProviderInstallation)
	if err != nil {
		return j.fail("%v", err)
	}
	env = append(env, providerEnv...)
	op, planFile, err := j.operation(spec, workDir, stateURL)
	if err != nil {
		return j.fail("%v", err)
	}
	if savedPlan {
		env = append(env, savedPlanEnv(stateURL, spec.StateKey)...)
	}
	phases := [][]string{{"init", "-input=false", "-no-color", "-reconfigure"}, op}
	drifted := false
	for i, args := range phases {
		if j.st.isInterrupted() {
			fmt.Fprintf(j.out, "==> stopped before %s %s\n", cli, args[0])
			return j.st.exitCode()
		}
		// A blank line first: the phases are easy to find in a long log.
		fmt.Fprintf(j.out, "\n==> %s %s\n", cli, strings.Join(args, " "))
		phaseCtx, endPhase := j.trace.phase(args[0])
		code, err := runCLI(j.st, cliRun{Path: cliPath, Args: args, Dir: configDir, Env: append(env, j.trace.cliEnv(phaseCtx)...), Stdout: j.out, Stderr: j.out, Log: j.out})
		endPhase(code, err)
		if err != nil {
			return j.fail("%v", err)
		}
		if spec.DriftCheck && i == len(phases)-1 && code == exitChanges {
			drifted, code = true, 0
		}
		if code != 0 {
			fmt.Fprintf(j.out, "==> %s %s failed with exit code %d after %s\n", cli, args[0], code, since(start))
			return code
		}
	}
	if code := j.afterPlan(spec, cli, cliPath, configDir, workDir, planFile, stateURL, env, drifted); code != 0 {
		return code
	}
	if spec.Operation != api.OperationPlan {
		outputsCtx, endOutputs := j.trace.phase(tracing.SpanOutputs)
		code := j.uploadOutputs(cli, cliPath, configDir, append(env, j.trace.cliEnv(outputsCtx)...))
		endOutputs(code, nil)
		if code != 0 {
			return code
		}
	}
	fmt.Fprintf(j.out, "==> %s succeeded in %s\n", spec.Operation, since(start))
	return 0
}

// operationArgs are the CLI arguments of the attempt's operation. Every operation waits up to
// 60 s for the state lock: a previous run's lock may still be held briefly, e.g. while the
// agent's state backend fails over.
func operationArgs(op api.Operation) []string {
	switch op {
	case api.OperationPlan:
		return []string{"plan", "-input=false", "-no-color", "-lock-timeout=60s"}
	case api.OperationDestroy:
		return []string{"destroy", "-auto-approve", "-input=false", "-no-color", "-lock-timeout=60s"}
	}
	return []string{"apply", "-auto-approve", "-input=false", "-no-color", "-lock-timeout=60s"}
}
