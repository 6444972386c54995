// Package process is the process executor: it runs each claimed attempt as a local `outpost-agent
// job` process, the job runner without a Kubernetes Job around it. It is how the demo and the
// real terraform/tofu tests run attempts without a container runtime. Each attempt has a folder
// under the work dir holding everything a restarted agent needs to find it again: the claim
// (without token), the token file (0600), the supervising wrapper's pid, and the exit code the
// wrapper writes. The processes run in their own session (setsid), so an agent restart leaves
// them be.
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

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
)

// Files in an attempt's folder.
const (
	claimFile        = "claim.json"
	tokenFile        = "token"
	stateTokenFile   = "state-token"
	pidFile          = "pid"
	cancelFile       = "cancel-requested"
	failureFile      = "failure.json"
	pendingEventFile = "pending-event"
	logFile          = "output.log"
)

// Options configure the executor.
type Options struct {
	// WorkDir holds the attempts' folders.
	WorkDir string `json:"workDir"`
	// AgentBinary is the outpost-agent that runs `job` (and the wrapper).
	AgentBinary string `json:"agentBinary"`
	APIURL      string `json:"-"`
	// InsecureAllowHTTP hands the agent's --insecure-allow-http on to the job runner.
	InsecureAllowHTTP bool   `json:"-"`
	StateURL          string `json:"-"`
	// StateCA is the PEM of the state backend's CA (--state-tls-secret), handed to the job runner.
	StateCA  string       `json:"-"`
	CLI      string       `json:"-"`
	CABundle string       `json:"-"`
	Logger   *slog.Logger `json:"-"`
	// Traces is where the job runners and their CLI send their spans (tracing.ChildEnv).
	Traces tracing.Settings `json:"-"`
	// TracerProvider makes the spans of process starts; nil traces nothing.
	TracerProvider trace.TracerProvider `json:"-"`
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
	DeploymentID   string    `json:"deployment_id"`
	Attempt        int       `json:"attempt"`
	Fencing        int64     `json:"fencing"`
	StateKey       string    `json:"state_key"`
	StateStorage   string    `json:"state_storage"`
	StateNamespace string    `json:"state_namespace,omitempty"`
	Operation      string    `json:"operation,omitempty"`
	PlanOf         string    `json:"plan_of,omitempty"`
	TimeoutSeconds int       `json:"timeout_seconds"`
	ClaimedAt      time.Time `json:"claimed_at"`
}

type cancelRecord struct {
	At    time.Time     `json:"at"`
	Grace time.Duration `json:"grace"`
}

type failureRecord struct {
	Reason  api.Reason `json:"reason"`
	Message string     `json:"message"`
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

// dir is the folder of an attempt (named like the Job the kubernetes executor would create).
func (e *Executor) dir(deploymentID string, attempt int) string {
	return filepath.Join(e.o.WorkDir, safeName(deploymentID)+"-"+strconv.Itoa(attempt))
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
// running or finished, and starting it again would run the attempt twice.
func (e *Executor) Start(ctx context.Context, c *api.Claim, stateToken string) (err error) {
	ctx, span := tracing.OrOff(e.o.TracerProvider).Tracer("github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/process").
		Start(ctx, tracing.SpanStartProcess, trace.WithAttributes(attribute.String(tracing.AttrDeployment, c.DeploymentID), attribute.Int(tracing.AttrAttempt, c.Attempt)))
	defer func() { tracing.End(span, err) }()
	e.mu.Lock()
	defer e.mu.Unlock()
	dir := e.dir(c.DeploymentID, c.Attempt)
	if _, err := os.Stat(filepath.Join(dir, pidFile)); err == nil {
		e.log.Info("adopted existing attempt process", "deployment_id", c.DeploymentID, "attempt", c.Attempt)
		return nil
	}
	if err := os.MkdirAll(filepath.Join(dir, "work"), 0o700); err != nil {
		return fmt.Errorf("create the attempt's folder: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, tokenFile), []byte(c.JobToken)); err != nil {
		return fmt.Errorf("write job token file: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, stateTokenFile), []byte(stateToken)); err != nil {
		return fmt.Errorf("write state credential file: %w", err)
	}
	p := &c.Placement
	rec := claimRecord{DeploymentID: c.DeploymentID, Attempt: c.Attempt, Fencing: c.Lease.Fencing, StateKey: p.StateKey,
		StateStorage: p.StateStorage.Type, StateNamespace: p.KubernetesStateNamespace(), TimeoutSeconds: p.TimeoutSeconds,
		Operation: string(p.Operation), ClaimedAt: time.Now().UTC()}
	if p.ApplyPlan != nil {
		rec.PlanOf = p.ApplyPlan.DeploymentID
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
		return fmt.Errorf("open the attempt's log: %w", err)
	}
	defer out.Close()
	// Never canceled: the process must outlive the call, and the agent process too.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), e.o.AgentBinary, WrapperCommand, dir, "--", e.o.AgentBinary, "job")
	cmd.Dir = dir
	// The job runner's spans nest under the process's start (none when ctx has no span: an
	// attempt restarted by Run after an agent restart begins a trace of its own).
	cmd.Env = append(e.env(dir, rec), tracing.ChildEnv(ctx, e.o.Traces)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the attempt's process: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, pidFile), []byte(strconv.Itoa(cmd.Process.Pid))); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return fmt.Errorf("record the attempt's pid: %w", err)
	}
	e.log.Info("started attempt process", "deployment_id", rec.DeploymentID, "attempt", rec.Attempt, "pid", cmd.Process.Pid, "dir", dir)
	go func() {
		_ = cmd.Wait() // reap; the exit code is in the file the wrapper wrote
		e.notify.Notify()
	}()
	return nil
}

// env is the job runner's environment (package jobenv) on top of the agent's own, minus the
// agent's OUTPOST_* settings (which mean something else to the job runner).
func (e *Executor) env(dir string, rec claimRecord) []string {
	var env []string
	for _, kv := range os.Environ() {
		// The agent's own traceparent, if it has one, is not the attempt's.
		if !strings.HasPrefix(kv, "OUTPOST_") && !strings.HasPrefix(kv, tracing.EnvTraceparent+"=") {
			env = append(env, kv)
		}
	}
	env = append(env,
		jobenv.APIURL+"="+e.o.APIURL,
		jobenv.TokenFile+"="+filepath.Join(dir, tokenFile),
		jobenv.StateTokenFile+"="+filepath.Join(dir, stateTokenFile),
		jobenv.CLI+"="+e.o.CLI,
		jobenv.WorkDir+"="+filepath.Join(dir, "work"),
	)
	if rec.StateStorage == api.StateStorageKubernetes && e.o.StateURL != "" {
		env = append(env, jobenv.StateURL+"="+e.o.StateURL)
		if e.o.StateCA != "" {
			env = append(env, jobenv.StateCA+"="+e.o.StateCA)
		}
	}
	if e.o.CABundle != "" {
		env = append(env, jobenv.CABundleFile+"="+e.o.CABundle)
	}
	if e.o.InsecureAllowHTTP {
		env = append(env, jobenv.InsecureAllowHTTP+"=true")
	}
	return env
}

// Cancel implements executor.Executor: SIGTERM to the attempt's process group now, SIGKILL after
// the grace (enforced by Run, so it survives an agent restart too).
func (e *Executor) Cancel(_ context.Context, deploymentID string, attempt int, grace time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	dir := e.dir(deploymentID, attempt)
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
func (e *Executor) Cleanup(_ context.Context, deploymentID string, attempt int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	dir := e.dir(deploymentID, attempt)
	if pid, ok := alivePid(dir); ok {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove the attempt's folder: %w", err)
	}
	e.notify.Notify()
	return nil
}

// SavePendingEvent implements executor.Executor.
func (e *Executor) SavePendingEvent(_ context.Context, deploymentID string, attempt int, event []byte) error {
	dir := e.dir(deploymentID, attempt)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("no folder of the attempt to keep its finished event in: %w", err)
	}
	return writeAtomic(filepath.Join(dir, pendingEventFile), event)
}

// JobToken implements executor.Executor.
func (e *Executor) JobToken(_ context.Context, deploymentID string, attempt int) (string, error) {
	b, err := os.ReadFile(filepath.Join(e.dir(deploymentID, attempt), tokenFile))
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(b) == 0) {
		return "", executor.ErrNoToken
	}
	return string(b), err
}
