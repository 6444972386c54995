package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/cli"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// harness runs the command line in-process against a real orchestrator over HTTP, with a
// config file of its own and an environment it controls.
type harness struct {
	t    *testing.T
	inst *orchestratortest.Instance
	dir  string
	// skew moves the orchestrator's clock forward (for job lease expiry).
	skew atomic.Int64
	mu   sync.Mutex
	env  map[string]string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir()}
	h.inst = orchestratortest.Start(t, orchestratortest.WithClock(func() time.Time {
		return time.Now().Add(time.Duration(h.skew.Load()))
	}))
	h.env = map[string]string{"OUTPOST_CONFIG": filepath.Join(h.dir, "config", "config.yaml"), "HOME": h.dir}
	return h
}

func (h *harness) setenv(k, v string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v == "" {
		delete(h.env, k)
		return
	}
	h.env[k] = v
}

func (h *harness) getenv(k string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.env[k]
}

// result is one run of the command line.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return "exit " + strconv.Itoa(r.code) + "\n--- stdout\n" + r.stdout + "--- stderr\n" + r.stderr
}

// run runs `outpost args...` with stdin.
func (h *harness) run(stdin string, args ...string) result {
	return h.runWith(nil, stdin, args...)
}

// runWith also delivers interrupts from intr.
func (h *harness) runWith(intr <-chan os.Signal, stdin string, args ...string) result {
	h.t.Helper()
	var out, errb clienttest.Buffer
	code := cli.Run(context.Background(), args, cli.Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: h.getenv, Interrupts: intr})
	return result{code, out.String(), errb.String()}
}

// must runs a command that has to succeed.
func (h *harness) must(args ...string) result {
	h.t.Helper()
	r := h.run("", args...)
	if r.code != 0 {
		h.t.Fatalf("outpost %s: %s", strings.Join(args, " "), r)
	}
	return r
}

// expect runs a command and checks its exit code and that its output holds every want.
func (h *harness) expect(code int, args []string, want ...string) result {
	h.t.Helper()
	r := h.run("", args...)
	h.check(r, code, args, want...)
	return r
}

func (h *harness) check(r result, code int, args []string, want ...string) {
	h.t.Helper()
	if r.code != code {
		h.t.Errorf("outpost %s: exit %d, want %d\n%s", strings.Join(args, " "), r.code, code, r)
		return
	}
	for _, w := range want {
		if !strings.Contains(r.stdout+r.stderr, w) {
			h.t.Errorf("outpost %s: output lacks %q\n%s", strings.Join(args, " "), w, r)
		}
	}
}

// admin is a Go client of the same orchestrator, for checks and the scripted agent.
func (h *harness) admin() *client.AdminClient {
	h.t.Helper()
	c, err := client.NewAdminClient(h.inst.URL, "acme", h.inst.AdminToken)
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (h *harness) write(name, body string) string {
	h.t.Helper()
	p := filepath.Join(h.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *harness) readFile(path string) string {
	h.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		h.t.Fatal(err)
	}
	return string(b)
}
