package jobrun

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/sourcearchive/archivetest"
)

// fakeCLI writes a shell script standing in for terraform: `version`, `init` and `output`
// behave, and `apply` runs applyBody. It lets the tests drive exit codes and signal handling
// precisely, which the real CLIs do not allow.
func fakeCLI(t *testing.T, applyBody, outputBody string) string {
	t.Helper()
	if outputBody == "" {
		outputBody = `echo '{"x":{"sensitive":false,"type":"string","value":"y"}}'`
	}
	script := `#!/bin/sh
case "$1" in
version) echo "Fake Terraform v0.0.1" ;;
init) echo "init in $(basename "$PWD"): TF_IN_AUTOMATION=$TF_IN_AUTOMATION user=$TF_HTTP_USERNAME password=$TF_HTTP_PASSWORD"
      cat outpost_backend_override.tf ;;
apply) ` + applyBody + ` ;;
output) ` + outputBody + ` ;;
*) echo "unexpected command $*" >&2; exit 64 ;;
esac
`
	p := filepath.Join(t.TempDir(), "terraform")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func fakeDeploy(t *testing.T, h *harness) *api.Deployment {
	return h.deploy(api.OperationApply, inlineSource(t, map[string]string{"main.tf": "# fake\n"}), nil, "fake")
}

func TestExitCodePassesThroughAndTokenIsRedacted(t *testing.T) {
	h := newHarness(t, fakeCLI(t, `echo "applying"; echo "oops" >&2; exit 7`, ""))
	r := h.runJob(fakeDeploy(t, h), runOptions{})
	if r.Code != 7 || r.Status != api.StatusFailed {
		t.Fatalf("exit %d (status %s), want the CLI's 7:\n%s", r.Code, r.Status, r.Stdout)
	}
	checkLogDelivery(t, r)
	// The fake init echoes TF_HTTP_PASSWORD, i.e. the state credential: the redactor must catch it.
	if !strings.Contains(r.Log, "user="+r.DeploymentID+" password=[redacted]") {
		t.Fatalf("backend credentials not passed through the environment, or not redacted:\n%s", r.Log)
	}
	if !containsAll(r.Log, "TF_IN_AUTOMATION=1", "applying\n", "oops\n", "failed with exit code 7") {
		t.Fatalf("log lacks the CLI's output:\n%s", r.Log)
	}
	if strings.Contains(r.Log, "password =") || strings.Contains(r.Log, "opj_") || strings.Contains(r.Log, "opst_") {
		t.Fatalf("credentials in the backend file:\n%s", r.Log)
	}
}

func TestOutputsFailureIsExitCode3(t *testing.T) {
	h := newHarness(t, fakeCLI(t, `echo applied`, `echo 'not json'`))
	r := h.runJob(fakeDeploy(t, h), runOptions{})
	if r.Code != ExitOutputsFailed || !strings.Contains(r.Log, "the outputs were not uploaded") {
		t.Fatalf("exit %d, want %d:\n%s", r.Code, ExitOutputsFailed, r.Log)
	}
}

func TestStopLevels(t *testing.T) {
	defer func(d time.Duration) { signalDebounce = d }(signalDebounce)
	signalDebounce = 300 * time.Millisecond
	// The fake apply ignores the first interrupt, like a CLI busy finishing its work.
	stubborn := `trap 'echo "got INT, finishing up"' INT; echo started; i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; echo "never"`

	t.Run("repeated signal within the debounce is one request", func(t *testing.T) {
		h := newHarness(t, fakeCLI(t, `trap 'echo "got INT"; exit 5' INT; echo started; while :; do sleep 0.1; done`, ""))
		sigs := make(chan os.Signal, 4)
		r := h.runJob(fakeDeploy(t, h), runOptions{sigs: sigs, during: func(_ *harness, _ *api.Deployment, out *clienttest.Buffer) {
			waitFor(t, 10*time.Second, "apply to start", func() bool { return strings.Contains(out.String(), "started") })
			sigs <- syscall.SIGTERM
			sigs <- syscall.SIGTERM // the same stop, delivered twice (process group + wrapper)
		}})
		if r.Code != 5 || !strings.Contains(r.Log, "got INT") || strings.Contains(r.Log, "killing") {
			t.Fatalf("exit %d, want the CLI's graceful 5 without a kill:\n%s", r.Code, r.Log)
		}
		checkLogDelivery(t, r)
	})
	t.Run("second signal kills", func(t *testing.T) {
		h := newHarness(t, fakeCLI(t, stubborn, ""))
		sigs := make(chan os.Signal, 4)
		r := h.runJob(fakeDeploy(t, h), runOptions{sigs: sigs, during: func(_ *harness, _ *api.Deployment, out *clienttest.Buffer) {
			waitFor(t, 10*time.Second, "apply to start", func() bool { return strings.Contains(out.String(), "started") })
			sigs <- syscall.SIGTERM
			waitFor(t, 10*time.Second, "the CLI to see the interrupt", func() bool { return strings.Contains(out.String(), "got INT") })
			time.Sleep(signalDebounce)
			sigs <- syscall.SIGTERM
		}})
		if r.Code != 128+int(syscall.SIGKILL) || !containsAll(r.Log, "==> stopping (received terminated)", "==> second signal: killing terraform") || r.Duration > 10*time.Second {
			t.Fatalf("exit %d after %s, want 137 soon after the second signal:\n%s\n--- stdout:\n%s", r.Code, r.Duration, r.Log, r.Stdout)
		}
		checkLogDelivery(t, r)
	})
	t.Run("real SIGTERM to the job runner process", func(t *testing.T) {
		// As the process executor stops a job: SIGTERM to the process group and, through the
		// wrapper, once more to the job runner. The CLI is in its own group and gets SIGINT once.
		h := newHarness(t, fakeCLI(t, `trap 'echo "got INT"; exit 5' INT; trap 'echo "got TERM"; exit 6' TERM; echo started; while :; do sleep 0.1; done`, ""))
		r := h.runJob(fakeDeploy(t, h), runOptions{process: func(p *os.Process, out *clienttest.Buffer) {
			waitFor(t, 10*time.Second, "apply to start", func() bool { return strings.Contains(out.String(), "started") })
			_ = p.Signal(syscall.SIGTERM)
			_ = p.Signal(syscall.SIGTERM)
		}})
		if r.Code != 5 || strings.Count(r.Log, "got INT") != 1 || strings.Contains(r.Log, "got TERM") || strings.Contains(r.Log, "killing") {
			t.Fatalf("exit %d, want the CLI's 5 after exactly one SIGINT:\n%s%s", r.Code, r.Stdout, r.Stderr)
		}
		checkLogDelivery(t, r)
	})
	t.Run("killed job runner takes the CLI along", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("parent-death signal is Linux only")
		}
		pidFile := filepath.Join(t.TempDir(), "cli.pid")
		h := newHarness(t, fakeCLI(t, `echo $$ > `+pidFile+`; echo started; while :; do sleep 0.1; done`, ""))
		r := h.runJob(fakeDeploy(t, h), runOptions{process: func(p *os.Process, out *clienttest.Buffer) {
			waitFor(t, 10*time.Second, "apply to start", func() bool { return strings.Contains(out.String(), "started") })
			_ = p.Kill() // SIGKILL: nothing can be forwarded
		}})
		if r.Code != 128+int(syscall.SIGKILL) {
			t.Fatalf("exit %d, want 137", r.Code)
		}
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		// Should the check fail, do not leave the orphan (its own process group) running.
		t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
		waitFor(t, 5*time.Second, "the orphaned CLI to die", func() bool { return syscall.Kill(pid, 0) != nil })
	})
	t.Run("context end interrupts", func(t *testing.T) {
		h := newHarness(t, fakeCLI(t, `trap 'echo "got INT"; exit 5' INT; echo started; while :; do sleep 0.1; done`, ""))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := h.runJob(fakeDeploy(t, h), runOptions{ctx: ctx, during: func(_ *harness, _ *api.Deployment, out *clienttest.Buffer) {
			waitFor(t, 10*time.Second, "apply to start", func() bool { return strings.Contains(out.String(), "started") })
			cancel()
		}})
		if r.Code != 5 || !strings.Contains(r.Log, "got INT") {
			t.Fatalf("exit %d, want 5 after an interrupt:\n%s", r.Code, r.Log)
		}
	})
	t.Run("cancel requested at the orchestrator", func(t *testing.T) {
		h := newHarness(t, fakeCLI(t, `trap 'echo "got INT"; exit 5' INT; while :; do echo "still applying"; sleep 0.2; done`, ""))
		r := h.runJob(fakeDeploy(t, h), runOptions{during: func(h *harness, d *api.Deployment, out *clienttest.Buffer) {
			waitFor(t, 10*time.Second, "apply to start", func() bool { return strings.Contains(out.String(), "still applying") })
			if _, err := h.admin.CancelDeployment(context.Background(), d.ID); err != nil {
				t.Error(err)
			}
		}})
		if r.Code != 5 || !containsAll(r.Log, "==> stopping (a cancel of this deployment was requested)", "got INT") || r.Duration > 15*time.Second {
			t.Fatalf("exit %d after %s, want the CLI interrupted after the cancel:\n%s", r.Code, r.Duration, r.Log)
		}
	})
}

func TestRunnerErrorsAreExitCode2(t *testing.T) {
	t.Run("unusable spec reaches the orchestrator log", func(t *testing.T) {
		h := newHarness(t, fakeCLI(t, `exit 0`, ""))
		r := h.runJob(fakeDeploy(t, h), runOptions{env: map[string]string{"OUTPOST_STATE_URL": ""}})
		if r.Code != ExitRunnerError || !strings.Contains(r.Log, "==> error: ") || !strings.Contains(r.Log, "OUTPOST_STATE_URL is not set") {
			t.Fatalf("exit %d, want 2 with the reason in the orchestrator's log:\n%s", r.Code, r.Log)
		}
		checkLogDelivery(t, r)
	})
	t.Run("unsafe archive", func(t *testing.T) {
		h := newHarness(t, fakeCLI(t, `exit 0`, ""))
		d := h.deploy(api.OperationApply, api.Source{Inline: &api.InlineSource{ArchiveTarGz: archivetest.Make(t, archivetest.Entry{Name: "../escape.tf", Body: "x"})}}, nil, "fake")
		r := h.runJob(d, runOptions{})
		if r.Code != ExitRunnerError || !strings.Contains(r.Log, "'..'") || strings.Contains(r.Log, "==> terraform init") {
			t.Fatalf("exit %d, want 2 before init:\n%s", r.Code, r.Log)
		}
	})
	t.Run("missing CLI", func(t *testing.T) {
		h := newHarness(t, "/nonexistent/terraform")
		r := h.runJob(fakeDeploy(t, h), runOptions{})
		if r.Code != ExitRunnerError || !strings.Contains(r.Log, "OUTPOST_CLI") {
			t.Fatalf("exit %d:\n%s", r.Code, r.Log)
		}
	})
	t.Run("Main without configuration", func(t *testing.T) {
		t.Setenv("OUTPOST_API_URL", "")
		var stdout, stderr bytes.Buffer
		if code := Main(context.Background(), nil, &stdout, &stderr); code != ExitRunnerError || !strings.Contains(stderr.String(), "OUTPOST_API_URL is not set") {
			t.Fatalf("exit %d, stderr %q", code, stderr.String())
		}
		t.Setenv("OUTPOST_API_URL", "http://127.0.0.1:1")
		t.Setenv("OUTPOST_JOB_TOKEN_FILE", filepath.Join(t.TempDir(), "missing"))
		stderr.Reset()
		if code := Main(context.Background(), nil, &stdout, &stderr); code != ExitRunnerError || !strings.Contains(stderr.String(), "OUTPOST_JOB_TOKEN_FILE") {
			t.Fatalf("exit %d, stderr %q", code, stderr.String())
		}
	})
	t.Run("token refused", func(t *testing.T) {
		h := newHarness(t, fakeCLI(t, `exit 0`, ""))
		tokenFile := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tokenFile, []byte("opj_bm90LWEtdG9rZW4.bWFj"), 0o600); err != nil {
			t.Fatal(err)
		}
		env := map[string]string{"OUTPOST_API_URL": h.apiURL, "OUTPOST_JOB_TOKEN_FILE": tokenFile}
		var stdout, stderr clienttest.Buffer
		code := run(context.Background(), nil, func(k string) string { return env[k] }, nil, &stdout, &stderr)
		if code != ExitRunnerError || !strings.Contains(stdout.String(), "refused the job token") || strings.Contains(stdout.String(), "bm90LWEtdG9rZW4") {
			t.Fatalf("exit %d:\n%s", code, stdout.String())
		}
	})
}

// TestLogSurvivesOrchestratorRestart cuts the job off from the orchestrator for 2.5 s and
// restarts the orchestrator meanwhile, while the CLI prints: the streamer keeps buffering
// through the dropped connections and the orchestrator ends up with exactly what was printed.
func TestLogSurvivesOrchestratorRestart(t *testing.T) {
	h := newHarness(t, fakeCLI(t, `i=0; while [ $i -lt 80 ]; do echo "line $i of the apply"; i=$((i+1)); sleep 0.05; done`, ""))
	r := h.runJob(fakeDeploy(t, h), runOptions{during: func(h *harness, _ *api.Deployment, out *clienttest.Buffer) {
		waitFor(t, 10*time.Second, "the apply to print", func() bool { return strings.Contains(out.String(), "line 5 of") })
		h.down.Store(true)
		h.orch.Restart(t)
		time.Sleep(2500 * time.Millisecond)
		h.down.Store(false)
	}})
	if r.Code != 0 || !strings.Contains(r.Log, "line 79 of the apply") {
		t.Fatalf("exit %d:\n%s", r.Code, r.Stdout)
	}
	// stdout also holds the streamer's notices about the outage; the log must not.
	notices := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	var kept []string
	for _, l := range notices {
		if strings.HasPrefix(l, "[outpost: cannot deliver the log") || strings.HasPrefix(l, "[outpost: log delivery resumed") {
			continue
		}
		kept = append(kept, l)
	}
	if len(kept) == len(notices) {
		t.Fatalf("the outage was not noticed; the test proves nothing:\n%s", r.Stdout)
	}
	checkLogDelivery(t, jobResult{Log: r.Log, Stdout: strings.Join(kept, "\n") + "\n", Token: r.Token, StateToken: r.StateToken})
	t.Logf("%d log bytes delivered exactly across a 2.5 s outage and a restart (%s)", len(r.Log), r.Duration.Round(time.Millisecond))
}

// TestLeftoversOfTheCLIAreKilled: a process the CLI started in the background and left running
// (holding the output pipe, as an abandoned local-exec command can) neither blocks the job nor
// outlives it.
func TestLeftoversOfTheCLIAreKilled(t *testing.T) {
	defer func(d time.Duration) { cliWaitDelay = d }(cliWaitDelay)
	cliWaitDelay = 300 * time.Millisecond
	pidFile := filepath.Join(t.TempDir(), "leftover.pid")
	h := newHarness(t, fakeCLI(t, `sleep 30 & echo $! > `+pidFile+`; echo "applied, leaving a process behind"; exit 0`, ""))
	r := h.runJob(fakeDeploy(t, h), runOptions{})
	if r.Code != 0 || r.Duration > 10*time.Second || !strings.Contains(r.Log, "==> killed processes terraform left behind") {
		t.Fatalf("exit %d after %s:\n%s", r.Code, r.Duration, r.Log)
	}
	checkLogDelivery(t, r)
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	waitFor(t, 5*time.Second, "the leftover to die", func() bool { return syscall.Kill(pid, 0) != nil })
}
