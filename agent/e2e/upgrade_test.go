package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/release/releasetest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// Upgrades from the previous build (PREVIOUS_COMMIT in scripts/versions.env, built from the
// repository's history by releasetest.BuildPrevious) to the tree under test, with deployments in
// flight, on the test bed's kwok node: the agent first, then the orchestrator. Between the two,
// and before each switch, an agent and an orchestrator of different builds work together.

// upgradeTemplate: each Job's pod runs 6 s on kwok, so a good share runs across the switch.
const upgradeTemplate = `{"metadata":{"annotations":{"testbed.outpost.dev/run-duration":"6s"}},"spec":{"containers":[{"name":"main"}]}}`

// previous is the previous build (built once per test binary, then cached).
func previous(t testing.TB) releasetest.Previous { return releasetest.PreviousForTest(t, "../..") }

// agentUpgrade: the previous build's agent runs the deployments; while its Jobs run it is
// stopped (SIGTERM, as a rolling update does) and the agent of the tree under test takes over
// under another pod name: it adopts the Jobs the old one sealed, restates them, and reports them.
func agentUpgrade(t *testing.T) faultRow {
	prev := previous(t)
	n := scale(12, 60)
	e := newEnv(t, upgradeTemplate, scale(6, 20))
	c := e.watchCreations()
	old := e.startAgentBinary(prev.Bin("outpost-agent"), "agent-old")
	ids := e.deploy(n)
	testbed.WaitFor(t, 2*time.Minute, "the previous agent's first Jobs", func() (bool, string) { return c.jobs() >= 3, "" })
	switched, before := time.Now(), c.jobs()
	old.signal(syscall.SIGTERM)
	<-old.done
	e.startAgent("agent-new")
	r := e.outcome(ids, c, switched, 5*time.Minute)
	r.Note = fmt.Sprintf("agent %s → this tree after %d Jobs, %d Jobs created", prev.Version, before, c.jobs())
	return r
}

// orchestratorUpgrade: the previous build's orchestrator (its binary, bbolt) serves the agent of
// the tree under test; while deployments run it is stopped and the orchestrator of this tree
// starts on the same data directory and address: it opens the previous build's database, keeps
// every lease and job token, and the agent goes on.
func orchestratorUpgrade(t *testing.T) faultRow {
	prev := previous(t)
	n := scale(12, 60)
	addr, dataDir, token := porttest.Addr(t), t.TempDir(), "upgrade-admin-token-0123456789abcdef"
	stop := startOrchestratorBinary(t, prev.Bin("outpost-orchestrator"), addr, dataDir, token)
	e := newEnvWithOrchestrator(t, "http://"+addr, token, upgradeTemplate, scale(6, 20))
	c := e.watchCreations()
	e.startAgent("agent-0", "--leader-elect=false")
	ids := e.deploy(n)
	testbed.WaitFor(t, 2*time.Minute, "the first Jobs", func() (bool, string) { return c.jobs() >= 3, "" })
	switched, before := time.Now(), c.jobs()
	stop()
	orchestratortest.StartOn(t, addr, orchestratortest.WithData(dataDir, token))
	r := e.outcome(ids, c, switched, 5*time.Minute)
	r.Note = fmt.Sprintf("orchestrator %s → this tree after %d Jobs", prev.Version, before)
	return r
}

// startAgentBinary is startAgent with another build of the agent.
func (e *env) startAgentBinary(bin, name string, extra ...string) *agent {
	e.t.Helper()
	e.binary = bin
	defer func() { e.binary = "" }()
	return e.startAgent(name, extra...)
}

// startOrchestratorBinary runs an outpost-orchestrator binary on addr with dataDir and token,
// waits until it answers, and returns a func that stops it with SIGTERM and waits for it.
func startOrchestratorBinary(t *testing.T, bin, addr, dataDir, token string) (stop func()) {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), "orchestrator.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), bin, "--listen", addr, "--data-dir", dataDir, "--external-url", "http://"+addr)
	cmd.Env = append(os.Environ(), "OUTPOST_ORCHESTRATOR_ADMIN_TOKEN="+token)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				b, _ := os.ReadFile(log.Name())
				t.Logf("previous orchestrator's log:\n%s", b)
			}
		})
	}
	t.Cleanup(stop)
	testbed.WaitFor(t, 30*time.Second, "the previous orchestrator to answer", func() (bool, string) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+addr+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return stop
}

// newEnvWithOrchestrator is newEnv against an orchestrator the test runs itself.
func newEnvWithOrchestrator(t testing.TB, url, token, podTemplate string, maxConcurrency int) *env {
	t.Helper()
	admin, err := client.NewAdminClient(url, testOrg, token)
	if err != nil {
		t.Fatal(err)
	}
	return newEnvOn(t, url, admin, podTemplate, nil, maxConcurrency)
}
