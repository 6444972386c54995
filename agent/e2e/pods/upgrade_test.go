package pods

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/release/releasetest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
	"github.com/outpost-dev/terraform-provider-outpost/tools/image/recipe"
	"github.com/outpost-dev/terraform-provider-outpost/tools/ocitest"
	"github.com/outpost-dev/terraform-provider-outpost/tools/release"
)

// longApply holds its job pod for a while, so it runs across an upgrade; its state is written
// at the end, through whichever agent serves the state backend by then.
var longApply = map[string]string{"main.tf": `
variable "n" {
  type = string
}

resource "terraform_data" "slow" {
  input = var.n

  provisioner "local-exec" {
    command = "sleep 20"
  }
}
`}

// TestHelmUpgradeWithWorkInFlight installs the previous build's chart and images (PREVIOUS_COMMIT
// in scripts/versions.env, built from the repository's history), queues applies that run for a
// while and plans, and upgrades the release to this tree's chart from an OCI registry with the
// helm CLI while they run, as a user moves to a new release. Every deployment must end succeeded in its first
// attempt, with one started and one finished event and its whole log; deployments queued during
// the upgrade measure how long the runner was without a polling agent.
func TestHelmUpgradeWithWorkInFlight(t *testing.T) {
	t.Parallel()
	prev := releasetest.PreviousForTest(t, "../../..")
	prevChart, err := loader.Load(prev.ChartDir())
	if err != nil {
		t.Fatal(err)
	}
	// A startup timeout for a loaded node: every deployment's pod starts at once here, beside
	// the two agents of each version during the rollout, and a pod waits for the token Secret
	// its agent writes after the Job.
	const values = "jobs: {startupTimeout: 3m}"
	e := newEnv(t, envOptions{chart: prevChart, version: prev.Version, replicas: 2, values: values, before: func(e *env) { e.pushPrevious(prev) }})
	ctx := t.Context()
	// Room for every deployment at once, so a deployment queued during the upgrade waits for an
	// agent to poll, not for a free slot,
	r, err := e.admin.GetRunner(ctx, runnerID)
	if err != nil {
		t.Fatal(err)
	}
	// and small requests, so the node's two CPUs schedule them all.
	job := r.Job
	job.Pod = &api.JobPod{Resources: &api.JobResources{Requests: map[string]string{"cpu": "10m", "memory": "64Mi"}, Limits: map[string]string{"memory": "512Mi"}}}
	if _, err := e.admin.UpdateRunner(ctx, api.RunnerInput{ID: runnerID, PublicKeys: r.PublicKeys, StateStorageID: r.StateStorageID, Job: job,
		MaxConcurrency: 40, JobTimeoutSeconds: r.JobTimeoutSeconds}); err != nil {
		t.Fatal(err)
	}

	var ids []string
	for n := range 6 {
		ids = append(ids, e.enqueueVars(api.OperationApply, longApply, fmt.Sprintf("upgrade-%d", n), n).ID)
		ids = append(ids, e.enqueueVars(api.OperationPlan, greeting, fmt.Sprintf("upgrade-plan-%d", n), -1).ID)
	}
	testbed.WaitFor(t, 3*time.Minute, "deployments running on the previous agent", func() (bool, string) {
		running := 0
		for _, id := range ids {
			if d, err := e.admin.GetDeployment(ctx, id); err == nil && d.Status == api.StatusRunning {
				running++
			}
		}
		return running >= 3, fmt.Sprintf("%d running", running)
	})

	// Deployments queued every 2 s across the upgrade: their wait for a claim is how long the
	// runner had no agent polling.
	var mu sync.Mutex
	var probes []string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; ; n++ {
			d, err := e.admin.CreateDeployment(context.Background(), api.DeploymentInput{RunnerID: runnerID, Operation: api.OperationPlan,
				Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archiveOf(t, greeting)}}, StateKey: fmt.Sprintf("probe-%d", n)})
			if err == nil {
				mu.Lock()
				probes = append(probes, d.ID)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Second):
			}
		}
	}()

	// The previous agent's Jobs reach the state backend at http://…:8080; they keep that URL
	// across the upgrade and write their state at the end through this tree's agent, which
	// serves plain HTTP there for them this release (state.tls.plainHTTP).
	inFlight := e.jobStateURLs()
	for id, u := range inFlight {
		if !strings.HasPrefix(u, "http://") || !strings.HasSuffix(u, ":8080") {
			t.Errorf("the previous agent's Job of %s has state URL %q, want its plain http://…:8080", id, u)
		}
	}
	if len(inFlight) == 0 {
		t.Error("no Job of the previous agent runs across the upgrade")
	}

	start := time.Now()
	helmUpgradeFromOCI(t, e, e.values(envOptions{replicas: 2, values: values}))
	e.waitAgentsOn(e.agentImage, 2)
	e.waitConnected(imagesVersion)
	took := time.Since(start)
	time.Sleep(3 * time.Second)
	close(stop)
	<-done
	// A Job this tree's agent creates reaches the state backend over TLS.
	late := e.enqueueVars(api.OperationApply, longApply, "upgrade-late", 99).ID
	ids = append(ids, late)
	testbed.WaitFor(t, 2*time.Minute, "the Job of "+late, func() (bool, string) {
		u, ok := e.jobStateURLs()[late]
		if ok && !strings.HasPrefix(u, "https://") {
			t.Fatalf("this tree's agent gave the Job of %s the state URL %q, want https://", late, u)
		}
		return ok, "no Job yet"
	})

	e.checkEachRanOnce(append(ids, probes...))
	var longest time.Duration
	for _, id := range probes {
		d, err := e.admin.GetDeployment(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.ClaimedAt != nil {
			longest = max(longest, d.ClaimedAt.Sub(d.CreatedAt))
		}
	}
	t.Logf("helm upgrade %s → %s with %d deployments in flight (%d more queued during it): the new agent pods led %s after the upgrade began; "+
		"the longest wait from enqueue to claim during the upgrade was %s", prev.Version, imagesVersion, len(ids), len(probes), took.Round(100*time.Millisecond), longest.Round(10*time.Millisecond))
}

// helmUpgradeFromOCI upgrades the env's release to this tree's chart the way a user upgrades
// from the registry the release publishes it to: the chart package (the release build's, or the
// embedded chart packaged here) pushed to an OCI registry on loopback, then `helm upgrade
// oci://…` with the helm CLI and vals as a values file.
func helmUpgradeFromOCI(t *testing.T, e *env, vals map[string]any) {
	t.Helper()
	bin := helmPath(t)
	if bin == "" {
		t.Fatalf("%s is not set: build the helm CLI with scripts/tools.sh helm and export it (make test does)", releasetest.HelmEnv)
	}
	tgz := dist.Chart()
	if dist.Dir == "" {
		chrt, err := loadChart()
		if err != nil {
			t.Fatal(err)
		}
		if tgz, err = chartutil.Save(chrt, t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	reg := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	var pushLog bytes.Buffer
	pushed, err := release.PushChart(tgz, "oci://"+host+"/charts", release.Credentials{}, true, &pushLog)
	if err != nil {
		t.Fatalf("pushing the chart: %v\n%s", err, pushLog.String())
	}
	values := filepath.Join(t.TempDir(), "values.yaml")
	b, err := yaml.Marshal(vals)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(values, b, 0o600); err != nil {
		t.Fatal(err)
	}
	version := pushed.Ref[strings.LastIndex(pushed.Ref, ":")+1:]
	cmd := releasetest.HelmCommand(t.Context(), bin, t.TempDir(), e.c.Kubeconfig, "upgrade", releaseName, "oci://"+host+"/charts/outpost-agent",
		"--version", version, "--plain-http", "--namespace", e.agentNS, "--values", values)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm upgrade to this tree's chart from %s: %v\n%s", pushed.Ref, err, out)
	}
}

// pushPrevious pushes the previous build's images into the env's registry path, tagged with its
// version, beside this tree's.
func (e *env) pushPrevious(prev releasetest.Previous) {
	e.t.Helper()
	built, err := release.ReadSummary(prev.ImagesDir())
	if err != nil {
		e.t.Fatal(err)
	}
	opts, err := ocitest.RemoteOptions(e.t.Context(), e.c.Registry)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, b := range built {
		a, err := release.OpenOCIArchive(b.Archive)
		if err != nil {
			e.t.Fatal(err)
		}
		ref, err := name.NewTag(e.registry + "/" + namespace + "/" + b.Name + ":" + prev.Version)
		if err == nil {
			err = remote.WriteIndex(ref, a.Index, opts...)
		}
		a.Close()
		if err != nil {
			e.t.Fatalf("pushing the previous build's %s: %v", b.Name, err)
		}
	}
	if len(built) != 2 || !slices.ContainsFunc(built, func(b recipe.Built) bool { return b.Name == recipe.AgentName }) {
		e.t.Fatalf("the previous build lists %d images", len(built))
	}
}

// waitAgentsOn waits until n agent pods run image, all ready, and none of another image is left.
func (e *env) waitAgentsOn(image string, n int) {
	e.t.Helper()
	testbed.WaitFor(e.t, 3*time.Minute, fmt.Sprintf("%d ready agent pods of %s", n, image), func() (bool, string) {
		var on, other int
		for _, p := range e.agentPods() {
			if p.DeletionTimestamp != nil {
				other++
				continue
			}
			ready := slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			})
			if p.Spec.Containers[0].Image == image && ready {
				on++
			} else {
				other++
			}
		}
		return on == n && other == 0, fmt.Sprintf("%d on it, %d others", on, other)
	})
}

// checkEachRanOnce waits until every deployment is terminal and checks each succeeded in its
// first attempt with one started and one finished event and a complete log: nothing lost, run
// twice, or lost of its events.
func (e *env) checkEachRanOnce(ids []string) {
	e.t.Helper()
	var lost, twice, eventsLost int
	for _, id := range ids {
		r := e.follow(id, time.Now(), 6*time.Minute)
		if r.d.Status != api.StatusSucceeded {
			lost++
			e.t.Errorf("deployment %s (%s): %s (%s: %s)\n%s", id, r.d.Operation, r.d.Status, r.d.Reason, r.d.Message, r.log)
		}
		if r.d.Attempt != 1 {
			twice++
			e.t.Errorf("deployment %s ran %d attempts", id, r.d.Attempt)
		}
		evs, err := e.admin.ListEvents(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		n := orchestratortest.EventCounts(evs)
		started, finished := n[api.EventStarted], n[api.EventFinished]
		if started != 1 || finished != 1 || !strings.Contains(r.log, "==> ") {
			eventsLost++
			e.t.Errorf("deployment %s: %d started and %d finished events, log of %d bytes", id, started, finished, len(r.log))
		}
	}
	e.t.Logf("%d deployments: %d lost, %d run twice, %d with events lost", len(ids), lost, twice, eventsLost)
}

// enqueueVars queues a deployment of files; n ≥ 0 is given as the variable n.
func (e *env) enqueueVars(op api.Operation, files map[string]string, stateKey string, n int) *api.Deployment {
	e.t.Helper()
	in := api.DeploymentInput{RunnerID: runnerID, Operation: op, StateKey: stateKey,
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archiveOf(e.t, files)}}}
	if n >= 0 {
		in.Variables = map[string]json.RawMessage{"n": json.RawMessage(fmt.Sprintf(`"%d"`, n))}
	}
	d, err := e.admin.CreateDeployment(e.t.Context(), in)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// archiveOf is the inline source archive of files.
func archiveOf(t testing.TB, files map[string]string) []byte { return orchestratortest.TarGz(t, files) }

// jobStateURLs maps the deployment of every Job in the jobs namespace to the state URL its main
// container was given.
func (e *env) jobStateURLs() map[string]string {
	e.t.Helper()
	jobs, err := e.c.Client().BatchV1().Jobs(e.jobsNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, j := range jobs.Items {
		for _, c := range j.Spec.Template.Spec.Containers {
			for _, v := range c.Env {
				if v.Name == jobenv.StateURL {
					out[j.Labels[kubeexec.LabelDeploymentID]] = v.Value
				}
			}
		}
	}
	return out
}
