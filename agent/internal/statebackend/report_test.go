package statebackend

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// wireRecorder keeps every request body the agent's client sends, byte for byte as it leaves.
type wireRecorder struct {
	mu     sync.Mutex
	bodies [][]byte
	next   http.RoundTripper
}

func (w *wireRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		_ = r.Body.Close()
		w.mu.Lock()
		w.bodies = append(w.bodies, b)
		w.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	return w.next.RoundTrip(r)
}

func (w *wireRecorder) all() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slicesClone(w.bodies)
}

func slicesClone(in [][]byte) [][]byte { return append([][]byte(nil), in...) }

// reportingEnv is an env whose handler reports to a real orchestrator through a recording
// client: a kubernetes state storage over the env's namespace and a runner whose key signs.
func reportingEnv(t *testing.T, sopts statestore.Options) (*env, *wireRecorder, *client.AdminClient, *orchestratortest.Instance) {
	t.Helper()
	e, rec, admin, o, _ := reportingEnvVia(t, sopts, func(o *orchestratortest.Instance) string { return o.URL })
	return e, rec, admin, o
}

// reportingEnvVia is reportingEnv whose clients reach the orchestrator at the URL front gives
// (a recording proxy in front of it); it also returns the agent's client.
func reportingEnvVia(t *testing.T, sopts statestore.Options, front func(*orchestratortest.Instance) string) (*env, *wireRecorder, *client.AdminClient, *orchestratortest.Instance, *client.AgentClient) {
	t.Helper()
	o := orchestratortest.Start(t)
	apiURL := front(o)
	admin, err := client.NewAdminClient(apiURL, testOrg, o.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, _ := keys.Generate()
	pubPEM, _ := keys.EncodePublicPEM(pub)
	rec := &wireRecorder{next: http.DefaultTransport}
	agent, err := client.NewAgentClient(apiURL, agentauth.NewSigner(testOrg, "r1", priv), client.WithHTTPClient(&http.Client{Transport: rec}))
	if err != nil {
		t.Fatal(err)
	}
	// The namespace is known once the env exists; the storage is registered before the first
	// report can arrive, since the reporter retries until the orchestrator takes it.
	e := newEnv(t, sopts, WithReporter(agent))
	ctx := context.Background()
	if _, err := admin.CreateStateStorage(ctx, api.StateStorageInput{ID: "states", Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: e.ns}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateRunner(ctx, api.RunnerInput{ID: "r1", PublicKeys: []string{pubPEM}, StateStorageID: "states",
		Job: api.RunnerJob{Namespace: "outpost-jobs", ServiceAccount: "outpost-job"}}); err != nil {
		t.Fatal(err)
	}
	return e, rec, admin, o, agent
}

// waitReported polls the orchestrator until key's newest reported version has serial.
func waitReported(t *testing.T, admin *client.AdminClient, key string, serial int64) *api.State {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := admin.GetState(context.Background(), "states", key)
		if err == nil && len(st.Versions) > 0 && st.Versions[0].Serial == serial {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %s: serial %d not reported within 30s (last: %+v, %v)", key, serial, st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestReportsCarryNoStateContents runs Terraform against the handler with a resource attribute,
// an output and a sensitive variable that each hold a marker, and checks that the orchestrator
// learns each write's metadata (serial, resource count, writer, lock holder while the run holds
// it) while neither a request body the agent sent nor a file of the orchestrator's data
// directory holds any marker, though the state in the cluster does.
func TestReportsCarryNoStateContents(t *testing.T) {
	forEachCLI(t, func(t *testing.T, c cli) { testReportsCarryNoStateContents(t, c) })
}

func testReportsCarryNoStateContents(t *testing.T, c cli) {
	e, rec, admin, o := reportingEnv(t, statestore.Options{})
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	marker := hex.EncodeToString(b)
	attr, output, secret := "attr-"+marker, "output-"+marker, "secret-"+marker
	mainTF := fmt.Sprintf(`
variable "password" {
  type      = string
  sensitive = true
  default   = %q
}
resource "terraform_data" "a" {
  input = %q
}
resource "terraform_data" "b" {
  input = var.password
}
output "o" {
  value = %q
}
`, secret, attr, output)
	w := e.newWorkdir(t, c, "team/app", "dep-1", mainTF)
	if out, err := w.run("apply", "-auto-approve", "-input=false"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	st := waitReported(t, admin, "team/app", 1)
	v := st.Versions[0]
	if v.Resources != 2 || v.DeploymentID != "dep-1" || v.Attempt != 1 || v.Size == 0 || v.Lineage == "" || st.Lock != nil {
		t.Errorf("reported %+v, lock %+v; want 2 resources written by dep-1 attempt 1, unlocked", v, st.Lock)
	}
	if _, err := w.run("apply", "-auto-approve", "-input=false", "-replace=terraform_data.a"); err != nil {
		t.Fatal(err)
	}
	if st = waitReported(t, admin, "team/app", 2); len(st.Versions) != 2 {
		t.Errorf("%d versions reported after two writes, want 2", len(st.Versions))
	}

	state, _, err := e.store.Read(context.Background(), "team/app")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{attr, output, secret} {
		if !bytes.Contains(state, []byte(m)) {
			t.Fatalf("the state in the cluster lacks %q: the check below would prove nothing", m)
		}
	}
	bodies := rec.all()
	if len(bodies) == 0 {
		t.Fatal("the agent's client sent nothing")
	}
	for _, body := range bodies {
		if bytes.Contains(body, []byte(marker)) {
			t.Errorf("a request to the orchestrator holds state contents: %s", body)
		}
	}
	checkDataDirLacks(t, o, marker)
}

// checkDataDirLacks fails the test for every file of the orchestrator's data directory that
// holds marker.
func checkDataDirLacks(t *testing.T, o *orchestratortest.Instance, marker string) {
	t.Helper()
	if err := filepath.WalkDir(o.DataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err == nil && bytes.Contains(data, []byte(marker)) {
			t.Errorf("the orchestrator's %s holds state contents", path)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestReportShowsTheLockHolder: while a CLI run holds the lock, the orchestrator shows its
// holder (deployment and attempt); once it unlocks, no lock.
func TestReportShowsTheLockHolder(t *testing.T) {
	forEachCLI(t, func(t *testing.T, c cli) { testReportShowsTheLockHolder(t, c) })
}

func testReportShowsTheLockHolder(t *testing.T, c cli) {
	e, _, admin, _ := reportingEnv(t, statestore.Options{})
	w := e.newWorkdir(t, c, "team/lock", "dep-7", `
resource "terraform_data" "wait" {
  provisioner "local-exec" {
    command = "sleep 3"
  }
}
`)
	run := w.start("apply", "-auto-approve", "-input=false")
	e.waitLocked(t, "team/lock", 30*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := admin.GetState(context.Background(), "states", "team/lock")
		if err == nil && st.Lock != nil {
			if st.Lock.DeploymentID != "dep-7" || st.Lock.Attempt != 1 || st.Lock.Holder != "job/dep-7/1" || st.Lock.Operation != "OperationTypeApply" {
				t.Errorf("lock reported as %+v", st.Lock)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock was not reported within 20s: %+v, %v", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := run.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("apply: %v\n%s", err, run.out.String())
	}
	st := waitReported(t, admin, "team/lock", 1)
	for deadline := time.Now().Add(10 * time.Second); st.Lock != nil && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		st, _ = admin.GetState(context.Background(), "states", "team/lock")
	}
	if st.Lock != nil {
		t.Errorf("still reported locked after the run unlocked: %+v", st.Lock)
	}
}
