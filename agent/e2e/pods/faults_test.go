package pods

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// slow is a configuration whose apply runs a shell command for the given seconds (local-exec,
// with the job image's dash and coreutils), so a test can act while the CLI runs. The command
// prints slowStarts and slowEnds, computed so that the command line the CLI logs holds neither.
const (
	slowStarts = "slow step 2 starts"
	slowEnds   = "slow step 4 ends"
)

func slow(seconds int) map[string]string {
	return map[string]string{"main.tf": fmt.Sprintf(`
resource "terraform_data" "slow" {
  input = %d

  provisioner "local-exec" {
    command = "echo slow step $((1+1)) starts; sleep %d; echo slow step $((2+2)) ends"
  }
}

output "seconds" {
  value = terraform_data.slow.output
}
`, seconds, seconds)}
}

// TestAgentPodDeletedMidDeployment deletes the leader's pod while the CLI runs in its job pod.
// The other agent pod takes over the leader Lease, re-adopts the Job (its job token read back
// from the token Secret), serves the state write at the end through the Service, and the
// deployment finishes once: one attempt, one job pod, one finished event.
func TestAgentPodDeletedMidDeployment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{replicas: 2})
	testbed.WaitFor(t, 2*time.Minute, "both agent pods to be ready", func() (bool, string) {
		ready := 0
		for _, p := range e.agentPods() {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready++
				}
			}
		}
		return ready == 2, fmt.Sprintf("%d ready", ready)
	})

	start := time.Now()
	d := e.enqueue(api.OperationApply, slow(20), "failover")
	pods := e.watchPods(d.ID)
	e.waitLog(d.ID, slowStarts, 3*time.Minute)
	leader := e.leader()
	if err := e.c.Client().CoreV1().Pods(e.agentNS).Delete(t.Context(), leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	testbed.WaitFor(t, 2*time.Minute, "another agent pod to take the leader Lease", func() (bool, string) {
		h := e.leader()
		return h != "" && h != leader, "holder " + h
	})
	t.Logf("leader %s deleted; %s leads %s later", leader, e.leader(), time.Since(deleted).Round(10*time.Millisecond))

	r := e.follow(d.ID, start, 4*time.Minute)
	pods.stop()
	if r.d.Status != api.StatusSucceeded || r.d.Attempt != 1 {
		t.Fatalf("deployment %s, attempt %d (%s: %s); want succeeded in attempt 1\n%s", r.d.Status, r.d.Attempt, r.d.Reason, r.d.Message, r.log)
	}
	if n := e.finishedEvents(d.ID); n != 1 {
		t.Errorf("%d finished events, want 1", n)
	}
	// The new leader restates the timeline the old one sent: each step is kept once.
	e.checkTimeline(d.ID, api.StepClaimed, api.StepJobCreated, api.StepPodScheduled, api.StepPodInitialized, api.StepCLIStarted, api.StepFinished)
	if len(pods.names) != 1 {
		t.Errorf("job pods %v, want one: the deployment must run once", pods.names)
	}
	if !strings.Contains(r.log, slowEnds) || strings.Count(r.log, slowStarts) != 1 || !strings.Contains(r.log, "Apply complete!") {
		t.Errorf("log:\n%s", r.log)
	}
	if got := e.outputs(d.ID)["seconds"]; got != "20" {
		t.Errorf("output seconds = %s, want 20 (the state write went through the new leader)", got)
	}
	e.noLeftovers()
}

// leader is the pod holding the agent's leader Lease ("" when none does).
func (e *env) leader() string {
	e.t.Helper()
	l, err := e.c.Client().CoordinationV1().Leases(e.agentNS).Get(context.Background(), releaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// TestCancel cancels an apply while its CLI runs: the job pod gets SIGTERM, the job runner
// interrupts the CLI, which stops its command, saves the state and releases the lock; the
// deployment ends canceled and nothing is left. A plan of the same state afterwards shows the
// lock was released.
func TestCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	start := time.Now()
	d := e.enqueue(api.OperationApply, slow(600), "canceled")
	e.waitLog(d.ID, slowStarts, 3*time.Minute)
	if _, err := e.admin.CancelDeployment(t.Context(), d.ID); err != nil {
		t.Fatal(err)
	}
	canceled := time.Now()
	r := e.follow(d.ID, start, 3*time.Minute)
	if r.d.Status != api.StatusCanceled {
		t.Fatalf("deployment %s (%s: %s), want canceled\n%s", r.d.Status, r.d.Reason, r.d.Message, r.log)
	}
	if !strings.Contains(r.log, "==> stopping") || !strings.Contains(r.log, "Interrupt received") || strings.Contains(r.log, slowEnds) {
		t.Errorf("the CLI was not interrupted gracefully:\n%s", r.log)
	}
	e.checkReason(d.ID, api.ReasonCanceled, "JobSuspended")
	t.Logf("canceled %s after the cancel request", time.Since(canceled).Round(10*time.Millisecond))
	e.noLeftovers()

	plan := e.deploy(api.OperationPlan, slow(600), "canceled")
	if plan.d.Status != api.StatusSucceeded || strings.Contains(plan.log, "Error acquiring the state lock") {
		t.Fatalf("plan after the cancel: %s (%s)\n%s", plan.d.Status, plan.d.Message, plan.log)
	}
}
