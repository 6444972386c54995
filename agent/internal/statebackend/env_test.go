package statebackend

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobtoken"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/netnstest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// Every test of this package runs against the real kube-apiserver of the test bed: the handler
// is thin, and what matters is what the CLIs and the API server do with it.
func TestMain(m *testing.M) {
	if netnstest.Inside() {
		os.Exit(m.Run()) // TestForwardToLostLeaderEnds in its network namespace: no test bed
	}
	testbed.Main(m, testbed.Options{})
}

// testLogger discards logs unless OUTPOST_TEST_LOG is set with -v.
func testLogger() *slog.Logger {
	if testing.Verbose() && os.Getenv("OUTPOST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testAuthz is the test's Authorizer: user → password, each user may touch every key (or only
// the keys listed in allowed), holder "job/<user>/1", and liveness switched per holder.
type testAuthz struct {
	mu      sync.Mutex
	users   map[string]string
	allowed map[string]string // user → the only key it may touch (optional)
	plan    map[string]bool   // users that may only read (plan attempts)
	dead    map[string]bool
}

func newTestAuthz() *testAuthz {
	return &testAuthz{users: map[string]string{}, allowed: map[string]string{}, plan: map[string]bool{}, dead: map[string]bool{}}
}

func (a *testAuthz) add(user, password string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.users[user] = password
}

func (a *testAuthz) kill(holder string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dead[holder] = true
}

// addPlan adds a user that may only read, as a plan attempt.
func (a *testAuthz) addPlan(user, password string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.users[user] = password
	a.plan[user] = true
}

func (a *testAuthz) Authorize(_ context.Context, user, password, key string) (jobtoken.Access, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if pw, ok := a.users[user]; !ok || pw != password {
		return jobtoken.Access{}, jobtoken.ErrUnauthenticated
	}
	if k, ok := a.allowed[user]; ok && k != key {
		return jobtoken.Access{}, jobtoken.ErrForbidden
	}
	return jobtoken.Access{Holder: "job/" + user + "/1", ReadOnly: a.plan[user]}, nil
}

func (a *testAuthz) HolderAlive(_ context.Context, holder string) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.dead[holder], nil
}

// testOrg is the organisation the tests' states belong to.
const testOrg = "acme"

// env is one namespace of the test bed with a store, the handler in an httptest server, and
// the test authorizer.
type env struct {
	t       *testing.T
	cluster *testbed.Cluster
	ns      string
	store   *statestore.Store
	handler *Handler
	srv     *httptest.Server
	authz   *testAuthz
}

func newEnv(t *testing.T, sopts statestore.Options, hopts ...Option) *env {
	t.Helper()
	c := testbed.Shared(t)
	ns := testbed.NewNamespace(t, c)
	if sopts.Logger == nil {
		sopts.Logger = testLogger()
	}
	if sopts.Scope == "" {
		sopts.Scope = testOrg
	}
	st := mustStore(statestore.New(c.Client(), ns, sopts))
	authz := newTestAuthz()
	h := NewHandler(st, authz, sopts.Logger, hopts...)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	return &env{t: t, cluster: c, ns: ns, store: st, handler: h, srv: srv, authz: authz}
}

func (e *env) url(key string) string { return e.srv.URL + PathPrefix + url.PathEscape(key) }

// cli is a Terraform or OpenTofu binary.
type cli struct{ name, path string }

// forEachCLI runs fn for Terraform and, when OUTPOST_TOFU names the binary, for OpenTofu. The
// OpenTofu case is skipped (visibly) when OUTPOST_TOFU is unset; `make test` always sets it.
func forEachCLI(t *testing.T, fn func(t *testing.T, c cli)) {
	tf := os.Getenv("TF_ACC_TERRAFORM_PATH")
	if tf == "" || strings.Contains(filepath.Base(tf), "tofu") {
		tf = "terraform"
	}
	if p, err := exec.LookPath(tf); err == nil {
		tf = p
	} else {
		t.Fatalf("terraform binary not found (%v); it is required for these tests", err)
	}
	clis := []cli{{"terraform", tf}, {"tofu", os.Getenv("OUTPOST_TOFU")}}
	for _, c := range clis {
		t.Run(c.name, func(t *testing.T) {
			if c.path == "" {
				t.Skip("OUTPOST_TOFU is not set: build OpenTofu with scripts/tools.sh (make tools) and point OUTPOST_TOFU at it")
			}
			fn(t, c)
		})
	}
}

// workdir is a CLI working directory whose backend is the env's handler (or any backend
// block given).
type workdir struct {
	t   *testing.T
	cli cli
	dir string
	env []string
}

const backendHTTP = `terraform {
  backend "http" {
    address        = %[1]q
    lock_address   = %[1]q
    unlock_address = %[1]q
    lock_method    = "LOCK"
    unlock_method  = "UNLOCK"
    retry_wait_min = 1
    retry_wait_max = 2
  }
}
`

// newWorkdir writes backend.tf (http backend on key, credentials of user in the environment)
// and main.tf, then runs init.
func (e *env) newWorkdir(t *testing.T, c cli, key, user, mainTF string) *workdir {
	t.Helper()
	e.authz.add(user, "pw-"+user)
	return newWorkdirWith(t, c, fmt.Sprintf(backendHTTP, e.url(key)), mainTF,
		"TF_HTTP_USERNAME="+user, "TF_HTTP_PASSWORD=pw-"+user)
}

func newWorkdirWith(t testing.TB, c cli, backendTF, mainTF string, extraEnv ...string) *workdir {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, ".cli.tfrc")
	must(t, os.WriteFile(cfg, nil, 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "backend.tf"), []byte(backendTF), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "main.tf"), []byte(mainTF), 0o600))
	w := &workdir{cli: c, dir: dir}
	if tt, ok := t.(*testing.T); ok {
		w.t = tt
	}
	w.env = append(os.Environ(), "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1", "TF_INPUT=0",
		"TF_CLI_CONFIG_FILE="+cfg, "TF_LOG=")
	w.env = append(w.env, extraEnv...)
	if out, err := w.run("init", "-input=false"); err != nil {
		t.Fatalf("%s init: %v\n%s", c.name, err, out)
	}
	return w
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (w *workdir) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, w.cli.path, append(args[:1:1], append([]string{"-no-color"}, args[1:]...)...)...)
	if args[0] == "state" || args[0] == "force-unlock" {
		// Subcommands of `state` take -no-color after the sub-subcommand, force-unlock not at all.
		cmd = exec.CommandContext(ctx, w.cli.path, args...)
	}
	cmd.Dir = w.dir
	cmd.Env = w.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so a kill takes local-exec children too
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// run runs the CLI to completion and returns its combined output.
func (w *workdir) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := w.command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// stdout runs the CLI and returns only its standard output (for `state pull`).
func (w *workdir) stdout(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := w.command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %v: %w\n%s", w.cli.name, args, err, errb.String())
	}
	return out.Bytes(), nil
}

// started is a CLI process running in the background.
type started struct {
	cmd  *exec.Cmd
	out  *clienttest.Buffer
	done chan error
}

func (w *workdir) start(args ...string) *started {
	w.t.Helper()
	cmd := w.command(context.Background(), args...)
	sb := &clienttest.Buffer{}
	cmd.Stdout, cmd.Stderr = sb, sb
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	s := &started{cmd: cmd, out: sb, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	w.t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return s
}

// kill SIGKILLs the process group: the CLI dies without unlocking, as on OOM or node loss. It
// returns the CLI's exit ("signal: killed").
func (s *started) kill() error {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	return <-s.done
}

func (s *started) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-s.done:
		return err
	case <-time.After(timeout):
		t.Fatalf("CLI still running after %v:\n%s", timeout, s.out.String())
		return nil
	}
}

// waitLocked polls until key is locked and returns the lock.
func (e *env) waitLocked(t *testing.T, key string, timeout time.Duration) *statestore.HeldLock {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if l, err := e.store.LockInfo(context.Background(), key); err == nil && l != nil {
			return l
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("state %q not locked within %v", key, timeout)
	return nil
}

// trimPull removes the newline `state pull` prints after the document.
func trimPull(b []byte) []byte { return bytes.TrimSuffix(b, []byte("\n")) }

// mustStore is statestore.New for tests: a configuration error panics.
func mustStore(s *statestore.Store, err error) *statestore.Store {
	if err != nil {
		panic(err)
	}
	return s
}
