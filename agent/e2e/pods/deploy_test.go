package pods

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// greeting needs no provider download (terraform_data is built into both CLIs), so it runs
// without a registry; its state goes through the agent's state backend.
var greeting = map[string]string{"main.tf": `
variable "greeting" {
  type    = string
  default = "hello from a real pod"
}

resource "terraform_data" "greeting" {
  input = var.greeting
}

output "greeting" {
  value = terraform_data.greeting.output
}
`}

// undeclared fails at plan: its resource reads a variable it does not declare.
var undeclared = map[string]string{"main.tf": `
resource "terraform_data" "broken" {
  input = var.undeclared
}
`}

// TestApplyPlanDestroy runs an apply, a plan and a destroy in real job pods, with OpenTofu from
// the chart's default job image and with Terraform from an image the runner's pod template names
// (which holds no Outpost binary: the job runner is copied in from the agent image). The state
// goes through the agent's state backend, reached through its Service.
//
// The OpenTofu run also keeps a history of one Job per outcome: after two more deployments that
// fail, the cluster holds the destroy's Job and one failed Job, and every deployment's log and
// result are still read at the orchestrator after its Job was deleted. Then the real `helm test`
// passes: the agent reached the orchestrator.
func TestApplyPlanDestroy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		template  bool   // main's image from the runner's pod template
		cli       string // what the log's header names
		cliBinary string
		// history runs failing deployments too, with jobs.history of one Job per outcome, and
		// helm test.
		history bool
	}{
		{name: "OpenTofu from the default job image", cli: "OpenTofu v", cliBinary: "tofu", history: true},
		{name: "Terraform from the pod template's image", template: true, cli: "Terraform v", cliBinary: "terraform"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			images(t, testbed.Shared(t))
			tpl := ""
			if tc.template {
				tpl = `{"metadata": {"labels": {"team": "infra"}}, "spec": {"containers": [{"name": "main", "image": "` + registryVar + "/" + pushed.terraform + `"}]}}`
			}
			values := ""
			if tc.history {
				values = "jobs: {history: {succeeded: 1, failed: 1}}"
			}
			e := newEnv(t, envOptions{podTemplate: tpl, values: values})
			wantImage := e.jobImage
			if tc.template {
				wantImage = e.terraformImage
			}

			apply, pod := e.deployWatchingPod(api.OperationApply, greeting, "app")
			if apply.d.Status != api.StatusSucceeded || apply.d.ExitCode == nil || *apply.d.ExitCode != 0 {
				t.Fatalf("apply: %s (%s: %s)\n%s", apply.d.Status, apply.d.Reason, apply.d.Message, apply.log)
			}
			if !strings.Contains(apply.log, "==> "+tc.cliBinary+" init") || !strings.Contains(apply.log, ", "+tc.cli) || !strings.Contains(apply.log, "Apply complete!") {
				t.Errorf("apply log does not show %s running:\n%s", tc.cli, apply.log)
			}
			if got := e.outputs(apply.d.ID)["greeting"]; got != `"hello from a real pod"` {
				t.Errorf("output greeting = %s", got)
			}
			e.checkJobPod(pod, wantImage)
			t.Logf("%s: enqueue to the CLI's first log line %s, apply done after %s", tc.cliBinary,
				apply.firstCLILine.Round(10*time.Millisecond), apply.took.Round(10*time.Millisecond))

			// The plan reads the state the apply wrote through the agent's state backend.
			plan := e.deploy(api.OperationPlan, greeting, "app")
			if plan.d.Status != api.StatusSucceeded || !strings.Contains(plan.log, "No changes.") {
				t.Fatalf("plan: %s (%s)\n%s", plan.d.Status, plan.d.Message, plan.log)
			}
			destroy := e.deploy(api.OperationDestroy, greeting, "app")
			if destroy.d.Status != api.StatusSucceeded || !strings.Contains(destroy.log, "Destroy complete!") || !strings.Contains(destroy.log, "1 destroyed") {
				t.Fatalf("destroy: %s (%s)\n%s", destroy.d.Status, destroy.d.Message, destroy.log)
			}
			if outs := e.outputs(destroy.d.ID); len(outs) != 0 {
				t.Errorf("outputs after the destroy: %v", outs)
			}
			t.Logf("%s: plan took %s, destroy %s", tc.cliBinary, plan.took.Round(10*time.Millisecond), destroy.took.Round(10*time.Millisecond))
			if tc.history {
				// Two failures at once: the second to finish expires the first one's Job.
				start := time.Now()
				bad := []*api.Deployment{e.enqueue(api.OperationApply, undeclared, "bad-1"), e.enqueue(api.OperationApply, undeclared, "bad-2")}
				runs := []run{apply, plan, destroy, e.follow(bad[0].ID, start, 5*time.Minute), e.follow(bad[1].ID, start, 5*time.Minute)}
				e.checkHistory(runs, destroy)
				if helm := helmPath(t); helm != "" {
					out, took, err := e.helmTest(helm)
					// One suite per hook object (ServiceAccount, Role, RoleBinding, the pod).
					suites := regexp.MustCompile(`(?m)^TEST SUITE:\s+outpost-agent-test-connection\n.*\n.*\nPhase:\s+(\w+)$`).FindAllStringSubmatch(out, -1)
					if err != nil || len(suites) != 4 || slices.ContainsFunc(suites, func(m []string) bool { return m[1] != "Succeeded" }) {
						t.Fatalf("helm test with a connected agent: %v\n%s", err, out)
					}
					t.Logf("helm test passed in %s", took.Round(10*time.Millisecond))
				} else {
					t.Log("helm test not run: $OUTPOST_HELM is not set (make test sets it)")
				}
			}
			e.noLeftovers()
		})
	}
}

// checkHistory checks a history of one Job per outcome after runs: the cluster keeps the Job of
// keep (the last to succeed) and one failed Job, and no other; the orchestrator still serves
// every run's result and whole log, its Job deleted or not.
func (e *env) checkHistory(runs []run, keep run) {
	e.t.Helper()
	var failed []string
	for _, r := range runs {
		if r.d.Status == api.StatusFailed {
			failed = append(failed, kubeexec.JobName(r.d.ID, 1))
			if !strings.Contains(r.log, "Reference to undeclared input variable") {
				e.t.Errorf("failed deployment %s: its log lacks the error:\n%s", r.d.ID, r.log)
			}
		}
	}
	if len(failed) != 2 {
		e.t.Fatalf("%d deployments failed, want the 2 broken ones", len(failed))
	}
	kept := map[string][]string{}
	testbed.WaitFor(e.t, 60*time.Second, "the history to hold one succeeded and one failed Job", func() (bool, string) {
		jobs, err := e.c.Client().BatchV1().Jobs(e.jobsNS).List(context.Background(), metav1.ListOptions{LabelSelector: kubeexec.LabelManagedBy + "=" + kubeexec.ManagedByValue})
		if err != nil {
			return false, err.Error()
		}
		kept = map[string][]string{}
		for _, j := range jobs.Items {
			outcome := j.Labels[kubeexec.LabelHistory]
			kept[outcome] = append(kept[outcome], j.Name)
		}
		return len(jobs.Items) == 2 && len(kept[kubeexec.HistorySucceeded]) == 1 && len(kept[kubeexec.HistoryFailed]) == 1, fmt.Sprintf("Jobs by history label: %v", kept)
	})
	if got := kept[kubeexec.HistorySucceeded][0]; got != kubeexec.JobName(keep.d.ID, 1) {
		e.t.Errorf("kept succeeded Job %s, want the last one to succeed, %s", got, kubeexec.JobName(keep.d.ID, 1))
	}
	if got := kept[kubeexec.HistoryFailed][0]; !slices.Contains(failed, got) {
		e.t.Errorf("kept failed Job %s is none of the failed deployments' %v", got, failed)
	}
	for _, r := range runs {
		d, err := e.admin.GetDeployment(context.Background(), r.d.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		chunk, err := e.admin.GetLogs(context.Background(), r.d.ID, 0, 4<<20)
		if err != nil {
			e.t.Fatal(err)
		}
		if d.Status != r.d.Status || !chunk.Complete || string(chunk.Data) != r.log || len(r.log) == 0 {
			e.t.Errorf("deployment %s after its Job left the history: %s (was %s), log of %d bytes complete %v (was %d bytes)",
				r.d.ID, d.Status, r.d.Status, len(chunk.Data), chunk.Complete, len(r.log))
		}
	}
}

// deployWatchingPod is deploy that also returns the last state seen of the deployment's job pod
// (the agent deletes the Job once the orchestrator has the finished event).
func (e *env) deployWatchingPod(op api.Operation, files map[string]string, stateKey string) (run, *corev1.Pod) {
	e.t.Helper()
	start := time.Now()
	d := e.enqueue(op, files, stateKey)
	w := e.watchPods(d.ID)
	r := e.follow(d.ID, start, 5*time.Minute)
	w.stop()
	return r, w.last
}

// podWatch records the job pods of one deployment while it runs.
type podWatch struct {
	last  *corev1.Pod       // the newest state seen of the newest pod
	names map[string]bool   // every pod seen
	nodes map[string]string // the node of every pod seen that was scheduled, by pod name
	stop  func()            // ends the watch; last, names and nodes are final after it
}

func (e *env) watchPods(id string) *podWatch {
	w := &podWatch{names: map[string]bool{}, nodes: map[string]string{}}
	done, quit := make(chan struct{}), make(chan struct{})
	w.stop = func() { close(quit); <-done }
	go func() {
		defer close(done)
		sel := metav1.ListOptions{LabelSelector: kubeexec.LabelDeploymentID + "=" + id}
		for {
			if pods, err := e.c.Client().CoreV1().Pods(e.jobsNS).List(context.Background(), sel); err == nil {
				for i := range pods.Items {
					p := pods.Items[i]
					w.names[p.Name] = true
					if p.Spec.NodeName != "" {
						w.nodes[p.Name] = p.Spec.NodeName
					}
					if w.last == nil || !p.CreationTimestamp.Before(&w.last.CreationTimestamp) {
						w.last = &p
					}
				}
			}
			select {
			case <-quit:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

// checkJobPod checks that the job pod ran main from wantImage with the job runner the injecting
// init container copied in from the agent image.
func (e *env) checkJobPod(pod *corev1.Pod, wantImage string) {
	t := e.t
	t.Helper()
	if pod == nil {
		t.Fatal("never saw the deployment's job pod")
	}
	var main *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "main" {
			main = &pod.Spec.Containers[i]
		}
	}
	if main == nil || main.Image != wantImage || !slices.Equal(main.Command, kubeexec.JobCommand) {
		t.Errorf("main container %+v; want image %s running %v", main, wantImage, kubeexec.JobCommand)
	}
	ics := pod.Spec.InitContainers
	if len(ics) == 0 || ics[0].Name != kubeexec.InjectContainer || ics[0].Image != e.agentImage {
		t.Fatalf("init containers %+v; want %s from %s first", ics, kubeexec.InjectContainer, e.agentImage)
	}
	st := pod.Status.InitContainerStatuses
	if len(st) == 0 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 0 {
		t.Errorf("the injecting init container did not complete: %+v", st)
	}
}
