package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// evictionTemplate: each Job's pod runs 12 s on kwok, long enough to be evicted while it runs.
const evictionTemplate = `{"metadata":{"annotations":{"testbed.outpost.dev/run-duration":"12s"}},"spec":{"containers":[{"name":"main"}]}}`

// TestEvictionsSpareAppliesAndRetryPlans drains a node the way `kubectl drain` does, through the
// Eviction API of the test bed's real kube-apiserver, while an apply and a plan run on kwok's
// node, with the chart's PodDisruptionBudget of the jobs namespace in place (rendered from the
// embedded chart) and the disruption controller counting it:
//
//   - the eviction of the apply's running pod is refused with 429 by that budget, and the apply
//     goes on and succeeds, run once;
//   - the plan's running pod is evicted (it gets the DisruptionTarget condition, main ends with
//     143 as after SIGTERM), the Job runs the plan again in a new pod (its pod failure policy
//     ignores disruptions of plans), and the plan succeeds in its first attempt with one started
//     and one finished event.
func TestEvictionsSpareAppliesAndRetryPlans(t *testing.T) {
	t.Parallel()
	e := newEnv(t, evictionTemplate, 4)
	ctx := t.Context()
	kube := e.cluster.Client()
	pdb := jobsBudget(t, e.runnerID, e.ns)
	if _, err := kube.PolicyV1().PodDisruptionBudgets(e.ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ensureDisruptionController(t, e, pdb.Name)
	e.startAgent("agent-0", "--leader-elect=false")

	deploy := func(op api.Operation, key string) string {
		d, err := e.admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: e.runnerID, Operation: op,
			Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive(t)}}, StateKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return d.ID
	}
	apply, plan := deploy(api.OperationApply, "evict-apply"), deploy(api.OperationPlan, "evict-plan")
	applyPod, planPod := runningPod(t, e, apply), runningPod(t, e, plan)

	// The budget has seen the apply's pod: it needs every selected pod and allows no disruption.
	testbed.WaitFor(t, 30*time.Second, "the budget to count the apply's pod", func() (bool, string) {
		b, err := kube.PolicyV1().PodDisruptionBudgets(e.ns).Get(ctx, pdb.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy >= 1 && b.Status.DisruptionsAllowed == 0,
			fmt.Sprintf("%+v", b.Status)
	})

	evict := func(pod string) error {
		return kube.PolicyV1().Evictions(e.ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: e.ns}})
	}
	err := evict(applyPod)
	var status apierrors.APIStatus
	if !apierrors.IsTooManyRequests(err) || !errors.As(err, &status) || status.Status().Details == nil ||
		len(status.Status().Details.Causes) == 0 || status.Status().Details.Causes[0].Type != policyv1.DisruptionBudgetCause {
		t.Fatalf("evicting the apply's running pod %s: %v, want 429 with the cause %s", applyPod, err, policyv1.DisruptionBudgetCause)
	}
	t.Logf("apply's pod: eviction refused: %v (%s)", err, status.Status().Details.Causes[0].Message)
	if err := evict(planPod); err != nil {
		t.Fatalf("evicting the plan's running pod %s: %v, want it evicted", planPod, err)
	}
	t.Logf("plan's pod %s evicted", planPod)

	got := e.waitTerminal([]string{apply, plan}, 2*time.Minute)
	for _, id := range []string{apply, plan} {
		d := got[id]
		if d.Status != api.StatusSucceeded || d.Attempt != 1 {
			t.Errorf("deployment %s (%s): %s in attempt %d (%s: %s), want succeeded in attempt 1", id, d.Operation, d.Status, d.Attempt, d.Reason, d.Message)
		}
		evs, err := e.admin.ListEvents(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if n := orchestratortest.EventCounts(evs); n[api.EventStarted] != 1 || n[api.EventFinished] != 1 {
			t.Errorf("deployment %s (%s): %d started and %d finished events, want one of each", id, d.Operation, n[api.EventStarted], n[api.EventFinished])
		}
	}
	pods := func(id string) []corev1.Pod {
		l, err := kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: kubeexec.LabelDeploymentID + "=" + id})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	if n := len(pods(apply)); n != 1 {
		t.Errorf("the apply ran in %d pods, want 1", n)
	}
	planPods := pods(plan)
	evicted := 0
	for _, p := range planPods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
				evicted++
			}
		}
	}
	// The evicted pod may already be gone (kwok deletes it once it is terminal).
	if len(planPods) < 1 || len(planPods) > 2 || evicted > 1 || len(planPods)-evicted != 1 {
		t.Errorf("the plan's pods: %d, %d of them evicted; want the evicted one (or none left) and one that ran the plan again", len(planPods), evicted)
	}
}

// evictions is the fault suite's drain: for a while, every running job pod is evicted through
// the Eviction API every half second, as `kubectl drain` and the cluster autoscaler's scale-down
// retry until a pod goes, while half the deployments are applies and half plans, with the
// chart's budget in place. Every apply must run undisturbed in one pod (each eviction refused
// with 429), every evicted plan must run again in a new pod of the same Job; so none is lost,
// none gets a second Job, and each has one started and one finished event. Pods still Pending
// are left alone: the API server lets any budget's Pending pods go, since they have not started
// (an apply evicted then fails with the reason evicted and may be queued again).
func evictions(t *testing.T) faultRow {
	n, span := scale(12, 40), time.Duration(scale(15, 45))*time.Second
	e := newEnv(t, evictionTemplate, scale(6, 20))
	ctx, kube := t.Context(), e.cluster.Client()
	pdb := jobsBudget(t, e.runnerID, e.ns)
	if _, err := kube.PolicyV1().PodDisruptionBudgets(e.ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ensureDisruptionController(t, e, pdb.Name)
	c := e.watchCreations()
	e.startAgent("agent-0", "--leader-elect=false")
	var ids []string
	for i := range n {
		op := []api.Operation{api.OperationApply, api.OperationPlan}[i%2]
		d, err := e.admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: e.runnerID, Operation: op,
			Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive(t)}}, StateKey: fmt.Sprintf("drain-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	refused, evicted := map[string]int{}, map[string]int{}
	for end := time.Now().Add(span); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		l, err := kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: kubeexec.LabelManagedBy + "=" + kubeexec.ManagedByValue})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Items {
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				continue
			}
			op := p.Labels[kubeexec.LabelOperation]
			err := kube.PolicyV1().Evictions(e.ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: e.ns}})
			switch {
			case err == nil:
				evicted[op]++
			case apierrors.IsTooManyRequests(err):
				refused[op]++
			case !apierrors.IsNotFound(err):
				t.Fatalf("evicting %s's pod %s: %v", op, p.Name, err)
			}
		}
	}
	r := e.outcome(ids, c, time.Now(), 3*time.Minute)
	// An apply's pod listed as running may have ended by the time its eviction arrives; the API
	// server lets a finished pod go. An eviction of a running one would have failed its Job
	// (the pod failure policy fails an apply on any disruption), and the apply would count as
	// lost above.
	r.Note = fmt.Sprintf("%s of evictions of every running job pod: %d plan pods evicted and run again; %d evictions of apply pods refused (429), %d let through as the pod had just finished",
		span, evicted["plan"], refused["apply"], evicted["apply"])
	if refused["apply"] == 0 || evicted["plan"] == 0 {
		t.Errorf("evictions: %d of apply pods refused and %d plan pods evicted; want some of each, or the fault was not exercised", refused["apply"], evicted["plan"])
	}
	return r
}

// runningPod waits until the Job of deployment id has a running pod and returns its name.
func runningPod(t *testing.T, e *env, id string) string {
	t.Helper()
	var name string
	testbed.WaitFor(t, time.Minute, "a running pod of deployment "+id, func() (bool, string) {
		l, err := e.cluster.Client().CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: kubeexec.LabelDeploymentID + "=" + id})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				name = p.Name
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods", len(l.Items))
	})
	return name
}

// jobsBudget renders the embedded chart for runner in jobsNamespace, as `helm template` would,
// and returns its PodDisruptionBudget of the jobs namespace.
func jobsBudget(t *testing.T, runner, jobsNamespace string) *policyv1.PodDisruptionBudget {
	t.Helper()
	c, err := agentchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "outpost-agent", "outpost-system"
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.34.0", Major: "1", Minor: "34"}
	rel, err := inst.RunWithContext(t.Context(), c, map[string]any{
		"apiUrl": "https://outpost.example.com", "orgId": testOrg, "runnerId": runner,
		"privateKey": map[string]any{"existingSecret": "runner-key"},
		"jobs":       map[string]any{"namespace": jobsNamespace},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range releaseutil.SplitManifests(rel.Manifest) {
		if !strings.Contains(m, "kind: PodDisruptionBudget") || !strings.Contains(m, "namespace: "+jobsNamespace) {
			continue
		}
		var pdb policyv1.PodDisruptionBudget
		if err := yaml.UnmarshalStrict([]byte(m), &pdb); err != nil {
			t.Fatal(err)
		}
		return &pdb
	}
	t.Fatalf("the chart rendered no PodDisruptionBudget in the jobs namespace %s", jobsNamespace)
	return nil
}

// ensureDisruptionController waits until the test bed's disruption controller has observed the
// budget: the Eviction API decides by its status.
func ensureDisruptionController(t *testing.T, e *env, budget string) {
	t.Helper()
	testbed.WaitFor(t, time.Minute, "the disruption controller to observe budget "+budget, func() (bool, string) {
		b, err := e.cluster.Client().PolicyV1().PodDisruptionBudgets(e.ns).Get(t.Context(), budget, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return b.Status.ObservedGeneration == b.Generation, fmt.Sprintf("observed generation %d of %d (a test bed started before it ran the disruption controller: stop it)",
			b.Status.ObservedGeneration, b.Generation)
	})
}
