package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// daemon is a background process the demo starts and `down` stops. Its pid lives in a file so a
// later `make demo-down` (another process) can find it.
type daemon struct {
	name string
	dir  string // the demo's state dir
}

func (d daemon) pidFile() string { return filepath.Join(d.dir, "run", d.name+".pid") }

// LogFile is where the daemon's output goes.
func (d daemon) LogFile() string { return filepath.Join(d.dir, "logs", d.name+".log") }

// start launches cmd detached from the demo's process group, so it outlives `make demo`.
func (d daemon) start(cmd *exec.Cmd) error {
	for _, sub := range []string{"run", "logs"} {
		if err := os.MkdirAll(filepath.Join(d.dir, sub), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", sub, err)
		}
	}
	logf, err := os.OpenFile(d.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", d.name, err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.name, err)
	}
	pid := cmd.Process.Pid
	// Release so the child is not reaped with us; its exit is observed through the pid file.
	_ = cmd.Process.Release()
	return os.WriteFile(d.pidFile(), []byte(strconv.Itoa(pid)), 0o644)
}

// running returns the pid when the daemon's process is alive.
func (d daemon) running() (int, bool) {
	b, err := os.ReadFile(d.pidFile())
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return 0, false
	}
	// A zombie or a recycled pid of another program must not count; check the command line.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err == nil && !strings.Contains(string(cmdline), "outpost") {
		return 0, false
	}
	return pid, true
}

// stop sends SIGTERM to the daemon's process group, then SIGKILL after grace.
func (d daemon) stop(grace time.Duration) bool {
	pid, ok := d.running()
	if !ok {
		_ = os.Remove(d.pidFile())
		return false
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if _, alive := d.running(); !alive {
			_ = os.Remove(d.pidFile())
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	_ = os.Remove(d.pidFile())
	return true
}

// portFree reports whether addr can be listened on.
func portFree(ctx context.Context, addr string) error {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return l.Close()
}

// waitHTTP polls url until it answers 200 or the timeout passes; the daemon's log tail goes into
// the error so a failed start explains itself.
func waitHTTP(ctx context.Context, url string, timeout time.Duration, d daemon) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if _, alive := d.running(); !alive {
			return fmt.Errorf("%s exited during start-up; last lines of %s:\n%s", d.name, d.LogFile(), tail(d.LogFile(), 15))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer %s within %s; last lines of %s:\n%s", d.name, url, timeout, d.LogFile(), tail(d.LogFile(), 15))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

var errPrereq = errors.New("prerequisite missing")
