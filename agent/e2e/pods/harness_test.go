package pods

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"k8s.io/apimachinery/pkg/util/rand"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/helm"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
	"github.com/outpost-dev/terraform-provider-outpost/tools/ocitest"
)

const (
	org         = "acme"
	runnerID    = "r1"
	releaseName = "outpost-agent"
	// jobServiceAccount is the chart's default for the jobs' ServiceAccount.
	jobServiceAccount = "outpost-job"
	// startupTimeout is the agent's jobs.startupTimeout in these tests.
	startupTimeout = 30 * time.Second
)

// env is one test's world: a reference orchestrator listening on the test bed's HostIP, a runner
// registered with it, and the chart installed with the agent running from its image on the real
// node, in an agent namespace (also holding the states) and a jobs namespace of the test's own.
type env struct {
	t       testing.TB
	c       *testbed.Cluster
	orch    *orchestratortest.Instance
	admin   *client.AdminClient
	agentNS string
	// stateNS holds the states, apart from the key and the jobs, as the chart's defaults want.
	stateNS string
	jobsNS  string
	// registry is the chart's global.imageRegistry: a path of the env's own in the test bed's
	// registry ("<host>/e-<random>") that mirror filled, so no node has these images yet.
	registry string
	// The images as the env's pods name them, under registry.
	agentImage, jobImage, terraformImage, toolboxImage string
}

// pullSecret is the kubernetes.io/dockerconfigjson Secret every env creates in its agent and jobs
// namespaces, logging in to the test bed's registry, and names in the chart's imagePullSecrets.
const pullSecret = "registry-login"

// registryVar in a podTemplate stands for the env's registry path (env.registry), so a template
// can name an image of the env's mirror ("$REGISTRY/outpost-test/terraform:1.11.4").
const registryVar = "$REGISTRY"

type envOptions struct {
	// podTemplate is the runner's job.pod_template (JSON), registryVar replaced; empty leaves
	// main's image to the chart's jobs.image.
	podTemplate string
	// values are chart values (YAML) over the harness's own.
	values string
	// replicas is the number of agent pods (default 1).
	replicas int
	// before runs after the namespaces exist and before the chart is installed.
	before func(e *env)
	// apiURL is the chart's apiUrl (default: the test's orchestrator).
	apiURL string
	// unconnected skips the wait for the agent to connect, for an agent that is not meant to.
	unconnected bool
	// chart, when set, is installed instead of the tree's (loadChart): another build's, whose
	// agent reports version.
	chart   *chart.Chart
	version string
	// cluster, when set, is a test bed of the test's own (one it may drain or break, with
	// several nodes) instead of the package's shared one; the images are copied into its
	// registry from the shared one's.
	cluster *testbed.Cluster
	// orchestrator are options of the env's orchestrator (a tracer provider, say).
	orchestrator []orchestratortest.Option
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	c := testbed.Shared(t)
	images(t, c)
	src := c.Registry
	if o.cluster != nil {
		c = o.cluster
	}
	ctx := t.Context()
	e := &env{t: t, c: c, orch: orchestratortest.StartOn(t, net.JoinHostPort(c.HostIP, "0"), o.orchestrator...)}
	var err error
	// The orchestrator listens on the host's address on the node's network (plain HTTP, as in
	// tests): the client, the agent and its job runners must each be allowed that by name.
	if e.admin, err = client.NewAdminClient(e.orch.URL, org, e.orch.AdminToken, client.AllowInsecureHTTP()); err != nil {
		t.Fatal(err)
	}
	e.agentNS, e.jobsNS, e.stateNS = testbed.NewNamespace(t, c), testbed.NewNamespace(t, c), testbed.NewNamespace(t, c)
	// Registered after the namespaces, so it runs before they are deleted.
	t.Cleanup(e.dumpOnFailure)
	e.mirror(src)
	login := c.Registry.DockerConfigJSON(c.Registry.Username, c.Registry.Password)
	for _, ns := range []string{e.agentNS, e.jobsNS} {
		e.createPullSecret(ns, pullSecret, login)
	}

	pub, priv, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, _ := keys.EncodePublicPEM(pub)
	privPEM, _ := keys.EncodePrivatePEM(priv)
	e.createSecret(e.agentNS, "runner-key", map[string]string{"private-key.pem": privPEM})
	if _, err := e.admin.CreateStateStorage(ctx, api.StateStorageInput{ID: "k8s", Type: api.StateStorageKubernetes,
		Kubernetes: &api.KubernetesStateSpec{Namespace: e.stateNS}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.CreateRunner(ctx, api.RunnerInput{ID: runnerID, PublicKeys: []string{pubPEM}, StateStorageID: "k8s",
		MaxConcurrency: 4, JobTimeoutSeconds: 900,
		Job: api.RunnerJob{Namespace: e.jobsNS, ServiceAccount: jobServiceAccount, PodTemplate: strings.ReplaceAll(o.podTemplate, registryVar, e.registry)}}); err != nil {
		t.Fatal(err)
	}
	if o.before != nil {
		o.before(e)
	}
	e.install(o)
	if !o.unconnected {
		e.waitConnected(cmp.Or(o.version, imagesVersion))
	}
	return e
}

// install installs the embedded chart as a user would from a private mirror: global.imageRegistry
// is the env's path in the test bed's registry and imagePullSecrets its login (pull policy
// IfNotPresent, the chart's default; the node has no image of that path before).
func (e *env) install(o envOptions) {
	e.t.Helper()
	vals := e.values(o)
	cfg, err := helm.NewConfiguration(helm.NewRESTClientGetter(e.c.RESTConfig, e.agentNS), e.agentNS, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	chrt := o.chart
	if chrt == nil {
		if chrt, err = loadChart(); err != nil {
			e.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(e.t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := helm.Install(ctx, cfg, chrt, vals, helm.InstallOptions{ReleaseName: releaseName, Namespace: e.agentNS, Timeout: time.Minute}); err != nil {
		e.t.Fatalf("installing the chart: %v", err)
	}
}

// values are the chart values of the env's release: the harness's own, then o.values.
func (e *env) values(o envOptions) map[string]any {
	e.t.Helper()
	replicas := max(o.replicas, 1)
	apiURL := e.orch.URL
	if o.apiURL != "" {
		apiURL = o.apiURL
	}
	vals, err := helm.ParseValues(fmt.Sprintf(`
apiUrl: %q
insecureAllowHttp: true
orgId: %s
runnerId: %s
privateKey: {existingSecret: runner-key}
replicaCount: %d
logLevel: debug
terminationGracePeriodSeconds: 30
resources: {requests: {cpu: 10m, memory: 64Mi}, limits: {memory: 256Mi}}
jobs: {namespace: %s, startupTimeout: %s}
state: {namespace: %s}
global: {imageRegistry: %q}
imagePullSecrets: [%s]
`, apiURL, org, runnerID, replicas, e.jobsNS, startupTimeout, e.stateNS, e.registry, pullSecret))
	if err != nil {
		e.t.Fatal(err)
	}
	if o.values != "" {
		over, err := helm.ParseValues(o.values)
		if err != nil {
			e.t.Fatal(err)
		}
		vals = helm.MergeValues(vals, over)
	}
	return vals
}

// waitConnected waits until an agent of version (stamped into the binary by the image build),
// running in its pod, has polled the orchestrator. Right after an upgrade the runner's status
// still shows the previous agent's last poll until the new leader polls, so it waits for the
// version rather than checking the first status it sees.
func (e *env) waitConnected(version string) {
	e.t.Helper()
	testbed.WaitFor(e.t, 2*time.Minute, "the agent pod of version "+version+" to connect to the orchestrator", func() (bool, string) {
		r, err := e.admin.GetRunner(context.Background(), runnerID)
		if err != nil {
			return false, err.Error()
		}
		return r.Status.Connected && r.Status.AgentVersion == version, fmt.Sprintf("runner status %+v (want agent version %q)", r.Status, version)
	})
}

// mirror copies the pushed images into a path of the env's own in the registry, as `crane copy`
// would (the blobs are mounted from the first path, not uploaded again), and sets the env's image
// names: the pods of every env pull, never find the image on the node already.
func (e *env) mirror(src *testbed.Registry) {
	e.t.Helper()
	ctx := e.t.Context()
	r := e.c.Registry
	e.registry = r.Host + "/e-" + rand.String(8)
	opts, err := ocitest.RemoteOptions(ctx, r)
	if err != nil {
		e.t.Fatal(err)
	}
	srcOpts, err := ocitest.RemoteOptions(ctx, src)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range []struct {
		path string
		to   *string
	}{{pushed.agent, &e.agentImage}, {pushed.job, &e.jobImage}, {pushed.terraform, &e.terraformImage}, {pushed.toolbox, &e.toolboxImage}} {
		from, err := name.NewTag(src.Host + "/" + p.path)
		if err != nil {
			e.t.Fatal(err)
		}
		to, err := name.NewTag(e.registry + "/" + p.path)
		if err != nil {
			e.t.Fatal(err)
		}
		desc, err := remote.Get(from, srcOpts...)
		if err != nil {
			e.t.Fatalf("reading %s from the registry: %v", from, err)
		}
		if desc.MediaType.IsIndex() {
			idx, err := desc.ImageIndex()
			if err == nil {
				err = remote.WriteIndex(to, idx, opts...)
			}
			if err != nil {
				e.t.Fatalf("copying %s to %s: %v", from, to, err)
			}
		} else {
			img, err := desc.Image()
			if err == nil {
				err = remote.Write(to, img, opts...)
			}
			if err != nil {
				e.t.Fatalf("copying %s to %s: %v", from, to, err)
			}
		}
		*p.to = to.String()
	}
}

// createPullSecret creates a kubernetes.io/dockerconfigjson Secret.
func (e *env) createPullSecret(ns, name string, dockerConfigJSON []byte) {
	e.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfigJSON}}
	if _, err := e.c.Client().CoreV1().Secrets(ns).Create(e.t.Context(), s, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) createSecret(ns, name string, data map[string]string) {
	e.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: data}
	if _, err := e.c.Client().CoreV1().Secrets(ns).Create(e.t.Context(), s, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// enqueue queues a deployment of a configuration given as files.
func (e *env) enqueue(op api.Operation, files map[string]string, stateKey string) *api.Deployment {
	e.t.Helper()
	d, err := e.admin.CreateDeployment(e.t.Context(), api.DeploymentInput{RunnerID: runnerID, Operation: op,
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(e.t, files)}}, StateKey: stateKey})
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// run is one deployment followed to its end.
type run struct {
	d   *api.Deployment
	log string
	// firstCLILine is the time from the enqueue to the CLI's first line in the orchestrator's log
	// (init's "Initializing …"); zero when the CLI printed nothing.
	firstCLILine time.Duration
	took         time.Duration
}

// deploy enqueues a deployment and follows it until it is terminal.
func (e *env) deploy(op api.Operation, files map[string]string, stateKey string) run {
	e.t.Helper()
	start := time.Now()
	d := e.enqueue(op, files, stateKey)
	return e.follow(d.ID, start, 5*time.Minute)
}

// follow polls a deployment and its log until it is terminal.
func (e *env) follow(id string, enqueued time.Time, timeout time.Duration) run {
	e.t.Helper()
	var r run
	testbed.WaitFor(e.t, timeout, "deployment "+id+" to finish", func() (bool, string) {
		ctx := context.Background()
		d, err := e.admin.GetDeployment(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		r.d = d
		chunk, err := e.admin.GetLogs(ctx, id, 0, 4<<20)
		if err != nil {
			return false, err.Error()
		}
		r.log = string(chunk.Data)
		if r.firstCLILine == 0 && strings.Contains(r.log, "\nInitializing") {
			r.firstCLILine = time.Since(enqueued)
		}
		return d.Status.Terminal() && chunk.Complete, fmt.Sprintf("status %s, %d log bytes", d.Status, len(chunk.Data))
	})
	r.took = time.Since(enqueued)
	return r
}

// waitLog waits until the deployment's log contains s.
func (e *env) waitLog(id, s string, timeout time.Duration) {
	e.t.Helper()
	testbed.WaitFor(e.t, timeout, fmt.Sprintf("%q in the log of %s", s, id), func() (bool, string) {
		chunk, err := e.admin.GetLogs(context.Background(), id, 0, 4<<20)
		if err != nil {
			return false, err.Error()
		}
		d, _ := e.admin.GetDeployment(context.Background(), id)
		if d != nil && d.Status.Terminal() {
			e.t.Fatalf("deployment %s ended (%s: %s) before its log said %q:\n%s", id, d.Status, d.Message, s, chunk.Data)
		}
		return strings.Contains(string(chunk.Data), s), fmt.Sprintf("%d log bytes", len(chunk.Data))
	})
}

// finishedEvents counts the finished events of a deployment.
func (e *env) finishedEvents(id string) int {
	e.t.Helper()
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
	return n
}

// outputs returns a deployment's outputs as name → JSON value.
func (e *env) outputs(id string) map[string]string {
	e.t.Helper()
	outs, err := e.admin.GetOutputs(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	m := map[string]string{}
	for k, o := range outs {
		m[k] = string(o.Value)
	}
	return m
}

// noLeftovers waits until the jobs namespace holds nothing of the agent's but its history:
// finished Jobs labelled outpost.dev/history and their finished pods, and no token Secret. That
// is what a finished deployment leaves once the agent cleaned up after it.
func (e *env) noLeftovers() {
	e.t.Helper()
	sel := metav1.ListOptions{LabelSelector: kubeexec.LabelManagedBy + "=" + kubeexec.ManagedByValue}
	cs := e.c.Client()
	testbed.WaitFor(e.t, 90*time.Second, "the agent to move the Job into the history and remove its token Secret", func() (bool, string) {
		ctx := context.Background()
		var left []string
		jobs, err := cs.BatchV1().Jobs(e.jobsNS).List(ctx, sel)
		if err != nil {
			return false, err.Error()
		}
		kept := map[string]bool{}
		for _, j := range jobs.Items {
			if j.Labels[kubeexec.LabelHistory] == "" {
				left = append(left, "Job "+j.Name)
			}
			kept[j.Name] = j.Labels[kubeexec.LabelHistory] != ""
		}
		pods, err := cs.CoreV1().Pods(e.jobsNS).List(ctx, sel)
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			done := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
			if !kept[p.Labels["job-name"]] || !done {
				left = append(left, fmt.Sprintf("Pod %s (%s)", p.Name, p.Status.Phase))
			}
		}
		secrets, err := cs.CoreV1().Secrets(e.jobsNS).List(ctx, sel)
		if err != nil {
			return false, err.Error()
		}
		for _, s := range secrets.Items {
			left = append(left, "Secret "+s.Name)
		}
		return len(left) == 0, "left: " + strings.Join(left, ", ")
	})
}

// agentPods lists the agent's pods, oldest first.
func (e *env) agentPods() []corev1.Pod {
	e.t.Helper()
	pods, err := e.c.Client().CoreV1().Pods(e.agentNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
	if err != nil {
		e.t.Fatal(err)
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return pods.Items
}

// dumpOnFailure logs what explains a failure: the agent pods' logs and the job pods' states.
func (e *env) dumpOnFailure() {
	if !e.t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := e.c.Client()
	for _, ns := range []string{e.agentNS, e.jobsNS, e.stateNS} {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			e.t.Logf("listing pods of %s: %v", ns, err)
			continue
		}
		for _, p := range pods.Items {
			e.t.Logf("pod %s/%s: %s on %q, init %s, containers %s", ns, p.Name, p.Status.Phase, p.Spec.NodeName,
				containerStates(p.Status.InitContainerStatuses), containerStates(p.Status.ContainerStatuses))
			for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
				b, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: ptr.To[int64](40)}).DoRaw(ctx)
				if err == nil && len(b) > 0 {
					e.t.Logf("last lines of %s/%s[%s]:\n%s", ns, p.Name, c.Name, b)
				}
			}
		}
		evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, ev := range evs.Items {
				if ev.Type == corev1.EventTypeWarning {
					e.t.Logf("event %s/%s %s: %s", ns, ev.InvolvedObject.Name, ev.Reason, ev.Message)
				}
			}
		}
	}
}

func containerStates(ss []corev1.ContainerStatus) string {
	var out []string
	for _, s := range ss {
		switch st := s.State; {
		case st.Waiting != nil:
			out = append(out, fmt.Sprintf("%s waiting (%s: %s)", s.Name, st.Waiting.Reason, st.Waiting.Message))
		case st.Running != nil:
			out = append(out, s.Name+" running")
		case st.Terminated != nil:
			out = append(out, fmt.Sprintf("%s exited %d (%s: %s)", s.Name, st.Terminated.ExitCode, st.Terminated.Reason, st.Terminated.Message))
		}
	}
	return "[" + strings.Join(out, "; ") + "]"
}
