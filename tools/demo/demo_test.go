package demo

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
	"github.com/outpost-dev/terraform-provider-outpost/tools/browsertest"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	// go test runs a package's tests in its directory (runtime.Caller's path is module-relative
	// under -trimpath, which make test uses).
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// TestDemoEndToEnd runs the flow of `make demo` and `make demo-down` non-interactively, once per
// executor: on real pods (the default; the quickstart applied with Terraform installs the chart,
// whose agent pods, from the images the demo builds, run both deployments in job pods on the
// test bed's real node), and with EXECUTOR=process (the quickstart applied with OpenTofu when
// OUTPOST_TOFU names it, the agent and the deployments as local processes). Each ends with a
// teardown that must leave nothing behind.
func TestDemoEndToEnd(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("set TF_ACC=1 to run the demo end to end (make test does)")
	}
	if _, err := testbed.BinDir(); err != nil {
		t.Fatalf("test bed binaries: %v", err)
	}
	t.Run("kubernetes", func(t *testing.T) { testDemoOnPods(t) })
	t.Run("process", func(t *testing.T) {
		cli := "tofu"
		if os.Getenv("OUTPOST_TOFU") == "" {
			t.Log("OUTPOST_TOFU is not set: the quickstart of the process-executor run is applied with terraform")
			cli = "terraform"
		}
		testDemoWithProcesses(t, cli)
	})
}

// newDemoConfig is a demo of its own: a temporary directory and free ports.
func newDemoConfig(t *testing.T, cli, executor string, out *bytes.Buffer) Config {
	return Config{
		Repo: repoRoot(t), Dir: t.TempDir(), CLI: cli, TofuPath: os.Getenv("OUTPOST_TOFU"), Executor: executor,
		OrchestratorAddr: porttest.Addr(t), StateAddr: porttest.Addr(t), HealthAddr: porttest.Addr(t),
		Out: out,
	}
}

// up runs Up, retrying once with other ports if another test package took one meanwhile: before
// the checks (a prerequisite), or between them and a daemon's bind (the daemon's log says so).
func up(ctx context.Context, t *testing.T, c *Config, out *bytes.Buffer) error {
	t.Helper()
	err := Up(ctx, *c)
	if err != nil && (IsPrereq(err) && strings.Contains(err.Error(), "in use") || strings.Contains(err.Error(), "address already in use")) {
		t.Logf("retrying with other ports: %v", err)
		if err := Down(ctx, *c); err != nil { // what the first try started listens on the old ports
			return err
		}
		c.OrchestratorAddr, c.StateAddr, c.HealthAddr = porttest.Addr(t), porttest.Addr(t), porttest.Addr(t)
		out.Reset()
		err = Up(ctx, *c)
	}
	return err
}

func wantOutput(t *testing.T, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}

func testDemoOnPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	before, err := testbed.SnapshotHost(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c := newDemoConfig(t, "terraform", ExecutorKubernetes, &out)
	t.Cleanup(func() { _ = Down(context.Background(), c) })
	if err := up(ctx, t, &c, &out); err != nil {
		t.Fatalf("demo up: %v\n--- output ---\n%s--- end of output (the error again, for logs that keep only the tail) ---\n%v", err, out.String(), err)
	}
	text := out.String()
	if strings.Contains(text, "falling back to EXECUTOR=process") {
		if os.Getenv(testbed.CIEnv) == "true" {
			t.Fatalf("the demo fell back to local processes under %s=true:\n%s", testbed.CIEnv, text)
		}
		t.Skipf("skipped: this machine cannot run the real node, so the demo fell back to local processes:\n%s", text)
	}
	wantOutput(t, text,
		"the Terraform state holds no private key: checked",
		"/outpost-dev/outpost-agent:", "pushed to the test bed's registry", "pulls them with the login in Secret "+pullSecretName,
		"connected: agent",
		"agent pod ", "on node "+testbed.RealNodeName+", image "+registryHost(text)+"/outpost-dev/outpost-agent:",
		"ran in job pod outpost-jobs/", "on node "+testbed.RealNodeName+" (main's image "+registryHost(text)+"/outpost-dev/outpost-job:",
		"==> tofu apply", // the job image's CLI, not the host's
		`greeting = "hello from outpost"`,
		"api_token = (sensitive)",
		"state key quickstart/hello",
		"no changes",
	)
	if strings.Contains(text, "image ghcr.io/outpost-dev/") {
		t.Errorf("a pod ran an image named ghcr.io/outpost-dev/…; every one must come from the test bed's registry")
	}
	checkConsole(t, text)
	consoleScreens(t, text)
	if strings.Count(text, "ran in job pod ") != 2 {
		t.Errorf("want two deployments each in a job pod; the output says %d", strings.Count(text, "ran in job pod "))
	}
	if t.Failed() {
		t.Logf("--- output ---\n%s", text)
	}
	t.Run("key rotation", func(t *testing.T) { testKeyRotationOnPods(t, c) })
	t.Run("provider upgrade", func(t *testing.T) { testProviderUpgradeOnPods(t, c) })

	// What demo-down must remove, recorded while it runs.
	bed, err := testbed.TraceDir(filepath.Join(c.Dir, "testbed"))
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := Down(ctx, c); err != nil {
		t.Fatalf("demo down: %v\n%s", err, out.String())
	}
	checkDown(ctx, t, c)
	left, err := bed.Left(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range left {
		t.Errorf("after demo-down: %s", l)
	}
}

func testDemoWithProcesses(t *testing.T, cli string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var out bytes.Buffer
	c := newDemoConfig(t, cli, ExecutorProcess, &out)
	t.Cleanup(func() { _ = Down(context.Background(), c) })
	if err := up(ctx, t, &c, &out); err != nil {
		t.Fatalf("demo up: %v\n--- output ---\n%s--- end of output (the error again, for logs that keep only the tail) ---\n%v", err, out.String(), err)
	}
	wantOutput(t, out.String(),
		"No images needed: the agent runs as a local process (EXECUTOR=process)",
		"the Terraform state holds no private key: checked",
		`connected: agent`,
		"==> "+cli+" apply",
		`greeting = "hello from outpost"`,
		"api_token = (sensitive)",
		"state key quickstart/hello",
		"no changes",
	)
	checkConsole(t, out.String())
	if t.Failed() {
		t.Logf("--- output ---\n%s", out.String())
	}

	// A second run reuses what runs and converges: no error, the quickstart unchanged, and the
	// same state key still shows no changes.
	out.Reset()
	if err := Up(ctx, c); err != nil {
		t.Fatalf("second demo up: %v\n--- output ---\n%s--- end of output (the error again, for logs that keep only the tail) ---\n%v", err, out.String(), err)
	}
	wantOutput(t, out.String(), "already running", "Resources: 0 added, 0 changed, 0 destroyed", "no changes")

	// A run that fails after its checks keeps its logs where the error says, and demo-down
	// leaves them: here the quickstart refuses a runner id that is not a DNS-1123 label.
	out.Reset()
	broken := c
	broken.RunnerID = "Not_A_Label"
	err := Up(ctx, broken)
	if err == nil {
		t.Fatalf("a demo with an invalid runner id succeeded:\n%s", out.String())
	}
	kept := keptDir(t, err, c.Dir)
	if !strings.Contains(err.Error(), "apply of examples/quickstart failed") {
		t.Errorf("want the quickstart's failure, got: %v", err)
	}

	out.Reset()
	if err := Down(ctx, c); err != nil {
		t.Fatalf("demo down: %v\n%s", err, out.String())
	}
	checkDown(ctx, t, c)
	if !strings.Contains(out.String(), "kept the logs of a failed run: "+kept) {
		t.Errorf("demo-down does not say it kept %s:\n%s", kept, out.String())
	}
	for _, f := range []string{"demo/agent.log", "demo/orchestrator.log", "testbed/kube-apiserver.log", "cluster/pods-and-events.txt"} {
		if _, err := os.Stat(filepath.Join(kept, f)); err != nil {
			t.Errorf("the kept logs lack %s: %v", f, err)
		}
	}
}

// keptDir returns the directory a failed run's error says its logs are kept in.
func keptDir(t *testing.T, err error, demoDir string) string {
	t.Helper()
	msg := err.Error()
	i := strings.Index(msg, "The logs of this run are kept in ")
	if i < 0 {
		t.Fatalf("the error does not say where the logs are kept: %v", err)
	}
	rest := msg[i+len("The logs of this run are kept in "):]
	dir := rest[:strings.IndexByte(rest, ':')]
	if filepath.Dir(dir) != demoDir {
		t.Fatalf("logs kept in %s, want a directory of %s", dir, demoDir)
	}
	return dir
}

// checkDown checks that no daemon of the demo runs and its ports are free.
func checkDown(ctx context.Context, t *testing.T, c Config) {
	t.Helper()
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
	if ps, err := exec.CommandContext(ctx, "pgrep", "-f", c.Dir).Output(); err == nil && len(bytes.TrimSpace(ps)) > 0 {
		t.Errorf("processes of the demo still run after down: %s", ps)
	}
}

// registryHost is the test bed registry's host:port as the demo printed it when it pushed the
// images ("10.247.0.1:40123/outpost-dev/outpost-agent:0.1.0 (…) pushed to …"), or "<none>".
func registryHost(text string) string {
	m := regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+:\d+)/outpost-dev/outpost-agent:\S+ \(.*pushed to the test bed's registry`).FindStringSubmatch(text)
	if m == nil {
		return "<none>"
	}
	return m[1]
}

// consoleScreens opens the demo's console in Chromium the way its output says and takes the
// screenshots the README shows (demo-runners, demo-deployments, demo-deployment): the runner
// connected, both deployments, and the last one's timeline on the real node with its outputs.
func consoleScreens(t *testing.T, text string) {
	t.Helper()
	m := regexp.MustCompile(`web console: (\S+)/\s+sign in with the admin token \(cat (\S+)\) and organisation (\S+)`).FindStringSubmatch(text)
	if m == nil {
		return // checkConsole said so
	}
	base, org := m[1], m[3]
	token, err := os.ReadFile(m[2])
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.NewAdminClient(base, org, strings.TrimSpace(string(token)), client.AllowInsecureHTTP())
	if err != nil {
		t.Fatal(err)
	}
	deps, err := admin.ListDeployments(t.Context(), client.DeploymentFilter{})
	if err != nil || len(deps) == 0 {
		t.Fatalf("the demo's deployments: %v (%d)", err, len(deps))
	}
	b := browsertest.New(t, browsertest.Chromium(t), base, browsertest.Screenshots(t), "demo-")
	b.SignIn(strings.TrimSpace(string(token)), org)
	b.WaitFor("the quickstart runner connected", `["idle","busy"].includes(document.querySelector("#runner-quickstart .badge").textContent)`)
	if skew := browsertest.Eval[bool](b, `document.querySelector("#runner-quickstart .badge.skew") !== null`); skew {
		t.Errorf("the demo's console shows the agent's release differing from the orchestrator's: %q", b.Text("#runner-quickstart"))
	}
	b.Shot("runners")
	b.Open("/orgs/"+org+"/deployments", "table.deployments")
	b.Shot("deployments")
	last := deps[0]
	for _, d := range deps {
		if d.CreatedAt.After(last.CreatedAt) {
			last = d
		}
	}
	b.Open("/orgs/"+org+"/deployments/"+last.ID, "#log")
	b.WaitFor("the timeline on the real node", `document.querySelector("#timeline").textContent.includes("pod scheduled on `+testbed.RealNodeName+`")`)
	b.WaitFor("the outputs", `document.querySelector("#outputs") !== null && document.querySelector("#outputs").textContent.includes("greeting")`)
	b.WaitFor("the whole log", `document.querySelector("#log").dataset.complete === "true"`)
	b.Shot("deployment")
}

// checkConsole signs in to the web console the way the demo's output says: the URL it prints,
// the admin token from the file it names and the organisation it names.
func checkConsole(t *testing.T, text string) {
	t.Helper()
	m := regexp.MustCompile(`web console: (\S+)/\s+sign in with the admin token \(cat (\S+)\) and organisation (\S+)`).FindStringSubmatch(text)
	if m == nil {
		t.Error("the demo's output does not say where the web console is and how to sign in")
		return
	}
	token, err := os.ReadFile(m[2])
	if err != nil {
		t.Fatalf("the admin token file the demo names: %v", err)
	}
	form := url.Values{"token": {strings.TrimSpace(string(token))}, "org": {m[3]}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, m[1]+"/signin", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatalf("sign in to the demo's console: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/orgs/"+m[3]+"/runners" {
		t.Errorf("signing in to the demo's console answered %d (Location %q), want 303 to its runners", resp.StatusCode, resp.Header.Get("Location"))
	}
}
