package e2e

import (
	"context"
	"fmt"
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

const mergedTemplate = `{
  "metadata": {"labels": {"team": "infra"}, "annotations": {"testbed.outpost.dev/run-duration": "3s"}},
  "spec": {
    "containers": [
      {"name": "main", "image": "user/terraform:1", "env": [{"name": "TF_LOG", "value": "INFO"}],
       "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]},
      {"name": "sidecar", "image": "busybox:1", "args": ["sleep", "1"]}
    ],
    "volumes": [{"name": "cache", "emptyDir": {}}]
  }
}`

// TestJobSucceedsWithMergedTemplate follows one deployment from the orchestrator's queue to a
// Kubernetes Job built from the runner's template, to a succeeded deployment and a deleted Job.
func TestJobSucceedsWithMergedTemplate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mergedTemplate, 5)
	a := e.startAgent("agent-0", "--leader-elect=false")
	ids := e.deploy(1)
	started := time.Now()

	var jobName string
	testbed.WaitFor(t, 60*time.Second, "the agent to create the Job", func() (bool, string) {
		js := e.jobs()
		if len(js) == 1 {
			jobName = js[0].Name
		}
		return len(js) == 1, ""
	})
	job, err := e.cluster.Client().BatchV1().Jobs(e.ns).Get(context.Background(), jobName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := kubeexec.JobName(ids[0], 1); job.Name != want {
		t.Errorf("Job name %q, want deterministic %q", job.Name, want)
	}
	if job.Labels[kubeexec.LabelRunnerID] != "r1" || job.Annotations[kubeexec.AnnDeploymentID] != ids[0] || job.Labels[kubeexec.LabelAttempt] != "1" {
		t.Errorf("Job labels %v annotations %v", job.Labels, job.Annotations)
	}
	if *job.Spec.BackoffLimit != 0 || job.Spec.PodFailurePolicy == nil || *job.Spec.TTLSecondsAfterFinished != 7*86400 || *job.Spec.ActiveDeadlineSeconds != 600+120 {
		t.Errorf("Job spec: backoffLimit %v podFailurePolicy %v ttl %v deadline %v", *job.Spec.BackoffLimit, job.Spec.PodFailurePolicy, *job.Spec.TTLSecondsAfterFinished, *job.Spec.ActiveDeadlineSeconds)
	}
	pod := job.Spec.Template
	if pod.Labels["team"] != "infra" || pod.Labels[kubeexec.LabelManagedBy] != kubeexec.ManagedByValue {
		t.Errorf("pod labels %v", pod.Labels)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || pod.Spec.ServiceAccountName != "deployer" || *pod.Spec.TerminationGracePeriodSeconds < 120 {
		t.Errorf("restartPolicy %q serviceAccount %q grace %d", pod.Spec.RestartPolicy, pod.Spec.ServiceAccountName, *pod.Spec.TerminationGracePeriodSeconds)
	}
	byName := map[string]corev1.Container{}
	for _, c := range pod.Spec.Containers {
		byName[c.Name] = c
	}
	main, side := byName["main"], byName["sidecar"]
	if len(byName) != 2 || side.Image != "busybox:1" || !slices.Equal(side.Args, []string{"sleep", "1"}) {
		t.Errorf("containers %v; sidecar %+v", len(byName), side)
	}
	// The template's image wins; the job runner is copied in by the agent image's init container.
	if main.Image != "user/terraform:1" || !slices.Equal(main.Command, []string{"/outpost/bin/outpost-agent", "job"}) {
		t.Errorf("main image %q command %v", main.Image, main.Command)
	}
	if ics := pod.Spec.InitContainers; len(ics) != 1 || ics[0].Name != kubeexec.InjectContainer || ics[0].Image != "outpost/agent:e2e" {
		t.Errorf("init containers %+v", ics)
	}
	envs := map[string]string{}
	for _, ev := range main.Env {
		envs[ev.Name] = ev.Value
	}
	if envs["TF_LOG"] != "INFO" || envs["OUTPOST_API_URL"] != e.apiURL || envs["OUTPOST_JOB_TOKEN_FILE"] != "/var/run/outpost/job/token" || envs["OUTPOST_CLI"] != "" {
		t.Errorf("main env %v", envs)
	}
	mounts := map[string]string{}
	for _, m := range main.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["cache"] != "/cache" || mounts["outpost-job-token"] != "/var/run/outpost/job" {
		t.Errorf("main mounts %v", mounts)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	if vols["cache"].EmptyDir == nil || vols["outpost-job-token"].Secret == nil || vols["outpost-job-token"].Secret.SecretName != kubeexec.TokenSecretName(job.Name, job.Annotations[kubeexec.AnnTokenSHA256]) {
		t.Errorf("volumes %+v", vols)
	}
	sec, err := e.cluster.Client().CoreV1().Secrets(e.ns).Get(context.Background(), kubeexec.TokenSecretName(job.Name, job.Annotations[kubeexec.AnnTokenSHA256]), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(sec.Data["token"]), api.JobTokenPrefix) || len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != job.UID {
		t.Errorf("token Secret: token prefix ok=%v owners %+v", strings.HasPrefix(string(sec.Data["token"]), api.JobTokenPrefix), sec.OwnerReferences)
	}

	d := e.waitTerminal(ids, 90*time.Second)[ids[0]]
	if d.Status != api.StatusSucceeded || d.ExitCode == nil || *d.ExitCode != 0 || d.StartedAt == nil {
		t.Fatalf("deployment %+v", d)
	}
	t.Logf("enqueue → succeeded in %s", time.Since(started).Round(time.Millisecond))
	n, evs := e.finishedEvents(ids[0])
	// The timeline lists the claim and the Job's progress first; one started event, seq 1.
	first := slices.IndexFunc(evs, func(ev api.Event) bool { return ev.Type == api.EventStarted })
	if n != 1 || first < 0 || evs[first].Seq != 1 {
		t.Errorf("events %+v", evs)
	}
	// Acknowledged, the Job stays in the history (default 10 succeeded), without its token Secret.
	testbed.WaitFor(t, 30*time.Second, "the Job to be kept in the history after its finished event", func() (bool, string) {
		return len(e.jobs()) == 0 && len(e.history(kubeexec.HistorySucceeded)) == 1, ""
	})
	if _, err := e.cluster.Client().CoreV1().Secrets(e.ns).Get(context.Background(), sec.Name, metav1.GetOptions{}); err == nil {
		t.Errorf("the token Secret %s outlived the acknowledged finished event", sec.Name)
	}
	if a.logCount("finished event acknowledged") != 1 {
		t.Errorf("finished event acknowledged %d times", a.logCount("finished event acknowledged"))
	}
}

// TestJobFailsWithExitCode: main exits 2 → the deployment fails with exit code 2.
func TestJobFailsWithExitCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `{"metadata":{"annotations":{"testbed.outpost.dev/exit-code":"2"}},"spec":{"containers":[{"name":"main"}]}}`, 5)
	e.startAgent("agent-0", "--leader-elect=false")
	ids := e.deploy(1)
	d := e.waitTerminal(ids, 90*time.Second)[ids[0]]
	if d.Status != api.StatusFailed || d.ExitCode == nil || *d.ExitCode != 2 || d.Reason != "exit_code" {
		t.Fatalf("deployment status %q exit %v reason %q message %q", d.Status, d.ExitCode, d.Reason, d.Message)
	}
	if n, evs := e.finishedEvents(ids[0]); n != 1 {
		t.Errorf("finished events %d: %+v", n, evs)
	}
}

// TestStuckPendingFailsWithSchedulingReason: a pod nothing can schedule fails after the startup
// timeout with the scheduler's reason, instead of holding a slot until the job timeout.
func TestStuckPendingFailsWithSchedulingReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `{"spec":{"nodeSelector":{"outpost.dev/no-such-node":"true"},"containers":[{"name":"main"}]}}`, 5)
	e.startAgent("agent-0", "--leader-elect=false", "--startup-timeout", "6s")
	ids := e.deploy(1)
	began := time.Now()
	d := e.waitTerminal(ids, 90*time.Second)[ids[0]]
	if d.Status != api.StatusFailed || d.Reason != "unschedulable" ||
		(!strings.Contains(d.Message, "Unschedulable") && !strings.Contains(d.Message, "FailedScheduling")) {
		t.Fatalf("deployment status %q reason %q message %q", d.Status, d.Reason, d.Message)
	}
	if el := time.Since(began); el < 6*time.Second {
		t.Errorf("failed after %s, before the startup timeout", el)
	}
	t.Logf("failed after %s: %s", time.Since(began).Round(time.Millisecond), d.Message)
	testbed.WaitFor(t, 30*time.Second, "the Job to be kept as failed", func() (bool, string) {
		return len(e.jobs()) == 0 && len(e.history(kubeexec.HistoryFailed)) == 1, ""
	})
}

// TestCancelDirective: canceling a running deployment stops its pod, ends it canceled and
// deletes the Job.
func TestCancelDirective(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `{"metadata":{"annotations":{"testbed.outpost.dev/run-duration":"10m"}},"spec":{"containers":[{"name":"main"}]}}`, 5)
	e.startAgent("agent-0", "--leader-elect=false", "--cancel-grace", "5s")
	ids := e.deploy(1)
	testbed.WaitFor(t, 60*time.Second, "the deployment to run", func() (bool, string) {
		d, err := e.admin.GetDeployment(context.Background(), ids[0])
		if err != nil {
			return false, err.Error()
		}
		return d.Status == api.StatusRunning, string(d.Status)
	})
	jobName := kubeexec.JobName(ids[0], 1)
	if _, err := e.admin.CancelDeployment(context.Background(), ids[0]); err != nil {
		t.Fatal(err)
	}
	d := e.waitTerminal(ids, 60*time.Second)[ids[0]]
	if d.Status != api.StatusCanceled {
		t.Fatalf("deployment status %q reason %q", d.Status, d.Reason)
	}
	// A canceled run is kept in the history among the failed ones.
	testbed.WaitFor(t, 30*time.Second, "the Job to be kept as failed", func() (bool, string) {
		j, err := e.cluster.Client().BatchV1().Jobs(e.ns).Get(context.Background(), jobName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return j.Labels[kubeexec.LabelHistory] == kubeexec.HistoryFailed, fmt.Sprintf("labels %v", j.Labels)
	})
}
