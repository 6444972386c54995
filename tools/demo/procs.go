package demo

import (
	"bytes"
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
	// Not yet reaped, the child is in the process table even if it already exited.
	st, err := readProcStat(procRoot, pid)
	if err != nil {
		return fmt.Errorf("start %s: %w", d.name, err)
	}
	return os.WriteFile(d.pidFile(), fmt.Appendf(nil, "%d %d\n", pid, st.startTime), 0o644)
}

// procRoot is where the kernel's process table is mounted.
const procRoot = "/proc"

// procStat is what /proc/<pid>/stat says about a process.
type procStat struct {
	state     byte   // R, S, D, Z, X, ...
	startTime uint64 // clock ticks after boot at which the process was created (field 22)
}

// readProcStat reads /proc/<pid>/stat under root.
func readProcStat(root string, pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	// The command name, in parentheses, may hold spaces and parentheses: fields start after the
	// last ')'. Then come state (field 3) ... starttime (field 22).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("malformed %s/%d/stat", root, pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed %s/%d/stat", root, pid)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed %s/%d/stat: %w", root, pid, err)
	}
	return procStat{state: f[0][0], startTime: start}, nil
}

// running returns the pid when the daemon's process is alive.
func (d daemon) running() (int, bool) {
	b, err := os.ReadFile(d.pidFile())
	if err != nil {
		return 0, false
	}
	return aliveAs(procRoot, string(b))
}

// aliveAs reports whether the process a pid file describes ("<pid> <start time>") is alive:
// the pid exists, is not a zombie (nothing reaps the demo's daemons once `make demo` has exited,
// so a dead one stays in the process table), and was created at the recorded time, so a pid
// reused by another program does not count. The process's command line is deliberately not
// looked at: right after exec the kernel shows an empty one for a moment (the new program's
// arguments are not yet mapped), and treating that as "not ours" made `make demo` report a
// daemon that had just started as "exited during start-up".
func aliveAs(root, pidFile string) (int, bool) {
	f := strings.Fields(pidFile)
	if len(f) != 2 {
		return 0, false // empty, or written by an older demo: treat as stale
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return 0, false
	}
	start, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	st, err := readProcStat(root, pid)
	if err != nil || st.state == 'Z' || st.state == 'X' || st.startTime != start {
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
