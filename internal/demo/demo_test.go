package demo

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// freeAddr returns a loopback address nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// TestDemoEndToEnd runs the flow of `make demo` and `make demo-down` non-interactively: test bed,
// orchestrator, quickstart applied with the real CLI and the locally built provider, agent,
// two deployments on one state key, and a teardown that leaves nothing running.
func TestDemoEndToEnd(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("set TF_ACC=1 to run the demo end to end (make test does)")
	}
	if _, err := testbed.BinDir(); err != nil {
		t.Fatalf("test bed binaries: %v", err)
	}
	clis := []string{"terraform"}
	if tofu := os.Getenv("OUTPOST_TOFU"); tofu != "" {
		clis = append(clis, "tofu")
	} else {
		t.Log("OUTPOST_TOFU is not set: the OpenTofu run of the demo is skipped")
	}
	for _, cli := range clis {
		t.Run(cli, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			var out bytes.Buffer
			c := Config{
				Repo: repoRoot(t), Dir: t.TempDir(), CLI: cli, TofuPath: os.Getenv("OUTPOST_TOFU"),
				OrchestratorAddr: freeAddr(t), StateAddr: freeAddr(t), HealthAddr: freeAddr(t),
				Out: &out,
			}
			t.Cleanup(func() { _ = Down(context.Background(), c) })
			err := Up(ctx, c)
			if IsPrereq(err) && strings.Contains(err.Error(), "in use") {
				// Another test package took one of the free ports meanwhile; pick new ones once.
				t.Logf("retrying with other ports: %v", err)
				c.OrchestratorAddr, c.StateAddr, c.HealthAddr = freeAddr(t), freeAddr(t), freeAddr(t)
				out.Reset()
				err = Up(ctx, c)
			}
			if err != nil {
				t.Fatalf("demo up: %v\n--- output ---\n%s", err, out.String())
			}
			text := out.String()
			for _, want := range []string{
				"the Terraform state holds no private key: checked",
				`connected: agent`,
				"==> " + cli + " apply",
				`greeting = "hello from outpost"`,
				"api_token = (sensitive)",
				"state key quickstart/hello",
				"no changes",
			} {
				if !strings.Contains(text, want) {
					t.Errorf("demo output lacks %q", want)
				}
			}
			if t.Failed() {
				t.Logf("--- output ---\n%s", text)
			}

			// A second run reuses what runs and converges: no error, the quickstart unchanged,
			// and the same state key still shows no changes.
			out.Reset()
			if err := Up(ctx, c); err != nil {
				t.Fatalf("second demo up: %v\n--- output ---\n%s", err, out.String())
			}
			for _, want := range []string{"already running", "Resources: 0 added, 0 changed, 0 destroyed", "no changes"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("second run output lacks %q", want)
				}
			}

			// Down stops everything and frees the ports.
			out.Reset()
			if err := Down(ctx, c); err != nil {
				t.Fatalf("demo down: %v\n%s", err, out.String())
			}
			for _, name := range []string{"agent", "orchestrator"} {
				if pid, alive := (daemon{name: name, dir: c.Dir}).running(); alive {
					t.Errorf("%s (pid %d) still runs after down", name, pid)
				}
			}
			for _, addr := range []string{c.OrchestratorAddr, c.StateAddr, c.HealthAddr} {
				if err := portFree(ctx, addr); err != nil {
					t.Errorf("port %s still in use after down: %v", addr, err)
				}
			}
			if ps, err := exec.CommandContext(ctx, "pgrep", "-f", filepath.Join(c.Dir, "testbed")).Output(); err == nil && len(bytes.TrimSpace(ps)) > 0 {
				t.Errorf("test-bed processes still run after down: %s", ps)
			}
		})
	}
}
