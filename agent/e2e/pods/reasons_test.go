package pods

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// allocates is a configuration whose plan builds a list of a million strings: a few hundred MiB
// in the CLI, far beyond a small memory limit.
var allocates = map[string]string{"main.tf": `
locals {
  big = flatten([for i in range(1024) : [for j in range(1024) : "${i}-${j}-padding-padding-padding-padding"]])
}

output "n" {
  value = length(local.big)
}
`}

// TestReasonsOnRealPods: each way Kubernetes keeps or takes a deployment's pod from it reaches
// the API as a typed reason with the cluster's own words beside it, in the events and on the
// deployment, and counts once in outpost_orchestrator_deployment_reasons_total of the runner:
//   - a deadline: the deployment's timeout ran out (the Job's activeDeadlineSeconds);
//   - OOMKilled: main's memory limit is far below what the plan allocates; the detail names the
//     limit;
//   - unschedulable: a nodeSelector no node matches; the deployment says why it waits while it
//     waits (the scheduler's message), then fails at the startup timeout with the same words.
//
// The runner's pod template changes between the enqueues (each claim takes the template as it is
// then), so the three run side by side with one agent.
func TestReasonsOnRealPods(t *testing.T) {
	t.Parallel()
	// The deadline is the timeout plus the cancel grace; a short grace keeps the test short.
	e := newEnv(t, envOptions{values: "extraEnv: [{name: OUTPOST_CANCEL_GRACE, value: 10s}]"})
	ctx := t.Context()
	start := time.Now()

	deadline, err := e.admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: runnerID, Operation: api.OperationApply, StateKey: "deadline", TimeoutSeconds: 60,
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, slow(600))}}})
	if err != nil {
		t.Fatal(err)
	}
	e.waitClaimed(deadline.ID)

	e.setPodTemplate(`{"spec": {"containers": [{"name": "main", "resources": {"requests": {"memory": "96Mi"}, "limits": {"memory": "96Mi"}}}]}}`)
	oom := e.enqueue(api.OperationPlan, allocates, "oom")
	e.waitClaimed(oom.ID)

	e.setPodTemplate(`{"spec": {"nodeSelector": {"outpost.dev/test-no-such-node": "true"}, "containers": [{"name": "main"}]}}`)
	unschedulable := e.enqueue(api.OperationPlan, greeting, "unschedulable")
	// While it waits, the deployment says why, in the scheduler's words.
	selector := "didn't match Pod's node affinity/selector"
	testbed.WaitFor(t, startupTimeout, "the unschedulable deployment to say why it waits", func() (bool, string) {
		d, err := e.admin.GetDeployment(ctx, unschedulable.ID)
		if err != nil {
			return false, err.Error()
		}
		return d.Status == api.StatusClaimed && d.Reason == api.ReasonUnschedulable && strings.Contains(d.Detail, selector),
			fmt.Sprintf("%s, reason %q, detail %q", d.Status, d.Reason, d.Detail)
	})
	t.Logf("waiting for a node after %s", time.Since(start).Round(100*time.Millisecond))

	for _, tc := range []struct {
		name   string
		id     string
		reason api.Reason
		detail []string
	}{
		{"unschedulable", unschedulable.ID, api.ReasonUnschedulable, []string{"0/1 nodes are available", selector}},
		{"OOMKilled", oom.ID, api.ReasonOOMKilled, []string{"OOMKilled", "memory limit 96Mi"}},
		{"deadline", deadline.ID, api.ReasonDeadlineExceeded, []string{"DeadlineExceeded", "active longer than specified deadline"}},
	} {
		r := e.follow(tc.id, start, 5*time.Minute)
		if r.d.Status != api.StatusFailed || r.d.Reason != tc.reason {
			t.Errorf("%s: deployment %s (reason %q: %s), want failed with reason %s\n%s", tc.name, r.d.Status, r.d.Reason, r.d.Message, tc.reason, r.log)
			continue
		}
		e.checkReason(tc.id, tc.reason, tc.detail...)
		t.Logf("%s after %s: %s (cluster: %s)", tc.name, r.took.Round(time.Second), r.d.Message, r.d.Detail)
	}
	// The pod that ran has the whole timeline, in order, its node named.
	e.checkTimeline(oom.ID, api.StepClaimed, api.StepJobCreated, api.StepPodScheduled, api.StepPodInitialized, api.StepCLIStarted, api.StepFinished)
	e.noLeftovers()
}

// setPodTemplate changes the runner's job.pod_template (JSON); attempts claimed from then on get
// it.
func (e *env) setPodTemplate(template string) {
	e.t.Helper()
	r, err := e.admin.GetRunner(e.t.Context(), runnerID)
	if err != nil {
		e.t.Fatal(err)
	}
	job := r.Job
	job.PodTemplate = strings.ReplaceAll(template, registryVar, e.registry)
	if _, err := e.admin.UpdateRunner(e.t.Context(), api.RunnerInput{ID: r.ID, PublicKeys: r.PublicKeys, Job: job, StateStorageID: r.StateStorageID,
		MaxConcurrency: r.MaxConcurrency, JobTimeoutSeconds: r.JobTimeoutSeconds}); err != nil {
		e.t.Fatal(err)
	}
}

// waitClaimed waits until the agent has claimed a deployment (so it has its placement).
func (e *env) waitClaimed(id string) {
	e.t.Helper()
	testbed.WaitFor(e.t, 2*time.Minute, id+" to be claimed", func() (bool, string) {
		d, err := e.admin.GetDeployment(context.Background(), id)
		if err != nil {
			return false, err.Error()
		}
		return d.Status != api.StatusQueued, string(d.Status)
	})
}

// checkReason checks that a failed or canceled deployment's reason reached the API and the
// metrics: an event (waiting or finished) with the reason and the cluster's words holding each of
// detail, the deployment's detail holding the first, and the runner's count of the reason at one.
func (e *env) checkReason(id string, reason api.Reason, detail ...string) {
	e.t.Helper()
	evs, err := e.admin.ListEvents(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		if ev.Reason != reason {
			continue
		}
		found = true
		for _, w := range detail {
			if !strings.Contains(ev.Detail, w) {
				e.t.Errorf("%s: %s event with reason %s: detail %q lacks %q", id, ev.Step, reason, ev.Detail, w)
			}
		}
	}
	if !found {
		e.t.Errorf("%s: no event with reason %s: %+v", id, reason, evs)
	}
	d, err := e.admin.GetDeployment(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	if d.Reason != reason || (len(detail) > 0 && !strings.Contains(d.Detail, detail[0])) {
		e.t.Errorf("%s: deployment reason %q, detail %q; want %s with %q", id, d.Reason, d.Detail, reason, detail)
	}
	// The handler counts the reason once the store has committed the event, so the deployment
	// can show it a moment before the metric does: wait for the count, then check it is one.
	var n float64
	testbed.WaitFor(e.t, 10*time.Second, "outpost_orchestrator_deployment_reasons_total of "+string(reason), func() (bool, string) {
		n = e.reasonCount(reason)
		return n >= 1, fmt.Sprint(n)
	})
	if n != 1 {
		e.t.Errorf("outpost_orchestrator_deployment_reasons_total of %s: %v, want 1", reason, n)
	}
}

// checkTimeline checks that a deployment's events are the steps given, in that order, and that
// the pod_scheduled step names the node.
func (e *env) checkTimeline(id string, want ...api.Step) {
	e.t.Helper()
	evs, err := e.admin.ListEvents(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	var got []api.Step
	for _, ev := range evs {
		if ev.Step == api.StepWaiting {
			continue
		}
		got = append(got, ev.Step)
		if ev.Step == api.StepPodScheduled && ev.Node == "" {
			e.t.Errorf("%s: pod_scheduled without its node: %+v", id, ev)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Errorf("%s: timeline %v, want %v (events %+v)", id, got, want, evs)
	}
}

// reasonCount reads the runner's count of a reason from the orchestrator's /metrics.
func (e *env) reasonCount(reason api.Reason) float64 {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), http.MethodGet, e.orch.URL+"/metrics", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	series := fmt.Sprintf(`outpost_orchestrator_deployment_reasons_total{org=%q,reason=%q,runner=%q} `, org, reason, runnerID)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				e.t.Fatal(err)
			}
			return v
		}
	}
	return 0
}
