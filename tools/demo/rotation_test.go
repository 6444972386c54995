package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// slowApply is the deployment queued during a rotation: an apply whose resource takes a few
// seconds (so attempts claimed before the rotation write their state after it, with the state
// credential made under the old key), or the plan of the same.
var slowApply = map[string]string{"main.tf": `
variable "n" {
  type = string
}

resource "terraform_data" "slow" {
  input = var.n

  provisioner "local-exec" {
    command = "sleep 3"
  }
}
`}

// podsEnv reaches what a demo on pods started: its orchestrator (at the test bed's host address)
// and its cluster.
type podsEnv struct {
	c      Config
	tc     *testbed.Cluster
	apiURL string
	token  string
	admin  *client.AdminClient
	kube   kubernetes.Interface
}

func attachPods(ctx context.Context, t *testing.T, c Config) *podsEnv {
	t.Helper()
	st, err := testbed.StatusDir(c.testbedDir())
	if err != nil || st == nil {
		t.Fatalf("the demo's test bed: %v", err)
	}
	tc, err := testbed.Reuse(ctx, st.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(filepath.Join(c.Dir, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(c.OrchestratorAddr)
	e := &podsEnv{c: c, tc: tc, apiURL: "http://" + net.JoinHostPort(tc.HostIP, port), token: string(token)}
	if e.admin, err = client.NewAdminClient(e.apiURL, c.Org, e.token, client.AllowInsecureHTTP()); err != nil {
		t.Fatal(err)
	}
	if e.kube, err = kubeClient(tc.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	return e
}

// rotation is what one key rotation under load measured.
type rotation struct {
	applied, moved time.Duration // from the apply's start
	deployments    int
	failedPolls    int
	// keyChanges counts the agents' "key changed" log lines: each replica saw the new key.
	keyChanges int
}

// rotateUnderLoad queues a deployment on runnerID every second, runs apply (which rotates the
// runner's key) in the middle of it, and checks what one apply must leave: every deployment
// succeeded, the agent pods were never restarted and never failed a poll, the runner now sees
// the agent sign with the new key, the replaced key retired, and the old private key (the
// Secret's previous-private-key.pem) is refused.
func (e *podsEnv) rotateUnderLoad(t *testing.T, runnerID, agentNS, keySecret string, apply func() error) rotation {
	t.Helper()
	ctx := t.Context()
	var r rotation
	before, err := e.admin.GetRunner(ctx, runnerID)
	if err != nil {
		t.Fatal(err)
	}
	podsBefore := e.agentPods(t, agentNS)

	var mu sync.Mutex
	var queued []string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; ; n++ {
			op := api.OperationApply
			if n%2 == 1 {
				op = api.OperationPlan
			}
			vars := map[string]json.RawMessage{"n": json.RawMessage(fmt.Sprintf(`"%d"`, n))}
			d, err := e.admin.CreateDeployment(context.Background(), api.DeploymentInput{RunnerID: runnerID, Operation: op, Variables: vars,
				Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, slowApply)}}, StateKey: fmt.Sprintf("rotation/%d", n/2)})
			if err != nil {
				t.Errorf("queue deployment %d: %v", n, err)
			} else {
				mu.Lock()
				queued = append(queued, d.ID)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	time.Sleep(4 * time.Second) // attempts in flight before the rotation
	rotStart := time.Now()
	if err := apply(); err != nil {
		close(stop)
		<-done
		t.Fatalf("the rotating apply: %v", err)
	}
	r.applied = time.Since(rotStart)
	deadline := time.Now().Add(2 * time.Minute)
	var after *api.Runner
	for {
		if after, err = e.admin.GetRunner(ctx, runnerID); err != nil {
			t.Fatal(err)
		}
		if after.Status.KeyFingerprint != before.Status.KeyFingerprint && len(after.RetiringKeys) == 0 {
			break
		}
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("the agent did not move onto the new key within 2 min of the apply: signing with %s (was %s), retiring %v",
				after.Status.KeyFingerprint, before.Status.KeyFingerprint, after.RetiringKeys)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.moved = time.Since(rotStart)
	time.Sleep(4 * time.Second) // attempts claimed after the rotation too
	close(stop)
	<-done

	// Every deployment queued across the rotation succeeds.
	mu.Lock()
	ids := append([]string(nil), queued...)
	mu.Unlock()
	r.deployments = len(ids)
	for _, id := range ids {
		var d *api.Deployment
		for wait := time.Now().Add(5 * time.Minute); ; {
			if d, err = e.admin.GetDeployment(ctx, id); err != nil {
				t.Fatal(err)
			}
			if d.Status.Terminal() || time.Now().After(wait) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if d.Status != api.StatusSucceeded {
			chunk, _ := e.admin.GetLogs(ctx, id, 0, 1<<20)
			t.Errorf("deployment %s (%s) queued across the rotation: %s (%s: %s)\n%s", id, d.Operation, d.Status, d.Reason, d.Message, chunk.Data)
		}
	}

	// No agent pod restarted, and none failed a poll.
	podsAfter := e.agentPods(t, agentNS)
	for name, restarts := range podsBefore {
		if got, ok := podsAfter[name]; !ok || got != restarts {
			t.Errorf("agent pod %s: restarts %d → %d (present after: %v); a rotation must not restart the agent", name, restarts, got, ok)
		}
	}
	r.failedPolls, r.keyChanges = e.pollFailures(t, agentNS, rotStart)

	// The key it replaced is refused now.
	sec, err := e.kube.CoreV1().Secrets(agentNS).Get(ctx, keySecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old, err := keys.ParsePrivatePEM(sec.Data[keys.SecretKeyPrevious])
	if err != nil {
		t.Fatalf("the rotated Secret's %s: %v", keys.SecretKeyPrevious, err)
	}
	if fp := agentauth.NewSigner(e.c.Org, runnerID, old).Fingerprint(); fp != before.Status.KeyFingerprint {
		t.Errorf("the Secret's previous key is %s, want the key the agent signed with before, %s", fp, before.Status.KeyFingerprint)
	}
	stale, err := client.NewAgentClient(e.apiURL, agentauth.NewSigner(e.c.Org, runnerID, old), client.AllowInsecureHTTP(),
		client.WithRetryPolicy(client.RetryPolicy{MaxTries: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Poll(ctx, api.PollRequest{AgentVersion: "test", Instance: "stale", WaitSeconds: 0}); !errors.Is(err, api.ErrUnknownKey) {
		t.Errorf("a poll signed with the replaced key after the rotation: %v, want refused as unknown_key", err)
	}
	if r.failedPolls != 0 {
		t.Errorf("the agent failed %d polls during the rotation; want 0", r.failedPolls)
	}
	return r
}

// agentPods maps the agent pods of a namespace to their restart counts.
func (e *podsEnv) agentPods(t *testing.T, ns string) map[string]int32 {
	t.Helper()
	pods, err := e.kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, p := range pods.Items {
		var n int32
		for _, s := range p.Status.ContainerStatuses {
			n += s.RestartCount
		}
		out[p.Name] = n
	}
	if len(out) == 0 {
		t.Fatalf("no agent pods in %s", ns)
	}
	return out
}

// pollFailures counts, in the agent pods' logs since from, the polls that failed (the session's
// "poll failed" and "refuses this agent's key" lines), and the replicas' notes that their key
// changed.
func (e *podsEnv) pollFailures(t *testing.T, ns string, from time.Time) (failed, keyChanges int) {
	t.Helper()
	since := metav1.NewTime(from.Add(-time.Second))
	for name := range e.agentPods(t, ns) {
		b, err := e.kube.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{SinceTime: &since}).DoRaw(t.Context())
		if err != nil {
			t.Fatalf("logs of %s/%s: %v", ns, name, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line struct {
				Msg string `json:"msg"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			switch {
			case strings.HasPrefix(line.Msg, "poll failed"), strings.Contains(line.Msg, "refuses this agent's key"):
				failed++
				t.Logf("%s: %s", name, sc.Text())
			case strings.Contains(line.Msg, "key changed"):
				keyChanges++
			}
		}
	}
	return failed, keyChanges
}

// testKeyRotationOnPods rotates the runner's key with one apply, twice, on the demo's real pods
// while deployments are queued every second: through the provider (the quickstart's
// outpost_key_pair keepers) and through the installer module (key_rotation), which it installs
// beside the quickstart.
func testKeyRotationOnPods(t *testing.T, c Config) {
	ctx := t.Context()
	c.Defaults() // as Up did to its copy
	e := attachPods(ctx, t, c)
	cli, err := c.cliPath()
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	t.Run("provider keepers", func(t *testing.T) {
		r := e.rotateUnderLoad(t, c.RunnerID, "outpost-system", c.RunnerID+"-key", func() error {
			qc := c
			qc.Out = &log
			qc.quickstartVars = map[string]string{"key_rotation": "2"}
			_, err := applyQuickstart(ctx, &qc, &stepper{out: &log}, cli, e.tc.Kubeconfig, e.apiURL, e.token, e.tc.Registry)
			if err != nil {
				return fmt.Errorf("%w\n%s", err, log.String())
			}
			return nil
		})
		t.Logf("rotation through outpost_key_pair.keepers: apply %s, agent on the new key %s after the apply began; %d deployments queued across it, all succeeded; failed polls %d (goal 0); %d agent replicas saw the key change",
			r.applied.Round(10*time.Millisecond), r.moved.Round(10*time.Millisecond), r.deployments, r.failedPolls, r.keyChanges)
	})
	t.Run("module key_rotation", func(t *testing.T) {
		const runnerID, ns = "rotation-module", "outpost-rotation"
		dir := t.TempDir()
		rel, err := filepath.Rel(dir, filepath.Join(c.Repo, "modules", "kubernetes-agent-runner"))
		if err != nil {
			t.Fatal(err)
		}
		main := fmt.Sprintf(`
terraform {
  required_providers {
    outpost = { source = "outpost-dev/outpost" }
  }
}

provider "outpost" {}

variable "key_rotation" {
  type = string
}

variable "image_registry" {
  type = string
}

variable "image_pull_secret_docker_config_json" {
  type      = string
  sensitive = true
}

module "runner" {
  source          = %q
  runner_id       = %q
  agent_namespace = %q
  job_namespace   = "%[3]s-jobs"
  state_namespace = "%[3]s-state"
  max_concurrency = 4
  key_rotation    = var.key_rotation
  agent_values    = "insecureAllowHttp: true"

  # The images come from the test bed's registry, as the quickstart's do.
  image_registry                       = var.image_registry
  image_pull_secret_name               = "registry-login"
  image_pull_secret_docker_config_json = var.image_pull_secret_docker_config_json
}
`, rel, runnerID, ns)
		if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(main), 0o644); err != nil {
			t.Fatal(err)
		}
		rc, err := writeCLIConfig(&c)
		if err != nil {
			t.Fatal(err)
		}
		apply := func(rotation string) error {
			cmd := exec.CommandContext(ctx, cli, "apply", "-auto-approve", "-input=false", "-no-color")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "OUTPOST_API_URL="+e.apiURL, "OUTPOST_ORG_ID="+c.Org,
				"OUTPOST_TOKEN="+e.token, "KUBE_CONFIG_PATH="+e.tc.Kubeconfig, insecureHTTPEnv+"=true", "TF_VAR_key_rotation="+rotation,
				"TF_VAR_image_registry="+e.tc.Registry.Host,
				"TF_VAR_image_pull_secret_docker_config_json="+string(e.tc.Registry.DockerConfigJSON(e.tc.Registry.Username, e.tc.Registry.Password)))
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s apply: %w\n%s", c.CLI, err, out)
			}
			return nil
		}
		init := exec.CommandContext(ctx, cli, "get", "-no-color") // the modules; the provider comes from the dev override
		init.Dir = dir
		init.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1")
		if out, err := init.CombinedOutput(); err != nil {
			t.Fatalf("%s get: %v\n%s", c.CLI, err, out)
		}
		if err := apply("1"); err != nil {
			t.Fatal(err)
		}
		r := e.rotateUnderLoad(t, runnerID, ns, runnerID+"-key", func() error { return apply("2") })
		t.Logf("rotation through the module's key_rotation: apply %s, agent on the new key %s after the apply began; %d deployments queued across it, all succeeded; failed polls %d (goal 0); %d agent replicas saw the key change",
			r.applied.Round(10*time.Millisecond), r.moved.Round(10*time.Millisecond), r.deployments, r.failedPolls, r.keyChanges)
	})
}
