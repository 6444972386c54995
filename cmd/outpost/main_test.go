package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/cli"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// TestBinaryExitCodesAndCtrlC builds the outpost binary and runs it as a process: the exit code
// of a followed deployment that failed reaches the shell, and a real SIGINT while following,
// without a terminal, detaches with exit code 130 and says how to cancel.
func TestBinaryExitCodesAndCtrlC(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "outpost")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	o := orchestratortest.Start(t)
	admin, err := client.NewAdminClient(o.URL, "acme", o.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	ag := clienttest.Register(t, admin, o.URL, "eu-1")
	env := append(os.Environ(), "OUTPOST_API_URL="+o.URL, "OUTPOST_ORG_ID=acme", "OUTPOST_TOKEN="+o.AdminToken,
		"OUTPOST_CONFIG="+filepath.Join(t.TempDir(), "config.yaml"))
	queue := func() string {
		d, err := admin.CreateDeployment(t.Context(), api.DeploymentInput{RunnerID: "eu-1", Operation: api.OperationApply, StateKey: "apps/web",
			Source: api.Source{Git: &api.GitSource{URL: "https://git.example.com/infra.git"}}})
		if err != nil {
			t.Fatal(err)
		}
		return d.ID
	}
	command := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Env = env
		return cmd
	}

	out, err := command("--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "outpost ") {
		t.Errorf("outpost --version: %q, %v", out, err)
	}

	failed := queue()
	run := ag.Start(t, failed)
	run.Log(t, "Error: boom\n")
	run.Finish(t, api.StatusFailed, 1)
	err = command("deployment", "logs", failed, "--follow").Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != cli.ExitFailed {
		t.Errorf("following a failed deployment: %v, want exit code %d", err, cli.ExitFailed)
	}

	running := queue()
	ag.Start(t, running).Log(t, "terraform_data.x: Creating...\n")
	cmd := command("deployment", "logs", running, "--follow")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(stdout)
	line, err := rd.ReadString('\n')
	if err != nil || line != "terraform_data.x: Creating...\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	drained := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, rd); close(drained) }()
	select {
	case <-drained: // the process exited and closed its stdout
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("SIGINT did not end the follow")
	}
	err = cmd.Wait()
	if !errors.As(err, &exit) || exit.ExitCode() != cli.ExitInterrupted {
		t.Errorf("after SIGINT: %v, want exit code %d\n%s", err, cli.ExitInterrupted, stderr.String())
	}
	if !strings.Contains(stderr.String(), "outpost deployment cancel "+running) {
		t.Errorf("stderr does not say how to cancel:\n%s", stderr.String())
	}
	if d, err := admin.GetDeployment(t.Context(), running); err != nil || d.Status != api.StatusRunning {
		t.Errorf("the detached deployment: %+v, %v; want it running on", d, err)
	}
}
