package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

func TestMain(m *testing.M) {
	testbed.Main(m, testbed.Options{Jobs: true})
}

var (
	buildOnce sync.Once
	agentBin  string
	buildErr  error
)

// agentBinary builds outpost-agent once per test binary, into the user's cache (one stable
// path per source tree, replaced atomically, so runs neither leak binaries nor disturb each
// other, even from two checkouts at once).
func agentBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			buildErr = err
			return
		}
		wd, err := os.Getwd()
		if err != nil {
			buildErr = err
			return
		}
		sum := sha256.Sum256([]byte(wd))
		dir := filepath.Join(cache, "outpost", "e2e", hex.EncodeToString(sum[:6]))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		agentBin = filepath.Join(dir, "outpost-agent")
		tmp := fmt.Sprintf("%s.%d", agentBin, os.Getpid())
		args := []string{"build", "-o", tmp}
		if os.Getenv("OUTPOST_E2E_RACE") != "" { // run the agent under the race detector
			args = append(args, "-race")
		}
		args = append(args, "github.com/outpost-dev/terraform-provider-outpost/agent")
		out, err := exec.CommandContext(context.Background(), "go", args...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		buildErr = os.Rename(tmp, agentBin)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return agentBin
}

// env is one test's world: an orchestrator, a runner registered with it, and a job namespace.
type env struct {
	t        testing.TB
	cluster  *testbed.Cluster
	orch     *orchestratortest.Instance
	admin    *client.AdminClient
	ns       string
	runnerID string
	keyFile  string
	apiURL   string
	// agentEnv is added to the agents' environment.
	agentEnv []string
	// binary, when set, is the agent binary startAgent runs (another build's).
	binary string
}

// testOrg is the organisation of every test's runner.
const testOrg = "acme"

// newEnv registers a runner whose Jobs use podTemplate (JSON; empty for the default), with an
// orchestrator started with orchOpts.
func newEnv(t testing.TB, podTemplate string, maxConcurrency int, orchOpts ...orchestratortest.Option) *env {
	t.Helper()
	return newEnvWithPod(t, podTemplate, nil, maxConcurrency, orchOpts...)
}

// newEnvWithPod is newEnv with job pod settings on the runner.
func newEnvWithPod(t testing.TB, podTemplate string, pod *api.JobPod, maxConcurrency int, orchOpts ...orchestratortest.Option) *env {
	t.Helper()
	orch := orchestratortest.Start(t, orchOpts...)
	admin, err := client.NewAdminClient(orch.URL, testOrg, orch.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, orch.URL, admin, podTemplate, pod, maxConcurrency)
	e.orch = orch
	return e
}

// newEnvOn registers the runner with the orchestrator at apiURL (e.orch stays nil).
func newEnvOn(t testing.TB, apiURL string, admin *client.AdminClient, podTemplate string, pod *api.JobPod, maxConcurrency int) *env {
	t.Helper()
	c := testbed.Shared(t)
	e := &env{t: t, cluster: c, admin: admin, apiURL: apiURL, ns: testbed.NewNamespace(t, c), runnerID: "r1"}
	ctx := t.Context()
	// Job pods are admitted as in a namespace the provider created: Pod Security "restricted".
	if _, err := c.Client().CoreV1().Namespaces().Patch(ctx, e.ns, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: e.ns}}
	if _, err := c.Client().CoreV1().ServiceAccounts(e.ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pub, priv, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, _ := keys.EncodePublicPEM(pub)
	privPEM, _ := keys.EncodePrivatePEM(priv)
	e.keyFile = filepath.Join(t.TempDir(), "private-key.pem")
	if err := os.WriteFile(e.keyFile, []byte(privPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.CreateStateStorage(ctx, api.StateStorageInput{ID: "k8s", Type: api.StateStorageKubernetes,
		Kubernetes: &api.KubernetesStateSpec{Namespace: e.ns}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.CreateRunner(ctx, api.RunnerInput{ID: e.runnerID, PublicKeys: []string{pubPEM}, StateStorageID: "k8s",
		MaxConcurrency: maxConcurrency, JobTimeoutSeconds: 600,
		Job: api.RunnerJob{Namespace: e.ns, ServiceAccount: "deployer", PodTemplate: podTemplate, Pod: pod}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// agent is a running outpost-agent process.
type agent struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startAgent runs the agent binary against the env; extra flags override the defaults.
func (e *env) startAgent(name string, extra ...string) *agent {
	e.t.Helper()
	// OUTPOST_E2E_LOG_DIR keeps the agents' logs after the run, for debugging.
	logDir := os.Getenv("OUTPOST_E2E_LOG_DIR")
	if logDir == "" {
		logDir = e.t.TempDir()
	}
	logPath := filepath.Join(logDir, strings.ReplaceAll(e.t.Name(), "/", "_")+"-"+name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		e.t.Fatal(err)
	}
	args := append([]string{
		"--api-url", e.apiURL, "--org-id", testOrg, "--runner-id", e.runnerID, "--private-key-file", e.keyFile,
		"--kubeconfig", e.cluster.Kubeconfig, "--job-image", "outpost/job:e2e", "--agent-image", "outpost/agent:e2e", "--job-namespace", e.ns,
		"--namespace", e.ns, "--pod-name", name, "--health-listen", "127.0.0.1:0", "--state-listen", "127.0.0.1:0",
		"--poll-wait", "5s", "--log-level", "debug",
	}, extra...)
	bin := e.binary
	if bin == "" {
		bin = agentBinary(e.t)
	}
	cmd := exec.CommandContext(context.Background(), bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), e.agentEnv...)
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	a := &agent{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(a.done) }()
	e.t.Cleanup(func() {
		a.signal(syscall.SIGKILL)
		<-a.done
		if e.t.Failed() {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(string(b), "\n")
			e.t.Logf("last lines of %s's log:\n%s", name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	return a
}

func (a *agent) signal(s syscall.Signal) { _ = a.cmd.Process.Signal(s) }

// kill sends SIGKILL and waits for the process to be gone.
func (a *agent) kill() {
	a.signal(syscall.SIGKILL)
	<-a.done
}

// logCount counts log lines containing s.
func (a *agent) logCount(s string) int {
	b, _ := os.ReadFile(a.log)
	return strings.Count(string(b), s)
}

// logValue returns the value of the last JSON log field key in the agent's log ("" if none).
func (a *agent) logValue(key string) string {
	b, _ := os.ReadFile(a.log)
	s := string(b)
	i := strings.LastIndex(s, `"`+key+`":"`)
	if i < 0 {
		return ""
	}
	v, _, _ := strings.Cut(s[i+len(key)+4:], `"`)
	return v
}

// deploy enqueues n plan deployments and returns their ids.
func (e *env) deploy(n int) []string {
	e.t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		d, err := e.admin.CreateDeployment(e.t.Context(), api.DeploymentInput{RunnerID: e.runnerID, Operation: api.OperationPlan,
			Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive(e.t)}}, StateKey: fmt.Sprintf("state-%d", i)})
		if err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	return ids
}

// waitTerminal waits until every deployment is terminal and returns them by id.
func (e *env) waitTerminal(ids []string, timeout time.Duration) map[string]*api.Deployment {
	e.t.Helper()
	out := map[string]*api.Deployment{}
	testbed.WaitFor(e.t, timeout, fmt.Sprintf("%d deployments to finish", len(ids)), func() (bool, string) {
		pending := 0
		var sample string
		for _, id := range ids {
			if d := out[id]; d != nil && d.Status.Terminal() {
				continue
			}
			d, err := e.admin.GetDeployment(context.Background(), id)
			if err != nil {
				return false, err.Error()
			}
			out[id] = d
			if !d.Status.Terminal() {
				pending++
				sample = id + " is " + string(d.Status)
			}
		}
		return pending == 0, fmt.Sprintf("%d not finished (%s)", pending, sample)
	})
	return out
}

// jobs lists the agent's live Jobs in the env's namespace: those not (yet) in the history.
func (e *env) jobs() []batchv1.Job {
	return e.listJobs("!" + kubeexec.LabelHistory)
}

// history lists the Jobs the agent keeps in its history with the given outcome.
func (e *env) history(outcome string) []batchv1.Job {
	return e.listJobs(kubeexec.LabelHistory + "=" + outcome)
}

func (e *env) listJobs(selector string) []batchv1.Job {
	l, err := e.cluster.Client().BatchV1().Jobs(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: kubeexec.LabelManagedBy + "=" + kubeexec.ManagedByValue + "," + selector})
	if err != nil {
		e.t.Fatal(err)
	}
	return l.Items
}

// finishedEvents counts finished events per deployment.
func (e *env) finishedEvents(id string) (int, []api.Event) {
	evs, err := e.admin.ListEvents(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Type == api.EventFinished {
			n++
		}
	}
	return n, evs
}

var (
	archiveOnce sync.Once
	archiveData []byte
)

// archive is a tiny configuration; kwok never runs it, but the orchestrator wants a real tar.gz.
func archive(t testing.TB) []byte {
	archiveOnce.Do(func() {
		archiveData = orchestratortest.TarGz(t, map[string]string{"main.tf": "output \"hello\" { value = \"world\" }\n"})
	})
	return archiveData
}

// mustStore is statestore.New for tests: a configuration error panics.
func mustStore(s *statestore.Store, err error) *statestore.Store {
	if err != nil {
		panic(err)
	}
	return s
}
