package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/benchtest"
)

// goBuild builds a main package of this module (pkg as `go build` takes it) into dir as name.
func goBuild(tb testing.TB, dir, pkg, name string) string {
	tb.Helper()
	bin := filepath.Join(dir, name)
	if out, err := exec.CommandContext(tb.Context(), "go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// logDir is where the processes of a test or benchmark log: the results folder under make bench
// (kept with the figures), else a temporary folder.
func logDir(tb testing.TB) string {
	if d := benchtest.Dir(); d != "" {
		return d
	}
	return tb.TempDir()
}

// process is a program of this module running as a child process, logging into a file.
type process struct {
	name, log string
	cmd       *exec.Cmd
	exited    chan struct{}
}

// startProcess runs bin with args and env (added to this process's environment), its output
// into <logs>/<name>.log. Cleanup stops it with SIGTERM (SIGKILL after 20 s) and, when the
// test failed, shows the end of its log.
func startProcess(tb testing.TB, logs, name, bin string, env []string, args ...string) *process {
	tb.Helper()
	p := &process{name: name, log: filepath.Join(logs, name+".log"), exited: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		tb.Fatal(err)
	}
	p.cmd = exec.CommandContext(context.WithoutCancel(tb.Context()), bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// A test or benchmark killed half-way must not leave its processes running, holding ports
	// and whatever lock its caller took.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		tb.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.exited) }()
	tb.Cleanup(func() {
		p.stop()
		if tb.Failed() {
			b, _ := os.ReadFile(p.log)
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			tb.Logf("last lines of %s's log:\n%s", name, strings.Join(lines[max(0, len(lines)-15):], "\n"))
		}
	})
	return p
}

// stop ends the process as its supervisor would: SIGTERM, then SIGKILL after 20 s.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		p.kill()
	}
}

// kill ends the process with SIGKILL, as a crash or an evicted pod does, and waits for it.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// orchestratorProcess is the outpost-orchestrator binary running on a loopback port.
type orchestratorProcess struct {
	*process
	url, token string
}

// runOrchestrator starts the orchestrator binary bin on addr with the admin token (through the
// environment, as the docs advise) and the flags args, and waits until it answers.
func runOrchestrator(tb testing.TB, logs, name, bin, addr, token string, args ...string) *orchestratorProcess {
	tb.Helper()
	o := &orchestratorProcess{url: "http://" + addr, token: token,
		process: startProcess(tb, logs, name, bin, []string{"OUTPOST_ORCHESTRATOR_ADMIN_TOKEN=" + token},
			append([]string{"--listen", addr, "--log-format", "json"}, args...)...)}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(tb.Context(), http.MethodGet, o.url+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			return o
		}
		select {
		case <-o.exited:
			tb.Fatalf("the orchestrator %s exited while starting; see %s", name, o.log)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the orchestrator %s did not answer on %s: %v", name, addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
