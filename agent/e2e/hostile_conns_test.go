package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
)

// hostileConns holds n connections to addr open from an address of its own (127.0.0.2, as
// another pod's IP), reopening at once each one the server closes. They take turns at the ways
// of holding a connection without a credential: never sending a byte, sending headers that never
// end, and sending a request without a credential (paths[i]) then keeping the connection.
type hostileConns struct {
	stop     context.CancelFunc
	wg       sync.WaitGroup
	reopened atomic.Int64
}

func startHostile(t *testing.T, addr string, n int, paths []string) *hostileConns {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &hostileConns{stop: cancel}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for i := range n {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				switch i % 3 {
				case 0:
				case 1:
					_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
				case 2:
					_, _ = fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", paths[i%len(paths)])
				}
				buf := make([]byte, 4096)
				for ctx.Err() == nil { // hold it until the server closes it
					_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
					_, err := c.Read(buf)
					var ne net.Error
					if err != nil && (!errors.As(err, &ne) || !ne.Timeout()) {
						break
					}
				}
				_ = c.Close()
				h.reopened.Add(1)
			}
		}()
	}
	t.Cleanup(h.end)
	time.Sleep(500 * time.Millisecond) // all of them open
	return h
}

func (h *hostileConns) end() {
	h.stop()
	h.wg.Wait()
}

// TestHostileConnectionsDelayNoApply (N1, N3): 64 connections held open without a credential
// against the agent's state backend (its limit is 64), then against the orchestrator (serving as
// the command does, its limit set to 64), and then against both, each reopened at once when
// closed, delay a concurrent real `terraform apply` through the agent (process executor, state in
// the agent's Kubernetes state backend) to within twice its time alone. Before connguard the
// apply waited for ever: the state backend and the orchestrator let the first comers keep their
// connections, and a 401 left its connection open.
func TestHostileConnectionsDelayNoApply(t *testing.T) {
	tf := "/usr/local/bin/terraform"
	if _, err := os.Stat(tf); err != nil {
		t.Fatalf("terraform CLI not found at %s: %v", tf, err)
	}
	e := newEnv(t, "", 2, orchestratortest.WithHTTPLimits(orchestrator.HTTPLimits{MaxConnections: 64}))
	stateAddr, workDir := porttest.Addr(t), t.TempDir()
	e.startAgent("agent-0", "--executor", "process", "--leader-elect=false", "--work-dir", workDir, "--agent-binary", agentBinary(t),
		"--cli", tf, "--state-listen", stateAddr, "--state-url", "http://"+stateAddr)
	u, err := url.Parse(e.orch.URL)
	if err != nil {
		t.Fatal(err)
	}
	orchAddr := u.Host

	n := 0
	apply := func(phase string) time.Duration {
		t.Helper()
		n++
		vars := map[string]json.RawMessage{"name": json.RawMessage(fmt.Sprintf("%q", phase)), "sleep": json.RawMessage(`0`)}
		start := time.Now()
		d, err := e.admin.CreateDeployment(t.Context(), api.DeploymentInput{RunnerID: e.runnerID, Operation: api.OperationApply,
			Source:   api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": slowConfig})}},
			StateKey: fmt.Sprintf("apps/hostile-%d", n), Variables: vars})
		if err != nil {
			t.Fatalf("%s: queue the apply: %v", phase, err)
		}
		got := e.waitTerminal([]string{d.ID}, 3*time.Minute)[d.ID]
		took := time.Since(start)
		if got.Status != api.StatusSucceeded {
			logs, _ := e.admin.GetLogs(context.Background(), d.ID, 0, 1<<20)
			t.Fatalf("%s: apply %s (%s): %s\n%s", phase, got.Status, got.Reason, got.Message, logs.Data)
		}
		return took
	}
	apply("warm-up")
	alone := apply("alone")
	t.Logf("terraform apply alone: %v", alone.Round(time.Millisecond))

	for _, phase := range []struct {
		name  string
		addrs map[string][]string
	}{
		{"64 hostile connections to the state backend", map[string][]string{stateAddr: {"/v1/states/apps%2Fhostile-1"}}},
		{"64 hostile connections to the orchestrator", map[string][]string{orchAddr: {"/healthz", "/api/v1/orgs/acme/runners", "/api/v1/job/spec"}}},
		{"64 hostile connections to each", map[string][]string{stateAddr: {"/v1/states/x"}, orchAddr: {"/healthz"}}},
	} {
		var hs []*hostileConns
		for addr, paths := range phase.addrs {
			hs = append(hs, startHostile(t, addr, 64, paths))
		}
		took := apply(phase.name)
		var reopened int64
		for _, h := range hs {
			h.end()
			reopened += h.reopened.Load()
		}
		t.Logf("terraform apply with %s: %v (alone %v; %.2fx); the hostile client reopened %d connections",
			phase.name, took.Round(time.Millisecond), alone.Round(time.Millisecond), float64(took)/float64(alone), reopened)
		// Without the protection the apply stalls for the 10 s a request waits for a connection
		// at the least (9.9 s to 49.3 s measured); on a loaded machine the hostile client's own
		// reconnects cost the apply up to about 2x of its 0.4 s, so a ratio would be noise.
		if limit := alone + 5*time.Second; took > limit {
			t.Errorf("with %s the apply took %v, more than %v (its %v alone and 5 s)", phase.name, took, limit, alone)
		}
	}
}
