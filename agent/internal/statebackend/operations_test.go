package statebackend

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	outpostcli "github.com/outpost-dev/terraform-provider-outpost/internal/cli"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// orchestratorWire is a proxy in front of the orchestrator that keeps the body of every request
// the orchestrator receives, from the agent, the admin client and the command line alike.
type orchestratorWire struct {
	mu     sync.Mutex
	bodies []string
	proxy  *httputil.ReverseProxy
}

func (w *orchestratorWire) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	w.bodies = append(w.bodies, r.Method+" "+r.URL.RequestURI()+"\n"+string(b))
	w.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(b))
	w.proxy.ServeHTTP(rw, r)
}

func (w *orchestratorWire) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bodies...)
}

// versionsTF writes a version per apply: terraform_data.a and output v follow var.v, b has
// v mod 4 instances, and secret holds what the file at the marker path says, sensitive, as does
// the sensitive output token.
const versionsTF = `
variable "v" { type = string }
variable "marker_file" { type = string }
resource "terraform_data" "a" {
  input = "attr-${var.v}-${trimspace(file(var.marker_file))}"
}
resource "terraform_data" "b" {
  count = tonumber(var.v) % 4
  input = "${var.v}-${count.index}"
}
resource "terraform_data" "secret" {
  input = sensitive("secret-${trimspace(file(var.marker_file))}")
}
output "v" { value = var.v }
output "token" {
  value     = terraform_data.secret.output
  sensitive = true
}
`

// TestStateOperationsThroughTheOrchestrator: a CLI writes 15 versions of a state through the
// agent's state backend on the test bed's kube-apiserver, and the agent keeps 10 and reports
// them. Through the orchestrator, `outpost state show`, `diff` and `rollback` are handed to the
// agent with its polls, which runs them in the cluster: the diff names what changed between two
// versions, a rollback of a locked state fails naming the holder, a rollback of the unlocked one
// writes the old version as the next serial and is listed by `outpost state versions` with the
// token that asked and the reason, and the CLI's next plan finds the rolled-back
// infrastructure. No request the orchestrator receives (nor a file it keeps) holds a value of
// the state: neither a resource attribute nor the sensitive output.
func TestStateOperationsThroughTheOrchestrator(t *testing.T) {
	forEachCLI(t, func(t *testing.T, c cli) { testStateOperations(t, c) })
}

func testStateOperations(t *testing.T, c cli) {
	wire := &orchestratorWire{}
	var apiURL string
	e, _, admin, o, agent := reportingEnvVia(t, statestore.Options{}, func(o *orchestratortest.Instance) string {
		u, err := url.Parse(o.URL)
		if err != nil {
			t.Fatal(err)
		}
		wire.proxy = httputil.NewSingleHostReverseProxy(u)
		wire.proxy.ErrorLog = log.New(io.Discard, "", 0) // polls cut at the end of the test
		srv := httptest.NewServer(wire)
		t.Cleanup(srv.Close)
		apiURL = srv.URL
		return srv.URL
	})
	ctx, cancel := context.WithCancel(context.Background())
	ops := NewOperations(func(ns string) (*Handler, error) {
		if ns != e.ns {
			return nil, fmt.Errorf("namespace %q is not served here", ns)
		}
		return e.handler, nil
	}, agent, testLogger())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			resp, err := agent.Poll(ctx, api.PollRequest{AgentVersion: "test", Instance: "agent-0", Held: []api.HeldAttempt{}, WaitSeconds: 5})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			ops.Offered(ctx, resp.StateOperations)
		}
	}()
	t.Cleanup(func() { cancel(); <-polled; ops.Wait() })

	b := make([]byte, 8)
	_, _ = rand.Read(b)
	marker := hex.EncodeToString(b)
	markerFile := filepath.Join(t.TempDir(), "marker")
	must(t, os.WriteFile(markerFile, []byte(marker+"\n"), 0o600))
	key := "ops/" + c.name
	w := e.newWorkdir(t, c, key, "dep-v", versionsTF)
	apply := func(v int) {
		t.Helper()
		if out, err := w.run("apply", "-auto-approve", "-input=false", "-var", fmt.Sprintf("v=%d", v), "-var", "marker_file="+markerFile); err != nil {
			t.Fatalf("apply v=%d: %v\n%s", v, err, out)
		}
	}
	for v := 1; v <= 15; v++ {
		apply(v)
	}
	st := waitReported(t, admin, key, 15)
	if len(st.Versions) != 10 || st.Versions[9].Serial != 6 {
		t.Fatalf("%d versions reported after 15 writes (oldest serial %d), want the newest 10", len(st.Versions), st.Versions[len(st.Versions)-1].Serial)
	}
	oldest, newest := st.Versions[9].Generation, st.Versions[0].Generation

	token, err := admin.CreateToken(ctx, "oncall")
	if err != nil {
		t.Fatal(err)
	}
	// run runs `outpost args...` with the token, wants exit code want, and returns stdout and
	// stdout with stderr.
	runOut := func(want int, args ...string) (string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		env := map[string]string{"OUTPOST_API_URL": apiURL, "OUTPOST_ORG_ID": testOrg, "OUTPOST_TOKEN": token.Token, "OUTPOST_CONFIG": filepath.Join(t.TempDir(), "config.yaml")}
		if args[1] != "versions" {
			args = append(args, "--timeout", "60s")
		}
		code := outpostcli.Run(context.Background(), args, outpostcli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Getenv: func(k string) string { return env[k] }})
		t.Logf("$ outpost %s\n%s%s(exit %d)", strings.Join(args, " "), stdout.String(), stderr.String(), code)
		if code != want {
			t.Fatalf("outpost %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, stdout.String(), stderr.String())
		}
		return stdout.String(), stdout.String() + stderr.String()
	}
	run := func(want int, args ...string) string {
		t.Helper()
		_, all := runOut(want, args...)
		return all
	}
	gen := func(g int64) string { return fmt.Sprint(g) }

	// Show names the resources and outputs of the oldest kept version (v=6: two b instances).
	out := run(outpostcli.ExitOK, "state", "show", "states", key, gen(oldest))
	for _, want := range []string{"serial 6", "terraform_data.a", "terraform_data.b[0]", "terraform_data.b[1]", "terraform_data.secret", "token (sensitive)", "4 resource instances, 2 outputs"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q", want)
		}
	}
	// Diff from v=6 to v=15: b[2] added, a and b[0..1] changed, output v changed; secret and
	// token unchanged.
	out = run(outpostcli.ExitOK, "state", "diff", "states", key, gen(oldest), gen(newest))
	for _, want := range []string{"+ terraform_data.b[2]", "~ terraform_data.a", "~ terraform_data.b[0]", "~ output v", "1 added, 0 removed, 3 changed"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff lacks %q", want)
		}
	}
	if strings.Contains(out, "secret") || strings.Contains(out, "token") {
		t.Errorf("diff names an unchanged resource or output")
	}
	var op api.StateOperation
	if js, _ := runOut(outpostcli.ExitOK, "state", "diff", "states", key, gen(oldest), gen(newest), "-o", "json"); json.Unmarshal([]byte(js), &op) != nil ||
		op.Diff == nil || op.Diff.FromSerial != 6 || op.Diff.ToSerial != 15 || op.RequestedBy != "token oncall ("+token.ID+")" {
		t.Errorf("diff -o json: %s", js)
	}

	// A locked state: the rollback fails and names the holder.
	lock := statestore.LockInfo{ID: "run-lock", Holder: "job/dep-9/1", Pod: "outpost-dep-9-1-abcde", Operation: "OperationTypeApply"}
	must(t, e.store.Lock(ctx, key, lock))
	out = run(outpostcli.ExitFailed, "state", "rollback", "states", key, gen(oldest), "--reason", "v=15 broke it")
	if !strings.Contains(out, "locked") || !strings.Contains(out, "deployment dep-9 attempt 1 (pod outpost-dep-9-1-abcde)") {
		t.Errorf("rollback of a locked state does not name the holder")
	}
	must(t, e.store.Unlock(ctx, key, lock.ID, lock.Holder))

	out = run(outpostcli.ExitOK, "state", "rollback", "states", key, gen(oldest), "--reason", "v=15 broke it")
	if !strings.Contains(out, "written as generation "+gen(newest+1)+", serial 16") {
		t.Errorf("rollback did not write the next generation and serial")
	}
	waitReported(t, admin, key, 16)
	out = run(outpostcli.ExitOK, "state", "versions", "states", key)
	for _, want := range []string{"rollback to generation " + gen(oldest) + " by token oncall", "Rollbacks", "token oncall (" + token.ID + ")", "v=15 broke it", "done (wrote generation " + gen(newest+1) + ")", "failed (locked)"} {
		if !strings.Contains(out, want) {
			t.Errorf("versions lacks %q", want)
		}
	}

	// The next plan starts from the rolled-back state: nothing to change with v=6, changes with v=15.
	if out, err := w.run("plan", "-detailed-exitcode", "-input=false", "-var", "v=6", "-var", "marker_file="+markerFile); err != nil {
		t.Errorf("plan with v=6 after the rollback to v=6: %v (exit 2 = changes)\n%s", err, out)
	}
	if out, err := w.run("plan", "-detailed-exitcode", "-input=false", "-var", "v=15", "-var", "marker_file="+markerFile); err == nil {
		t.Errorf("plan with v=15 finds nothing to change after the rollback:\n%s", out)
	}

	// The contents never reached the orchestrator.
	state, _, err := e.store.Read(ctx, key)
	must(t, err)
	for _, m := range []string{"attr-6-" + marker, "secret-" + marker} {
		if !bytes.Contains(state, []byte(m)) {
			t.Fatalf("the state in the cluster lacks %q: the check below would prove nothing", m)
		}
	}
	bodies := wire.all()
	var opResults int
	for _, body := range bodies {
		if strings.Contains(body, marker) {
			t.Errorf("a request to the orchestrator holds state contents: %s", body)
		}
		if strings.HasPrefix(body, "POST /api/v1/agent/state-operations/") {
			opResults++
		}
	}
	if opResults < 5 {
		t.Errorf("%d state operation results went through the recording proxy, want at least 5 (show, 3 diffs, 2 rollbacks)", opResults)
	}
	checkDataDirLacks(t, o, marker)
}
