package jobrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
)

// stopper turns the ways the job runner is asked to stop into two levels. The first request (the
// first SIGTERM/SIGINT, or ctx ending) is "interrupt": the CLI gets SIGINT, which both Terraform
// and OpenTofu treat as "finish the current operations, save the state, release the lock, exit". A
// second signal is "kill": the CLI's process group gets SIGKILL.
//
// Only signals count towards the second level, and only when they come at least
// signalDebounce after the first: one stop often arrives twice, e.g. the process executor
// signals our process group while its wrapper forwards the same signal to us, or a caller
// cancels ctx on the SIGTERM that also reaches us. Counting those twice would kill the CLI, and
// lose its state, on what was meant as one graceful stop.
type stopper struct {
	interrupted chan struct{}
	killed      chan struct{}
	mu          sync.Mutex
	first       time.Time // when the first signal arrived
	sig         os.Signal // the first signal, for the exit code
	reason      string    // why a stop was requested, for the log
	done        chan struct{}
}

// cliWaitDelay bounds waiting for the CLI's output pipe to close after the CLI exited. A
// variable so tests need not wait as long.
var cliWaitDelay = 5 * time.Second

// signalDebounce is how long after the first signal another one is taken as the same request.
var signalDebounce = 2 * time.Second

// newStopper watches ctx and sigs until close is called.
func newStopper(ctx context.Context, sigs <-chan os.Signal) *stopper {
	s := &stopper{interrupted: make(chan struct{}), killed: make(chan struct{}), done: make(chan struct{})}
	go func() {
		ctxDone := ctx.Done()
		for {
			select {
			case <-s.done:
				return
			case <-ctxDone:
				ctxDone = nil
				s.request(nil, "the job runner's context ended")
			case sig := <-sigs:
				s.mu.Lock()
				first := s.first
				if first.IsZero() {
					s.first = time.Now()
				}
				s.mu.Unlock()
				s.request(sig, "received "+sig.String())
				if !first.IsZero() && time.Since(first) >= signalDebounce {
					select {
					case <-s.killed:
					default:
						close(s.killed)
					}
				}
			}
		}
	}()
	return s
}

// request asks for a graceful stop (the first level). sig is the signal, if one caused it.
func (s *stopper) request(sig os.Signal, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sig == nil && sig != nil {
		s.sig = sig
	}
	select {
	case <-s.interrupted:
	default:
		s.reason = reason
		close(s.interrupted)
	}
}

// isInterrupted reports whether a stop was requested.
func (s *stopper) isInterrupted() bool { return isClosed(s.interrupted) }

// isClosed reports, without waiting, whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// exitCode is the code for a job runner stopped before the CLI (or its next phase) ran: 128+signal
// as shells report it, 130 (as for SIGINT) when ctx ended without a signal.
func (s *stopper) exitCode() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sig, ok := s.sig.(syscall.Signal); ok {
		return 128 + int(sig)
	}
	return ExitInterrupted
}

func (s *stopper) close() { close(s.done) }

// cliRun is one invocation of the CLI.
type cliRun struct {
	Path   string   // resolved binary
	Args   []string // without the binary
	Dir    string
	Env    []string // appended to the job runner's environment
	Stdout io.Writer
	Stderr io.Writer // the same writer as Stdout merges both into one pipe, in order
	Log    io.Writer // where runCLI says that it interrupts or kills the CLI; nil for none
}

func (r cliRun) logf(format string, args ...any) {
	if r.Log != nil {
		fmt.Fprintf(r.Log, format, args...)
	}
}

// runCLI runs the CLI to completion and returns its exit code. A stop request interrupts it
// gracefully, a second one kills its process group; either way runCLI waits for the exit so
// the output produced meanwhile is still streamed. err is set only when the CLI could not run.
func runCLI(st *stopper, r cliRun) (int, error) {
	// No context: the CLI is stopped by the signals below, never by a context's SIGKILL.
	cmd := exec.CommandContext(context.Background(), r.Path, r.Args...)
	cmd.Dir = r.Dir
	cmd.Env = append(os.Environ(), r.Env...)
	cmd.Stdout, cmd.Stderr = r.Stdout, r.Stderr
	cmd.Stdin = nil
	// Own process group: a terminal's Ctrl-C reaches only us, so the CLI sees exactly one
	// interrupt (a second one makes Terraform abandon the state). Also lets a kill reach the
	// providers the CLI started.
	cmd.SysProcAttr = cliSysProcAttr()
	// A process the CLI left behind may hold the output pipe open; do not wait for it forever.
	cmd.WaitDelay = cliWaitDelay
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("start %s: %w", filepath.Base(r.Path), err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	interrupted, killed := st.interrupted, st.killed
	for {
		select {
		case err := <-waited:
			if killLeftovers(cmd.Process) {
				r.logf("==> killed processes %s left behind\n", filepath.Base(r.Path))
			}
			return exitCodeOf(err)
		case <-interrupted:
			interrupted = nil
			st.mu.Lock()
			reason := st.reason
			st.mu.Unlock()
			r.logf("==> stopping (%s): interrupting %s so it can save the state and release the lock\n", reason, filepath.Base(r.Path))
			_ = interruptProcess(cmd.Process)
		case <-killed:
			killed = nil
			r.logf("==> second signal: killing %s\n", filepath.Base(r.Path))
			_ = killProcess(cmd.Process)
		}
	}
}

// exitCodeOf maps Wait's result to an exit code: the CLI's code, or 128+signal when a signal
// ended it.
func exitCodeOf(err error) (int, error) {
	if err == nil || errors.Is(err, exec.ErrWaitDelay) {
		// ErrWaitDelay: the CLI exited 0, but something it started held the output open.
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return -1, err
}

// detectOrder is the order in which an unset CLI is looked for on PATH. OpenTofu first: it is what
// the default job image has, and an image with both is rare enough that whoever builds one can
// set the CLI.
var detectOrder = []string{"tofu", "terraform"}

// resolveCLI finds the CLI binary: "terraform" or "tofu" on PATH, an absolute path, or, when name
// is empty, the first of detectOrder on PATH. image names main's image in the error.
func resolveCLI(name, image string) (string, error) {
	where := "this container"
	if image != "" {
		where = "image " + image
	}
	switch {
	case name == "":
		for _, n := range detectOrder {
			if p, err := exec.LookPath(n); err == nil {
				return p, nil
			}
		}
		return "", fmt.Errorf("neither tofu nor terraform is on PATH (%s) in %s: use an image that has one of them for the main container "+
			"(the runner's pod template, or the chart value jobs.image; the default ghcr.io/outpost-dev/outpost-job has OpenTofu), "+
			"or set the CLI (chart value cli, %s) to the absolute path of the binary in the image", os.Getenv("PATH"), where, jobenv.CLI)
	case filepath.IsAbs(name):
		fi, err := os.Stat(name)
		if err != nil {
			return "", fmt.Errorf("%s: %w in %s", jobenv.CLI, err, where)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s: %s is not an executable file in %s", jobenv.CLI, name, where)
		}
		return name, nil
	case name != "terraform" && name != "tofu":
		return "", fmt.Errorf("%s is %q; use terraform, tofu, an absolute path to one of them, or leave it empty", jobenv.CLI, name)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%[1]s is %[2]s but %[2]s is not on PATH (%[3]s) in %[4]s: use an image that has it, "+
			"set %[1]s (chart value cli) to its absolute path, or leave it empty to take whichever of tofu and terraform the image has",
			jobenv.CLI, name, os.Getenv("PATH"), where)
	}
	return p, nil
}
