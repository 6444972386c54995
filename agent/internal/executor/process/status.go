package process

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// List implements executor.Executor by reading the attempts' folders.
func (e *Executor) List(_ context.Context) ([]executor.AttemptStatus, error) {
	entries, err := os.ReadDir(e.o.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("read work dir: %w", err)
	}
	var out []executor.AttemptStatus
	for _, ent := range entries {
		if !ent.IsDir() {
			continue
		}
		if s, ok := e.status(filepath.Join(e.o.WorkDir, ent.Name())); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

func (e *Executor) status(dir string) (executor.AttemptStatus, bool) {
	var rec claimRecord
	data, err := os.ReadFile(filepath.Join(dir, claimFile))
	if err != nil || json.Unmarshal(data, &rec) != nil || rec.DeploymentID == "" {
		return executor.AttemptStatus{}, false
	}
	s := executor.AttemptStatus{DeploymentID: rec.DeploymentID, Attempt: rec.Attempt, Fencing: rec.Fencing, StateKey: rec.StateKey, StateNamespace: rec.StateNamespace,
		Operation: api.Operation(rec.Operation), PlanOf: rec.PlanOf, Status: api.StatusClaimed, ClaimedAt: rec.ClaimedAt}
	if b, err := os.ReadFile(filepath.Join(dir, pendingEventFile)); err == nil && len(b) > 0 {
		s.PendingEvent = b
	}
	if fi, err := os.Stat(filepath.Join(dir, pidFile)); err == nil {
		s.Started, s.StartedAt, s.Status = true, fi.ModTime().UTC(), api.StatusRunning
	}
	_, canceled := readCancel(dir)
	var fail failureRecord
	failed := readJSON(filepath.Join(dir, failureFile), &fail)
	if fi, err := os.Stat(filepath.Join(dir, exitCodeFile)); err == nil {
		b, _ := os.ReadFile(filepath.Join(dir, exitCodeFile))
		code, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			code = -1
		}
		s.ExitCode, s.FinishedAt = &code, fi.ModTime().UTC()
		switch {
		case canceled:
			s.Status, s.Reason, s.Message = api.StatusCanceled, executor.ReasonCanceled, "canceled by request"
		case failed:
			s.Status, s.Reason, s.Message = api.StatusFailed, fail.Reason, fail.Message
		case code == 0:
			s.Status = api.StatusSucceeded
		default:
			s.Status, s.Reason, s.Message = api.StatusFailed, executor.ReasonExitCode, fmt.Sprintf("the job runner process exited with code %d", code)
		}
		return s, true
	}
	if !s.Started {
		return s, true
	}
	if _, alive := alivePid(dir); alive {
		return s, true
	}
	// Dead without an exit code: the wrapper itself was killed (SIGKILL after a cancel's grace,
	// or the machine went away).
	s.FinishedAt = time.Now().UTC()
	switch {
	case canceled:
		s.Status, s.Reason, s.Message = api.StatusCanceled, executor.ReasonCanceled, "canceled by request (killed after the grace period)"
	case failed:
		s.Status, s.Reason, s.Message = api.StatusFailed, fail.Reason, fail.Message
	default:
		s.Status, s.Reason, s.Message = api.StatusFailed, executor.ReasonLost, "the job runner process ended without recording an exit code"
	}
	if fi, err := os.Stat(filepath.Join(dir, pidFile)); err == nil {
		s.FinishedAt = fi.ModTime().UTC() // stable across passes, so the finished event is deterministic
	}
	return s, true
}

// Run enforces timeouts and cancel grace periods, launches attempts whose launch an earlier agent
// did not finish, and signals changes, until ctx ends.
func (e *Executor) Run(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := ""
	for {
		sig := e.supervise()
		if sig != last {
			last = sig
			e.notify.Notify()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// supervise runs one pass and returns a signature of all statuses, to detect changes.
func (e *Executor) supervise() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	entries, _ := os.ReadDir(e.o.WorkDir)
	var sig bytes.Buffer
	for _, ent := range entries {
		dir := filepath.Join(e.o.WorkDir, ent.Name())
		var rec claimRecord
		if !ent.IsDir() || !readJSON(filepath.Join(dir, claimFile), &rec) {
			continue
		}
		s, _ := e.status(dir)
		fmt.Fprintf(&sig, "%s/%d=%s,%v,%d;", s.DeploymentID, s.Attempt, s.Status, s.Started, len(s.PendingEvent))
		if s.Terminal() {
			continue
		}
		if !s.Started {
			if _, err := os.Stat(filepath.Join(dir, tokenFile)); err == nil && time.Since(rec.ClaimedAt) > 5*time.Second {
				if err := e.launch(context.Background(), dir, rec); err != nil {
					e.log.Error("launch attempt left unstarted", "dir", dir, "err", err)
				}
			}
			continue
		}
		pid, alive := alivePid(dir)
		if !alive {
			continue
		}
		if c, ok := stopping(dir); ok {
			if time.Since(c.At) > c.Grace {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
			continue
		}
		timeout := time.Duration(rec.TimeoutSeconds) * time.Second
		if timeout <= 0 {
			timeout = api.DefaultJobTimeoutSeconds * time.Second
		}
		if time.Since(s.StartedAt) > timeout && !readJSON(filepath.Join(dir, failureFile), &failureRecord{}) {
			data, _ := json.Marshal(failureRecord{Reason: executor.ReasonDeadlineExceeded, Message: fmt.Sprintf("the attempt ran past its timeout of %s", timeout)})
			_ = writeAtomic(filepath.Join(dir, failureFile), data)
			cdata, _ := json.Marshal(cancelRecord{At: time.Now().UTC(), Grace: 30 * time.Second})
			_ = writeAtomic(filepath.Join(dir, deadlineFile), cdata)
			_ = syscall.Kill(-pid, syscall.SIGTERM)
		}
	}
	return sig.String()
}

func readCancel(dir string) (cancelRecord, bool) {
	var c cancelRecord
	return c, readJSON(filepath.Join(dir, cancelFile), &c)
}

// deadlineFile records when the executor stopped an attempt that overran, for the SIGKILL
// escalation.
const deadlineFile = "deadline-stop"

// stopping returns the stop request (cancel or deadline) whose grace the supervisor enforces.
func stopping(dir string) (cancelRecord, bool) {
	if c, ok := readCancel(dir); ok {
		return c, true
	}
	var c cancelRecord
	return c, readJSON(filepath.Join(dir, deadlineFile), &c)
}

func readJSON(path string, v any) bool {
	b, err := os.ReadFile(path)
	return err == nil && json.Unmarshal(b, v) == nil
}

// alivePid returns the wrapper's pid when that process still runs. The command line is checked
// so that a recycled pid is not mistaken for the attempt's.
func alivePid(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return pid, syscall.Kill(pid, 0) == nil // no /proc (not Linux): trust the signal probe
	}
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return pid, false // exited, not yet reaped
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return pid, isWrapperOf(cmdline, dir)
}

// isWrapperOf reports whether a live process's command line is that of the wrapper of the
// attempt in dir. An empty one counts: a process that is still inside execve has released its
// parent (the agent then records its pid) before the kernel set up its new arguments, and a
// status pass in that moment must not take the new attempt for a dead one. A recycled pid
// belongs to a process with a command line of its own.
func isWrapperOf(cmdline []byte, dir string) bool {
	return len(cmdline) == 0 || bytes.Contains(cmdline, []byte(WrapperCommand)) && bytes.Contains(cmdline, []byte(dir))
}
