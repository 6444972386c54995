package jobrun

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

const (
	testOrg      = "acme"
	testRunner   = "cluster-1"
	testInstance = "agent-0"
)

// harness is a real orchestrator with a kubernetes state storage and a runner, an agent client
// signed with the runner's key (standing in for the agent: it claims attempts and sends their
// events) and an in-memory state backend that accepts the claimed attempts' credentials.
type harness struct {
	t    *testing.T
	orch *orchestratortest.Instance
	// apiURL is what the job runner uses: a proxy to the orchestrator that drops every
	// connection while down is set.
	apiURL   string
	down     atomic.Bool
	admin    *client.AdminClient
	agent    *client.AgentClient
	state    *memStateBackend
	stateURL string
	cli      string
}

func newHarness(t *testing.T, cli string) *harness {
	t.Helper()
	orch := orchestratortest.Start(t)
	target, err := url.Parse(orch.URL)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, orch: orch}
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.down.Load() {
			// A network failure, not an HTTP answer: the connection just drops.
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	ctx := context.Background()
	admin, err := client.NewAdminClient(orch.URL, testOrg, orch.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateStateStorage(ctx, api.StateStorageInput{ID: "in-cluster", Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: "outpost-state"}}); err != nil {
		t.Fatal(err)
	}
	pub, priv, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := keys.EncodePublicPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateRunner(ctx, api.RunnerInput{ID: testRunner, PublicKeys: []string{pubPEM}, StateStorageID: "in-cluster",
		Job: api.RunnerJob{Namespace: "outpost-jobs", ServiceAccount: "outpost-job"}}); err != nil {
		t.Fatal(err)
	}
	agent, err := client.NewAgentClient(orch.URL, agentauth.NewSigner(testOrg, testRunner, priv))
	if err != nil {
		t.Fatal(err)
	}
	state, stateURL := newMemStateBackend(t)
	h.apiURL, h.admin, h.agent, h.state, h.stateURL, h.cli = proxy.URL, admin, agent, state, stateURL, cli
	return h
}

// deploy enqueues a deployment.
func (h *harness) deploy(op api.Operation, src api.Source, vars map[string]any, stateKey string) *api.Deployment {
	h.t.Helper()
	in := api.DeploymentInput{RunnerID: testRunner, Operation: op, Source: src, StateKey: stateKey, Variables: map[string]json.RawMessage{}}
	for k, v := range vars {
		b, _ := json.Marshal(v)
		in.Variables[k] = b
	}
	d, err := h.admin.CreateDeployment(context.Background(), in)
	if err != nil {
		h.t.Fatal(err)
	}
	return d
}

// jobResult is what one run of the job runner left behind.
type jobResult struct {
	DeploymentID string
	Code         int
	Stdout       string
	Stderr       string
	Log          string // the orchestrator's stored log
	Outputs      api.Outputs
	Token        string
	StateToken   string
	Duration     time.Duration
	Status       api.Status // the deployment's status after the finished event
}

// runOptions change how runJob runs the job runner.
type runOptions struct {
	env  map[string]string // overrides of the job runner's environment ("" unsets)
	sigs chan os.Signal    // signals for the job runner; nil: none
	ctx  context.Context   // nil: background
	// during runs concurrently with the job runner, e.g. to signal it once its output says so.
	during func(h *harness, d *api.Deployment, stdout *clienttest.Buffer)
	// process, when set, runs the job runner as a process of its own (this test binary,
	// re-executed into Main) and is called with that process once it started, so the test
	// can send real signals.
	process func(p *os.Process, stdout *clienttest.Buffer)
}

// runJob claims d as the agent would, runs the job runner with the claim's token, reports the
// result and collects the log and outputs from the orchestrator.
func (h *harness) runJob(d *api.Deployment, o runOptions) jobResult {
	h.t.Helper()
	ctx := context.Background()
	claim, err := h.agent.Claim(ctx, d.ID, api.ClaimRequest{Attempt: d.Attempt, Instance: testInstance})
	if err != nil {
		h.t.Fatalf("claim %s: %v", d.ID, err)
	}
	// The agent's state credential for the attempt: the state backend takes it, never the job token.
	stateToken := "opst_" + rand.Text()
	h.state.allow(claim.DeploymentID, stateToken)
	if _, err := h.agent.Event(ctx, d.ID, api.EventRequest{Fencing: claim.Lease.Fencing, Event: api.Event{Attempt: claim.Attempt, Seq: 0, Type: api.EventStarted}}); err != nil {
		h.t.Fatal(err)
	}
	dir := h.t.TempDir()
	tokenFile, stateTokenFile := filepath.Join(dir, "token"), filepath.Join(dir, "state-token")
	if err := os.WriteFile(tokenFile, []byte(claim.JobToken+"\n"), 0o600); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(stateTokenFile, []byte(stateToken+"\n"), 0o600); err != nil {
		h.t.Fatal(err)
	}
	env := map[string]string{
		"OUTPOST_API_URL": h.apiURL, "OUTPOST_JOB_TOKEN_FILE": tokenFile, "OUTPOST_STATE_URL": h.stateURL, "OUTPOST_STATE_TOKEN_FILE": stateTokenFile,
		"OUTPOST_CLI": h.cli, "OUTPOST_WORK_DIR": filepath.Join(dir, "work"),
	}
	for k, v := range o.env {
		env[k] = v
	}
	runCtx := o.ctx
	if runCtx == nil {
		runCtx = context.Background()
	}
	var stdout, stderr clienttest.Buffer
	var wg sync.WaitGroup
	if o.during != nil {
		wg.Add(1)
		go func() { defer wg.Done(); o.during(h, d, &stdout) }()
	}
	start := time.Now()
	var code int
	if o.process != nil {
		code = h.runProcess(env, &stdout, &stderr, o.process)
	} else {
		code = run(runCtx, nil, func(k string) string { return env[k] }, o.sigs, &stdout, &stderr)
	}
	res := jobResult{DeploymentID: d.ID, Code: code, Stdout: stdout.String(), Stderr: stderr.String(), Token: claim.JobToken, StateToken: stateToken, Duration: time.Since(start)}
	wg.Wait()

	result := api.StatusSucceeded
	if code != 0 {
		result = api.StatusFailed
	}
	ev, err := h.agent.Event(ctx, d.ID, api.EventRequest{Fencing: claim.Lease.Fencing, Event: api.Event{Attempt: claim.Attempt, Seq: 1, Type: api.EventFinished, Result: result, ExitCode: &code}})
	if err != nil {
		h.t.Fatal(err)
	}
	res.Status = ev.Status
	chunk, err := h.admin.GetLogs(ctx, d.ID, 0, 4<<20)
	if err != nil {
		h.t.Fatal(err)
	}
	if !chunk.Complete {
		h.t.Errorf("log of a finished deployment is not complete: next offset %d", chunk.NextOffset)
	}
	res.Log = string(chunk.Data)
	if res.Outputs, err = h.admin.GetOutputs(ctx, d.ID); err != nil {
		h.t.Fatal(err)
	}
	return res
}

// runProcess runs Main in a child process: the test binary, running only TestHelperJobRunner.
func (h *harness) runProcess(env map[string]string, stdout, stderr *clienttest.Buffer, started func(*os.Process, *clienttest.Buffer)) int {
	h.t.Helper()
	cmd := exec.CommandContext(h.t.Context(), os.Args[0], "-test.run=^TestHelperJobRunner$", "-test.v=false")
	cmd.Env = append(os.Environ(), "JOBRUN_HELPER_PROCESS=1")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	go started(cmd.Process, stdout)
	code, err := exitCodeOf(cmd.Wait())
	if err != nil {
		h.t.Fatal(err)
	}
	return code
}

// TestHelperJobRunner is not a test: it is the job runner process of runProcess.
func TestHelperJobRunner(t *testing.T) {
	if os.Getenv("JOBRUN_HELPER_PROCESS") != "1" {
		t.Skip("the job runner process of tests that send real signals")
	}
	os.Exit(Main(context.Background(), nil, os.Stdout, os.Stderr))
}

// checkLogDelivery asserts that the orchestrator holds exactly what the job runner printed
// (stdout is the log plus the job runner's final summary line) and that the token never shows.
func checkLogDelivery(t *testing.T, r jobResult) {
	t.Helper()
	rest, ok := strings.CutPrefix(r.Stdout, r.Log)
	if !ok {
		t.Fatalf("the orchestrator's log (%d bytes) is not what the job printed (%d bytes)\n--- log ---\n%s\n--- stdout ---\n%s", len(r.Log), len(r.Stdout), r.Log, r.Stdout)
	}
	if !strings.HasPrefix(rest, "[outpost: log: ") || strings.Count(rest, "\n") != 1 {
		t.Fatalf("stdout after the log should be the summary line only: %q", rest)
	}
	if !strings.Contains(rest, " delivered to the orchestrator]") {
		t.Fatalf("summary line reports a loss: %q", rest)
	}
	for _, s := range []string{r.Log, r.Stdout, r.Stderr} {
		if strings.Contains(s, r.Token) || (r.StateToken != "" && strings.Contains(s, r.StateToken)) {
			t.Fatal("the job token or the state credential appears in the output")
		}
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
