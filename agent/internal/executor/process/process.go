// Package process runs each claimed job as a local `outpost-agent job` process. It is how the
// demo and the real terraform/tofu tests run jobs without a container runtime. Each job has a
// folder under the work dir holding everything a restarted agent needs to find it again: the
// claim (without token), the token file (0600), the supervising wrapper's pid, and the exit code
// the wrapper writes. Jobs run in their own session (setsid), so an agent restart leaves them be.
package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Files in a job folder.
const (
	claimFile   = "claim.json"
	tokenFile   = "token"
	pidFile     = "pid"
	cancelFile  = "cancel-requested"
	failureFile = "failure.json"
	reportFile  = "final-report"
	logFile     = "output.log"
)

// Options configure the executor.
type Options struct {
	WorkDir string
	// AgentBinary is the outpost-agent that runs `job` (and the wrapper).
	AgentBinary string
	APIURL      string
	StateURL    string
	CLI         string
	CABundle    string
	Logger      *slog.Logger
}

// Executor implements executor.Executor with local processes.
type Executor struct {
	o      Options
	log    *slog.Logger
	notify *executor.Notifier
	mu     sync.Mutex // serialises launches and folder changes
}

var _ executor.Executor = (*Executor)(nil)

// claimRecord is claim.json: what the agent must remember of a claim, minus the token.
type claimRecord struct {
	JobID          string    `json:"job_id"`
	Attempt        int       `json:"attempt"`
	Fencing        int64     `json:"fencing"`
	StateKey       string    `json:"state_key"`
	StateStorage   string    `json:"state_storage"`
	StateNamespace string    `json:"state_namespace,omitempty"`
	TimeoutSeconds int       `json:"timeout_seconds"`
	ClaimedAt      time.Time `json:"claimed_at"`
}

type cancelRecord struct {
	At    time.Time     `json:"at"`
	Grace time.Duration `json:"grace"`
}

type failureRecord struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// New returns a process executor; the work dir is created if missing.
func New(o Options) (*Executor, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.AgentBinary == "" {
		bin, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the agent binary for `job` (set --agent-binary): %w", err)
		}
		o.AgentBinary = bin
	}
	if err := os.MkdirAll(o.WorkDir, 0o700); err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	return &Executor{o: o, log: o.Logger.With("executor", "process"), notify: executor.NewNotifier()}, nil
}

// dirName is the folder of a job attempt (the same deterministic name a Kubernetes Job gets).
func (e *Executor) dir(jobID string, attempt int) string {
	return filepath.Join(e.o.WorkDir, safeName(jobID)+"-"+strconv.Itoa(attempt))
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

// Changes implements executor.Executor.
func (e *Executor) Changes() <-chan struct{} { return e.notify.C() }

// Start implements executor.Executor. A folder that already exists is adopted: its process is
// running or finished, and starting it again would run the job twice.
func (e *Executor) Start(ctx context.Context, c *api.Claim) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	dir := e.dir(c.JobID, c.Attempt)
	if _, err := os.Stat(filepath.Join(dir, pidFile)); err == nil {
		e.log.Info("adopted existing job process", "job_id", c.JobID, "attempt", c.Attempt)
		return nil
	}
	if err := os.MkdirAll(filepath.Join(dir, "work"), 0o700); err != nil {
		return fmt.Errorf("create job folder: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, tokenFile), []byte(c.JobToken)); err != nil {
		return fmt.Errorf("write job token file: %w", err)
	}
	rec := claimRecord{JobID: c.JobID, Attempt: c.Attempt, Fencing: c.Lease.Fencing, StateKey: c.Spec.StateKey,
		StateStorage: c.Spec.StateStorage.Type, TimeoutSeconds: c.Spec.TimeoutSeconds, ClaimedAt: time.Now().UTC()}
	if ks := c.Spec.StateStorage.Kubernetes; ks != nil {
		rec.StateNamespace = ks.Namespace
	}
	data, _ := json.Marshal(rec)
	if err := writeAtomic(filepath.Join(dir, claimFile), data); err != nil {
		return fmt.Errorf("write claim record: %w", err)
	}
	if err := e.launch(ctx, dir, rec); err != nil {
		return err
	}
	e.notify.Notify()
	return nil
}

// launch starts the wrapper in a new session and records its pid. Called with e.mu held.
func (e *Executor) launch(ctx context.Context, dir string, rec claimRecord) error {
	out, err := os.OpenFile(filepath.Join(dir, logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open job log: %w", err)
	}
	defer out.Close()
	// Never canceled: the job must outlive the call, and the agent process too.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), e.o.AgentBinary, WrapperCommand, dir, "--", e.o.AgentBinary, "job")
	cmd.Dir = dir
	cmd.Env = e.env(dir, rec)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start job process: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, pidFile), []byte(strconv.Itoa(cmd.Process.Pid))); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return fmt.Errorf("record job pid: %w", err)
	}
	e.log.Info("started job process", "job_id", rec.JobID, "attempt", rec.Attempt, "pid", cmd.Process.Pid, "dir", dir)
	go func() {
		_ = cmd.Wait() // reap; the exit code is in the file the wrapper wrote
		e.notify.Notify()
	}()
	return nil
}

// env is the job runner's environment (package jobenv) on top of the agent's own, minus the
// agent's OUTPOST_* settings (which mean something else to the job).
func (e *Executor) env(dir string, rec claimRecord) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTPOST_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		jobenv.APIURL+"="+e.o.APIURL,
		jobenv.TokenFile+"="+filepath.Join(dir, tokenFile),
		jobenv.CLI+"="+e.o.CLI,
		jobenv.WorkDir+"="+filepath.Join(dir, "work"),
	)
	if rec.StateStorage == api.StateStorageKubernetes && e.o.StateURL != "" {
		env = append(env, jobenv.StateURL+"="+e.o.StateURL)
	}
	if e.o.CABundle != "" {
		env = append(env, jobenv.CABundleFile+"="+e.o.CABundle)
	}
	return env
}

// Cancel implements executor.Executor: SIGTERM to the job's process group now, SIGKILL after
// the grace (enforced by Run, so it survives an agent restart too).
func (e *Executor) Cancel(_ context.Context, jobID string, attempt int, grace time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	dir := e.dir(jobID, attempt)
	if _, err := os.Stat(filepath.Join(dir, claimFile)); err != nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, cancelFile)); err == nil {
		return nil
	}
	data, _ := json.Marshal(cancelRecord{At: time.Now().UTC(), Grace: grace})
	if err := writeAtomic(filepath.Join(dir, cancelFile), data); err != nil {
		return fmt.Errorf("record cancel: %w", err)
	}
	if pid, ok := alivePid(dir); ok {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
	}
	e.notify.Notify()
	return nil
}

// Cleanup implements executor.Executor.
func (e *Executor) Cleanup(_ context.Context, jobID string, attempt int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	dir := e.dir(jobID, attempt)
	if pid, ok := alivePid(dir); ok {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove job folder: %w", err)
	}
	e.notify.Notify()
	return nil
}

// SavePendingReport implements executor.Executor.
func (e *Executor) SavePendingReport(_ context.Context, jobID string, attempt int, report []byte) error {
	dir := e.dir(jobID, attempt)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("no job folder to keep the final report in: %w", err)
	}
	return writeAtomic(filepath.Join(dir, reportFile), report)
}

// JobToken implements executor.Executor.
func (e *Executor) JobToken(_ context.Context, jobID string, attempt int) (string, error) {
	b, err := os.ReadFile(filepath.Join(e.dir(jobID, attempt), tokenFile))
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(b) == 0) {
		return "", executor.ErrNoToken
	}
	return string(b), err
}
