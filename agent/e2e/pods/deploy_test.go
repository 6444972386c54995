package pods

import (
	"context"
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

// TestApplyPlanDestroy runs an apply, a plan and a destroy in real job pods, with OpenTofu from
// the chart's default job image and with Terraform from an image the runner's pod template names
// (which holds no Outpost binary: the job runner is copied in from the agent image). The state
// goes through the agent's state backend, reached through its Service.
func TestApplyPlanDestroy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		template  bool   // main's image from the runner's pod template
		cli       string // what the log's header names
		cliBinary string
	}{
		{name: "OpenTofu from the default job image", cli: "OpenTofu v", cliBinary: "tofu"},
		{name: "Terraform from the pod template's image", template: true, cli: "Terraform v", cliBinary: "terraform"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			images(t, testbed.Shared(t))
			wantImage, tpl := jobImage, ""
			if tc.template {
				wantImage = terraformImage
				tpl = `{"metadata": {"labels": {"team": "infra"}}, "spec": {"containers": [{"name": "main", "image": "` + terraformImage + `"}]}}`
			}
			e := newEnv(t, envOptions{podTemplate: tpl})

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
			checkJobPod(t, pod, wantImage)
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
			e.noLeftovers()
		})
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
	last  *corev1.Pod     // the newest state seen of the newest pod
	names map[string]bool // every pod seen
	stop  func()          // ends the watch; last and names are final after it
}

func (e *env) watchPods(id string) *podWatch {
	w := &podWatch{names: map[string]bool{}}
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
func checkJobPod(t *testing.T, pod *corev1.Pod, wantImage string) {
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
	if len(ics) == 0 || ics[0].Name != kubeexec.InjectContainer || ics[0].Image != agentImage {
		t.Fatalf("init containers %+v; want %s from %s first", ics, kubeexec.InjectContainer, agentImage)
	}
	st := pod.Status.InitContainerStatuses
	if len(st) == 0 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 0 {
		t.Errorf("the injecting init container did not complete: %+v", st)
	}
}
