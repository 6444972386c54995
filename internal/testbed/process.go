package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
)

// process is one child of the test bed (etcd, kube-apiserver, ...). Each runs in its own process
// group so Stop can kill it together with anything it forked, and (unless detached) with
// Pdeathsig, so the kernel kills it when the test binary dies, even by SIGKILL or a `go test`
// timeout: a test bed must never outlive the tests that started it.
type process struct {
	name string
	cmd  *exec.Cmd
	// exe is the binary the process runs once a wrapper (unshare, nsenter) exec'd it, when that
	// is not cmd.Path: a detached test bed's record names it, so StopDir knows the process as its
	// own (ours) and stops it.
	exe     string
	logPath string
	exited  chan struct{} // closed when the process has exited
	waitErr error         // valid once exited is closed
	stopped atomic.Bool   // Stop was called: an exit is expected
}

// startProcess starts bin with args, stdout and stderr appended to <dir>/logs/<name>.log.
func startProcess(dir, name, bin string, args, env []string, detach bool) (*process, error) {
	logDir := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor

	// Not CommandContext: the process outlives the context of Start; Stop ends it.
	cmd := exec.Command(bin, args...) //nolint:noctx // see above
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = nil
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if detach {
		// A new session: Ctrl-C in the terminal of `outpost-testbed up` does not reach it, and it
		// keeps running after `up` returns. `outpost-testbed down` stops it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	fmt.Fprintf(logFile, "### %s %s\n", bin, strings.Join(args, " "))
	if err := onSpawnerThread(cmd.Start); err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Pdeathsig fires when the OS thread that started the child exits, not the process. The Go
// runtime ends a thread when a goroutine locked to it returns without unlocking, so a child
// started from such a thread would be killed in the middle of a test. All children are therefore
// started from one goroutine locked to its thread for the life of the process.
var (
	spawnOnce sync.Once
	spawnReqs chan func()
)

func onSpawnerThread(start func() error) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for f := range spawnReqs {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnReqs <- func() { errc <- start() }
	return <-errc
}

// exitedErr returns an error describing an unexpected exit, or nil while the process runs.
func (p *process) exitedErr() error {
	select {
	case <-p.exited:
		if p.stopped.Load() {
			return nil
		}
		return p.failure(fmt.Sprintf("exited unexpectedly (%v)", p.waitErr))
	default:
		return nil
	}
}

// failure builds an error about p that carries the end of its log, which is almost always where
// the reason is (a bad flag, a port in use, a failed health check).
func (p *process) failure(what string) error {
	return &componentError{Component: p.name, What: what, LogPath: p.logPath, Tail: tailFile(p.logPath, 40)}
}

// componentError is a failure of one test bed component, with the last lines of its log.
type componentError struct {
	Component string
	What      string
	LogPath   string
	Tail      string
}

func (e *componentError) Error() string {
	return fmt.Sprintf("%s %s; last lines of %s:\n%s", e.Component, e.What, e.LogPath, indent(e.Tail))
}

// portInUse reports whether err is a component failing because a port it was given got taken
// between choosing it and binding it (another test bed starting at the same moment).
func portInUse(err error) bool {
	var ce *componentError
	return errors.As(err, &ce) && strings.Contains(ce.Tail, "address already in use")
}

// stop sends SIGTERM to the process group, and SIGKILL after grace (at once if grace is 0).
func (p *process) stop(grace time.Duration) {
	p.stopped.Store(true)
	pid := p.cmd.Process.Pid
	select {
	case <-p.exited:
		_ = syscall.Kill(-pid, syscall.SIGKILL) // anything it left behind in its group
		return
	default:
	}
	if grace > 0 {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(grace):
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
	}
}

// tailFile returns at most the last n lines (and at most 8 KiB) of a file.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read the log: %v)", err)
	}
	defer f.Close()
	const maxBytes = 8 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > maxBytes {
		_, _ = f.Seek(fi.Size()-maxBytes, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	b = bytes.TrimRight(b, "\n")
	lines := strings.Split(string(b), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "(the log is empty)"
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, from below the ephemeral range
// (porttest). A port can still be taken by someone else before the component binds it; Start
// retries with new ports when that happens.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for len(ports) < n {
		p, err := porttest.Port(context.Background())
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil // no /proc: best effort
	}
	// The state follows the parenthesized command name, which may itself contain spaces.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
