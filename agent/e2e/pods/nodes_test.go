//go:build faults

package pods

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/faulttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// Faults of the cluster's nodes, on a test bed of two real nodes of the test's own
// (testbed.Options{Nodes: 2}): what the package's shared one-node test bed cannot show, and what
// would disturb its other tests.

// TestFaults runs the node faults one after the other and reports them as rows of the table of
// `make faults` (suite agent-e2e-pods), each fault a few deployments on a test bed of its own
// (about 2 min). The file builds only with the tag faults, which `make faults` sets: the test
// bed's short node-lifecycle timings (a node is NotReady after 10 s without a kubelet
// heartbeat) made a node of the drain NotReady once under `make test`'s parallel load on two
// cores, and its job pods then never started; a flaky test in `make test` blocks everyone's
// landing, and CI's `make test` refuses skipped tests.
func TestFaults(t *testing.T) {
	s := faulttest.NewSuite(t, "agent-e2e-pods")
	s.Run("node drained (kubectl drain)", nodeDrain)
	s.Run("node lost (kubelet, containerd and network killed)", nodeLoss)
	s.Report()
}

// twoNodeEnv is an env with two agent replicas on a test bed of two real nodes of its own.
func twoNodeEnv(t *testing.T) *env {
	c := testbed.ForTest(t, testbed.Options{Node: true, Nodes: 2})
	testbed.RequireNode(t, c)
	// A job pod moved to the other node may pull its images there first, which takes longer
	// than the harness's start-up timeout on a busy machine.
	e := newEnv(t, envOptions{cluster: c, replicas: 2, values: "jobs: {startupTimeout: 3m}"})
	testbed.WaitFor(t, 2*time.Minute, "both agent pods to be ready", func() (bool, string) {
		ready := 0
		for _, p := range e.agentPods() {
			if podReady(&p) {
				ready++
			}
		}
		return ready == 2, fmt.Sprintf("%d ready", ready)
	})
	return e
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
			return true
		}
	}
	return false
}

// agentNodes returns the nodes of the ready agent pods, by pod name.
func (e *env) agentNodes() map[string]string {
	out := map[string]string{}
	for _, p := range e.agentPods() {
		if podReady(&p) {
			out[p.Name] = p.Spec.NodeName
		}
	}
	return out
}

// kubectl runs the test bed's kubectl against e's cluster.
func (e *env) kubectl(args ...string) *exec.Cmd {
	e.t.Helper()
	bin, err := testbed.Kubectl()
	if err != nil {
		e.t.Fatal(err)
	}
	return exec.CommandContext(e.t.Context(), bin, append([]string{"--kubeconfig", e.c.Kubeconfig}, args...)...) //nolint:gosec // the test's own binary and arguments
}

// rerunOn checks that a plan ran in two pods, the second on node (the first one's was disrupted),
// and returns them as pod@node.
func rerunOn(t *testing.T, w *podWatch, node string) []string {
	t.Helper()
	var pods []string
	on := 0
	for p, n := range w.nodes {
		pods = append(pods, p+"@"+n)
		if n == node {
			on++
		}
	}
	if len(w.names) != 2 || on != 1 {
		t.Errorf("the plan ran in pods %v, want 2: the disrupted one and its replacement on %s", pods, node)
	}
	return pods
}

// heldModule serves a Terraform module as an HTTP archive (http://…/m.tar.gz) and holds the
// first request until release is called, so a plan whose configuration uses it stays in
// `init` (its CLI running, in its pod) for as long as the test needs.
type heldModule struct {
	url      string
	requests atomic.Int32
	release  func()
}

func startHeldModule(t *testing.T, hostIP string) *heldModule {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	body := []byte("output \"answer\" {\n  value = 42\n}\n")
	if err := tw.WriteHeader(&tar.Header{Name: "main.tf", Mode: 0o644, Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write(body)
	_ = tw.Close()
	_ = gz.Close()
	held := make(chan struct{})
	var once sync.Once
	m := &heldModule{release: func() { once.Do(func() { close(held) }) }}
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", net.JoinHostPort(hostIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m.requests.Add(1) == 1 {
			select {
			case <-held:
			case <-r.Context().Done():
				return
			case <-time.After(5 * time.Minute):
			}
		}
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(buf.Bytes())
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { m.release(); _ = srv.Close() })
	m.url = "http://" + l.Addr().String() + "/m.tar.gz"
	return m
}

// withModule is a configuration that uses the module the server serves.
func withModule(url string) map[string]string {
	return map[string]string{"main.tf": fmt.Sprintf(`
module "m" {
  source = %q
}

output "answer" {
  value = module.m.answer
}
`, url)}
}

// jobPodsOf lists the job pods of a deployment.
func (e *env) jobPodsOf(id string) []corev1.Pod {
	e.t.Helper()
	pods, err := e.c.Client().CoreV1().Pods(e.jobsNS).List(e.t.Context(), metav1.ListOptions{LabelSelector: kubeexec.LabelDeploymentID + "=" + id})
	if err != nil {
		e.t.Fatal(err)
	}
	return pods.Items
}

// nodeDrain drains a real node with `kubectl drain` while an apply and a plan run on it:
//
//   - the apply's pod is protected by the chart's PodDisruptionBudget of the jobs namespace, so
//     the drain waits (kubectl retries the refused eviction) until the apply has ended, and the
//     apply succeeds once, in one pod;
//   - the plan's pod (its CLI in init, fetching a module the test holds back) is evicted at once,
//     the Job runs the plan again in a new pod on the other node, and it succeeds in its first
//     attempt with one started and one finished event;
//   - the agent pod on the drained node is evicted under the agent's own budget and comes back
//     on the other node; the leader Lease stays held throughout.
//
// Recovery is the time from the drain's start until both deployments were reported finished.
func nodeDrain(t *testing.T) faulttest.Row {
	e := twoNodeEnv(t)
	first, second := e.c.RealNodes[0], e.c.RealNodes[1]
	spread := e.agentNodes()
	t.Logf("agent pods on %v", spread)
	nodesUsed := map[string]bool{}
	for _, n := range spread {
		nodesUsed[n] = true
	}
	if len(nodesUsed) != 2 {
		t.Errorf("the two agent pods run on %v; the chart's topology spread should put them on both nodes", spread)
	}

	// Both job pods go to the node drained: the other is cordoned until they run.
	if out, err := e.kubectl("cordon", first).CombinedOutput(); err != nil {
		t.Fatalf("kubectl cordon: %v\n%s", err, out)
	}
	mod := startHeldModule(t, e.c.HostIP)
	apply := e.enqueue(api.OperationApply, slow(40), "drain-apply")
	plan := e.enqueue(api.OperationPlan, withModule(mod.url), "drain-plan")
	applyWatch, planWatch := e.watchPods(apply.ID), e.watchPods(plan.ID)
	e.waitLog(apply.ID, slowStarts, 3*time.Minute)
	testbed.WaitFor(t, 3*time.Minute, "the plan's CLI to fetch the held module", func() (bool, string) {
		return mod.requests.Load() > 0, "no request yet"
	})
	for _, id := range []string{apply.ID, plan.ID} {
		for _, p := range e.jobPodsOf(id) {
			if p.Spec.NodeName != second {
				t.Fatalf("job pod %s runs on %q, want %s", p.Name, p.Spec.NodeName, second)
			}
		}
	}
	if out, err := e.kubectl("uncordon", first).CombinedOutput(); err != nil {
		t.Fatalf("kubectl uncordon: %v\n%s", err, out)
	}

	leaderBefore := e.leader()
	start := time.Now()
	drain := e.kubectl("drain", second, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m")
	var drainOut bytes.Buffer
	drain.Stdout, drain.Stderr = &drainOut, &drainOut
	if err := drain.Start(); err != nil {
		t.Fatal(err)
	}
	drained := make(chan error, 1)
	go func() { drained <- drain.Wait() }()
	var leaderless time.Duration
	var drainErr error
	drainDone := time.Time{}
	applyRun := make(chan run, 1)
	go func() { applyRun <- e.follow(apply.ID, start, 5*time.Minute) }()
	firstPlanPod := e.jobPodsOf(plan.ID)[0].Name
	// Held until the evicted pod has ended: released earlier, the module would reach the pod in
	// its termination grace period, and the plan could finish there.
	testbed.WaitFor(t, 2*time.Minute, "the drain to evict the plan's pod and the pod to end", func() (bool, string) {
		for _, p := range e.jobPodsOf(plan.ID) {
			if p.Name == firstPlanPod && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
				return false, fmt.Sprintf("pod %s %s, deleted %v", p.Name, p.Status.Phase, p.DeletionTimestamp != nil)
			}
		}
		return true, ""
	})
	mod.release() // the plan's second pod fetches the module at once
	planRun := e.follow(plan.ID, start, 5*time.Minute)
	planTook := time.Since(start)
	a := <-applyRun
	applyEnded := time.Now()
	select {
	case drainErr = <-drained:
		drainDone = time.Now()
	case <-time.After(2 * time.Minute):
		drainErr = fmt.Errorf("kubectl drain still running 2 min after the apply ended")
	}
	if e.leader() == "" {
		leaderless = time.Since(start)
	}
	recovered := time.Since(start)
	t.Logf("kubectl drain:\n%s", drainOut.String())
	if drainErr != nil {
		t.Errorf("kubectl drain: %v", drainErr)
	}
	if !drainDone.IsZero() && drainDone.Before(applyEnded.Add(-30*time.Second)) {
		t.Errorf("the drain ended %s before the apply was reported finished: the apply's pod was not protected",
			applyEnded.Sub(drainDone).Round(100*time.Millisecond))
	}
	if leaderless > 0 {
		t.Errorf("no agent holds the leader Lease after the drain")
	}

	row := faulttest.Row{Deployments: 2, Recover: recovered}
	for _, r := range []run{a, planRun} {
		if r.d.Status != api.StatusSucceeded {
			row.Lost++
			t.Errorf("%s %s: %s (%s: %s)\n%s", r.d.Operation, r.d.ID, r.d.Status, r.d.Reason, r.d.Message, r.log)
		}
		if r.d.Attempt != 1 {
			row.Retried++
		}
		if n := e.finishedEvents(r.d.ID); n != 1 {
			row.EventsLost++
			t.Errorf("%s: %d finished events, want 1", r.d.ID, n)
		}
	}
	applyWatch.stop()
	planWatch.stop()
	if n := len(applyWatch.names); n > 1 {
		row.Twice++
		t.Errorf("the apply ran in %d pods, want 1", n)
	}
	if strings.Count(a.log, slowEnds) > 1 {
		row.Twice++
	}
	planNodes := rerunOn(t, planWatch, first)
	for n, node := range e.agentNodes() {
		if node != first {
			t.Errorf("agent pod %s is on %s after the drain, want %s", n, node, first)
		}
	}
	row.Note = fmt.Sprintf("apply held the drain %s; plan pods %v, done %s after the drain began; leader %s then %s",
		applyEnded.Sub(start).Round(time.Second), planNodes, planTook.Round(100*time.Millisecond), leaderBefore, e.leader())
	return row
}

// otherBound is how soon after a node loss an apply on the surviving node must end, its command
// (at most 50 s) included: its state proxy gives a connection to the lost agent up within 15 s
// (stateproxy.DefaultUserTimeout), the CLI's retries and the leader's move (about 20 s with the
// test bed's timings) take the rest. Without the proxy such an apply waited about 15 minutes.
const otherBound = 3 * time.Minute

// proxyLines returns the state proxy's lines of a job log.
func proxyLines(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "state proxy:") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// nodeLoss stops the second node hard (testbed.StopNodeHard: network dropped, then every process
// of the node killed) while an apply and a plan run there, the leading agent replica runs there,
// and three other applies run on the first node. Once the node is NotReady the test deletes its Node,
// as a cloud's node lifecycle controller does for an instance that is gone. Then:
//
//   - the plan's pod is given up (taint-based eviction, the pod garbage collector), the Job runs
//     the plan again in a new pod on the first node, and the plan succeeds in its first attempt;
//   - the apply ends failed with the reason node_lost, saying the node and that the run may have
//     partly happened, in one pod, never re-run; its state lock is released (a plan of the same
//     state afterwards does not wait for it); its pod is gone;
//   - the agent replica of the lost node is replaced on the first node and the other replica
//     takes the leader Lease; the other applies succeed once each, within otherBound of the
//     loss: each CLI's state connection went through the Service to either agent, and one to
//     the lost agent must not hold its state write until TCP gives up on it (about 15 min with
//     Linux's defaults); the job runner's state proxy gives such a connection up within 15 s.
//
// The bound: the node lifecycle controller marks the node NotReady 10 s after its last Lease
// renewal (--node-monitor-grace-period=10s); the pod garbage collector fails the Pods of a
// deleted Node 40 s after it noticed (its fixed quarantine) at its next 20 s sweep; the agent
// reports within its poll. So about 75 s from the loss to the apply's end, recovery measured
// from the loss until all three were reported finished.
func nodeLoss(t *testing.T) faulttest.Row {
	e := twoNodeEnv(t)
	ctx := t.Context()
	first, second := e.c.RealNodes[0], e.c.RealNodes[1]
	// The leader must be on the node lost, to show the leader Lease move: the leader's pod is
	// deleted until the Lease goes to the replica there (its replacement may win it instead).
	for try := 1; e.agentNodes()[e.leader()] != second; try++ {
		if try > 6 {
			t.Fatalf("the agent on %s did not take the leader Lease in 6 tries; agents %v, leader %s", second, e.agentNodes(), e.leader())
		}
		leader := e.leader()
		if err := e.c.Client().CoreV1().Pods(e.agentNS).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testbed.WaitFor(t, 2*time.Minute, "a new leader and two agents on both nodes", func() (bool, string) {
			nodes := e.agentNodes()
			on := map[string]bool{}
			for _, n := range nodes {
				on[n] = true
			}
			l := e.leader()
			return len(nodes) == 2 && len(on) == 2 && l != leader && nodes[l] != "", fmt.Sprintf("leader %s, ready %v", l, nodes)
		})
	}
	leaderBefore := e.leader()

	if out, err := e.kubectl("cordon", first).CombinedOutput(); err != nil {
		t.Fatalf("kubectl cordon: %v\n%s", err, out)
	}
	mod := startHeldModule(t, e.c.HostIP)
	apply := e.enqueue(api.OperationApply, slow(300), "lost-apply")
	plan := e.enqueue(api.OperationPlan, withModule(mod.url), "lost-plan")
	e.waitLog(apply.ID, slowStarts, 3*time.Minute)
	testbed.WaitFor(t, 3*time.Minute, "the plan's CLI to fetch the held module", func() (bool, string) {
		return mod.requests.Load() > 0, "no request yet"
	})
	for _, cmd := range [][]string{{"uncordon", first}, {"cordon", second}} {
		if out, err := e.kubectl(cmd...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", cmd, err, out)
		}
	}
	// Three, so that at least one CLI's state connection goes to the agent on the lost node in
	// most runs (each goes to either agent; 7 runs in 8). Their commands (30, 40 and 50 s) end
	// after the loss, while the Service may still list the lost agent and before or after the
	// leader moved.
	placed := map[string]string{apply.ID: second, plan.ID: second}
	var others []*api.Deployment
	for i := range 3 {
		others = append(others, e.enqueue(api.OperationApply, slow(30+10*i), fmt.Sprintf("lost-other-%d", i)))
	}
	for _, o := range others {
		e.waitLog(o.ID, slowStarts, 3*time.Minute)
		placed[o.ID] = first
	}
	for id, want := range placed {
		for _, p := range e.jobPodsOf(id) {
			if p.Spec.NodeName != want {
				t.Fatalf("job pod %s runs on %q, want %s", p.Name, p.Spec.NodeName, want)
			}
		}
	}
	applyWatch, planWatch := e.watchPods(apply.ID), e.watchPods(plan.ID)

	lost := time.Now()
	if err := e.c.StopNodeHard(ctx, second); err != nil {
		t.Fatal(err)
	}
	mod.release()
	testbed.WaitFor(t, 2*time.Minute, "the node lifecycle controller to mark "+second+" NotReady", func() (bool, string) {
		n, err := e.c.Client().CoreV1().Nodes().Get(ctx, second, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status != corev1.ConditionTrue, string(c.Status)
			}
		}
		return false, "no Ready condition"
	})
	notReady := time.Since(lost)
	if err := e.c.Client().CoreV1().Nodes().Delete(ctx, second, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testbed.WaitFor(t, 2*time.Minute, "another agent to lead", func() (bool, string) {
		return e.leader() != "" && e.leader() != leaderBefore, "leader " + e.leader()
	})
	newLeader := time.Since(lost)

	runs := map[string]run{}
	ids := []string{plan.ID, apply.ID}
	for _, o := range others {
		ids = append(ids, o.ID)
	}
	for _, id := range ids {
		runs[id] = e.follow(id, lost, 20*time.Minute)
	}
	recovered := time.Since(lost)
	applyWatch.stop()
	planWatch.stop()

	row := faulttest.Row{Deployments: len(ids), Recover: recovered}
	a := runs[apply.ID]
	switch {
	case a.d.Status != api.StatusFailed || a.d.Reason != "node_lost":
		row.Lost++
		t.Errorf("the apply on the lost node: %s (%s: %s); want failed with reason node_lost", a.d.Status, a.d.Reason, a.d.Message)
	case !strings.Contains(a.d.Message, second) || !strings.Contains(a.d.Message, "may have partly happened"):
		t.Errorf("the apply's message %q should name the node and say the run may have partly happened", a.d.Message)
	}
	for _, id := range ids {
		if id == apply.ID {
			continue
		}
		if r := runs[id]; r.d.Status != api.StatusSucceeded {
			row.Lost++
			t.Errorf("%s %s: %s (%s: %s)\n%s", r.d.Operation, id, r.d.Status, r.d.Reason, r.d.Message, r.log)
		}
	}
	for _, r := range runs {
		if r.d.Attempt != 1 {
			row.Retried++
		}
		if n := e.finishedEvents(r.d.ID); n != 1 {
			row.EventsLost++
			t.Errorf("%s: %d finished events, want 1", r.d.ID, n)
		}
	}
	if n := len(applyWatch.names); n != 1 {
		row.Twice++
		t.Errorf("the apply ran in %d pods, want 1", n)
	}
	var otherEnded []string
	for _, o := range others {
		r := runs[o.ID]
		if strings.Count(r.log, slowEnds) > 1 {
			row.Twice++
		}
		ended := r.took
		if r.d.FinishedAt != nil {
			ended = r.d.FinishedAt.Sub(lost)
		}
		otherEnded = append(otherEnded, ended.Round(100*time.Millisecond).String())
		if ended > otherBound {
			t.Errorf("the other apply %s ended %s after the loss, want within %s: a state request waited on a connection to the lost agent\n%s",
				o.ID, ended.Round(100*time.Millisecond), otherBound, r.log)
		}
		if n := strings.Count(r.log, "state proxy:"); n > 0 {
			t.Logf("the other apply %s: %d state proxy lines:\n%s", o.ID, n, proxyLines(r.log))
		}
	}
	planNodes := rerunOn(t, planWatch, first)
	testbed.WaitFor(t, 2*time.Minute, "the lost apply's pod to be gone and two agents ready on "+first, func() (bool, string) {
		pods := e.jobPodsOf(apply.ID)
		nodes := e.agentNodes()
		for _, n := range nodes {
			if n != first {
				return false, fmt.Sprintf("agents %v", nodes)
			}
		}
		return len(pods) == 0 && len(nodes) == 2, fmt.Sprintf("%d apply pods, agents %v", len(pods), nodes)
	})
	// The lock of the lost apply's state is free: a plan of it does not wait.
	if r := e.deploy(api.OperationPlan, slow(300), "lost-apply"); r.d.Status != api.StatusSucceeded || strings.Contains(r.log, "Error acquiring the state lock") {
		t.Errorf("a plan of the lost apply's state: %s (%s)\n%s", r.d.Status, r.d.Message, r.log)
	}
	applyEnded := recovered
	if a.d.FinishedAt != nil {
		applyEnded = a.d.FinishedAt.Sub(lost)
	}
	row.Note = fmt.Sprintf("apply ended node_lost %s after the loss (node NotReady after %s, Node deleted then); plan pods %v; leader %s then %s after %s",
		applyEnded.Round(100*time.Millisecond), notReady.Round(100*time.Millisecond), planNodes, leaderBefore, e.leader(), newLeader.Round(100*time.Millisecond))
	if len(others) > 0 {
		row.Note += fmt.Sprintf("; the other applies on %s ended %s after the loss", first, strings.Join(otherEnded, ", "))
	}
	return row
}
