package kubernetes

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// disruptedJob is a sealed apply Job the pod failure policy failed for a disruption of its pod,
// and its pod (Failed, with the DisruptionTarget condition of the given reason), not yet added
// to the executor's cache.
func disruptedJob(t testing.TB, e *Executor, reason string) (*batchv1.Job, *corev1.Pod) {
	t.Helper()
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "outpost-dep-1-1", Namespace: "jobs", UID: types.UID("job-uid"),
		CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour)),
		Labels:            map[string]string{LabelManagedBy: ManagedByValue, LabelRunnerID: "r1", LabelDeploymentID: "dep-1", LabelAttempt: "1"},
		Annotations: map[string]string{AnnDeploymentID: "dep-1", AnnFencing: "1", AnnOperation: string(api.OperationApply),
			AnnStateKey: "prod", AnnClaimedAt: time.Now().UTC().Format(time.RFC3339Nano)}},
		Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue,
			Reason:  batchv1.JobReasonPodFailurePolicy,
			Message: "Pod jobs/outpost-dep-1-1-abcde has condition DisruptionTarget matching FailJob rule at index 0"}}}}
	e.seal(j)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "outpost-dep-1-1-abcde", Namespace: "jobs",
		Labels:          map[string]string{"batch.kubernetes.io/job-name": j.Name},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: new(true)}}},
		Spec: corev1.PodSpec{NodeName: "node-b"},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, Conditions: []corev1.PodCondition{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason}}}}
	return j, p
}

// TestStatusNodeLost: an apply whose pod Kubernetes gave up with its node ends failed with the
// reason node_lost, saying the run may have partly happened, whether the pod is still there or
// only the Job's record of it (AnnNodeLost, written by markNodeLost while the pod showed it); a
// pod evicted by a drain stays "evicted", also once the pod is gone (the Job's condition names
// the disruption; without that the reason was "unknown").
func TestStatusNodeLost(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		podKept      bool
		annotate     bool
		// seen: the pod informer saw the pod with its reason before it went, and no tick of
		// markNodeLost came between (the race that made a lost node read "evicted").
		seen bool
		want api.Reason
	}{
		{"pod failed by the pod garbage collector", "DeletionByPodGC", true, false, false, executor.ReasonNodeLost},
		{"pod gone, the Job recorded the lost node", "DeletionByTaintManager", false, true, false, executor.ReasonNodeLost},
		{"pod gone before the Job recorded it, seen by the pod informer", "DeletionByTaintManager", false, false, true, executor.ReasonNodeLost},
		{"pod evicted by a drain", "EvictionByEvictionAPI", true, false, false, executor.ReasonEvicted},
		{"pod evicted and gone", "EvictionByEvictionAPI", false, false, false, executor.ReasonEvicted},
		{"pod evicted and gone, seen by the pod informer", "EvictionByEvictionAPI", false, false, true, executor.ReasonEvicted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			e := New(Options{Client: client, PodOptions: opts, Logger: slog.New(slog.DiscardHandler)})
			j, p := disruptedJob(t, e, tc.reason)
			if err := e.informers[1].GetIndexer().Add(p); err != nil {
				t.Fatal(err)
			}
			if tc.annotate {
				j.Status.Conditions = nil // still running while the pod shows the lost node
				if _, err := client.BatchV1().Jobs(j.Namespace).Create(t.Context(), j, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				if err := e.informers[0].GetIndexer().Add(j); err != nil {
					t.Fatal(err)
				}
				p.Status.Phase = corev1.PodRunning
				e.markNodeLost(t.Context())
				got, err := client.BatchV1().Jobs(j.Namespace).Get(t.Context(), j.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if v := got.Annotations[AnnNodeLost]; v != "node-b: DeletionByTaintManager" {
					t.Fatalf("annotation %s = %q, want the node and the reason", AnnNodeLost, v)
				}
				j.Annotations[AnnNodeLost] = got.Annotations[AnnNodeLost]
				j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue,
					Reason: batchv1.JobReasonPodFailurePolicy, Message: "Pod jobs/x has condition DisruptionTarget matching FailJob rule at index 0"}}
			}
			if tc.seen {
				p.Status.Phase = corev1.PodRunning // the lost node's kubelet never says otherwise
				e.noteLostNode(p)
			}
			if !tc.podKept {
				if err := e.informers[1].GetIndexer().Delete(p); err != nil {
					t.Fatal(err)
				}
			}
			s, ok := e.status(j)
			if !ok {
				t.Fatal("the agent's sealed Job was not taken for an attempt")
			}
			if s.Status != api.StatusFailed || s.Reason != tc.want {
				t.Fatalf("status %s, reason %q (%s); want failed, %q", s.Status, s.Reason, s.Message, tc.want)
			}
			if tc.want == executor.ReasonNodeLost && (!strings.Contains(s.Message, "node-b") || !strings.Contains(s.Message, "may have partly happened")) {
				t.Errorf("message %q, want the lost node and that the run may have partly happened", s.Message)
			}
		})
	}
}

// TestWatchdogTimesTheNewestPod: a Job older than the start-up timeout whose pod was replaced a
// moment ago (a plan's pod evicted, the old one gone) is not failed for a slow start: the new
// pod has a start-up timeout of its own.
func TestWatchdogTimesTheNewestPod(t *testing.T) {
	client := fake.NewClientset()
	e := New(Options{Client: client, PodOptions: opts, StartupTimeout: metav1.Duration{Duration: time.Minute}, Logger: slog.New(slog.DiscardHandler)})
	j, p := disruptedJob(t, e, "")
	j.Status.Conditions = nil
	p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	p.CreationTimestamp = metav1.NewTime(time.Now())
	if _, err := client.BatchV1().Jobs(j.Namespace).Create(t.Context(), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = e.informers[0].GetIndexer().Add(j)
	_ = e.informers[1].GetIndexer().Add(p)
	e.watchdog(t.Context())
	got, err := client.BatchV1().Jobs(j.Namespace).Get(t.Context(), j.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f := got.Annotations[AnnStartupError]; f != "" {
		t.Fatalf("the Job was failed for its start-up (%s) although its pod was created just now", f)
	}
}

// TestWatchdogLeavesAJobAtItsEnd: a Job older than the start-up timeout whose pod is gone
// because the Job is ending is not failed for a slow start. At a deadline the Job controller
// deletes the pod before it writes the Failed condition; the watchdog took that moment for a pod
// that was never created, and the deployment ended startup_timeout instead of
// deadline_exceeded (TestReasonsOnRealPods, once under load). A Job that never had a pod is
// still failed.
func TestWatchdogLeavesAJobAtItsEnd(t *testing.T) {
	longAgo := metav1.NewTime(time.Now().Add(-10 * time.Minute))
	for _, tc := range []struct {
		name   string
		status batchv1.JobStatus
		spec   func(*batchv1.JobSpec)
		fail   bool
	}{
		{name: "never a pod", fail: true},
		{name: "past activeDeadlineSeconds", status: batchv1.JobStatus{StartTime: &longAgo},
			spec: func(s *batchv1.JobSpec) { s.ActiveDeadlineSeconds = new(int64(70)) }},
		{name: "deadline not reached", status: batchv1.JobStatus{StartTime: &longAgo}, fail: true,
			spec: func(s *batchv1.JobSpec) { s.ActiveDeadlineSeconds = new(int64(3600)) }},
		{name: "FailureTarget", status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded}}}},
		{name: "a pod failed", status: batchv1.JobStatus{Failed: 1}},
		{name: "a pod terminating", status: batchv1.JobStatus{Terminating: new(int32(1))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			e := New(Options{Client: client, PodOptions: opts, StartupTimeout: metav1.Duration{Duration: time.Minute}, Logger: slog.New(slog.DiscardHandler)})
			j, _ := disruptedJob(t, e, "")
			j.Status = tc.status
			if tc.spec != nil {
				tc.spec(&j.Spec)
			}
			if _, err := client.BatchV1().Jobs(j.Namespace).Create(t.Context(), j, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			_ = e.informers[0].GetIndexer().Add(j)
			e.watchdog(t.Context())
			got, err := client.BatchV1().Jobs(j.Namespace).Get(t.Context(), j.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if failed := got.Annotations[AnnStartupError] != ""; failed != tc.fail {
				t.Fatalf("failed for its start-up: %v (%s), want %v", failed, got.Annotations[AnnStartupError], tc.fail)
			}
		})
	}
}

// TestStatusSucceededFromThePod: an attempt whose pod succeeded is reported succeeded at once,
// before the Job controller marks the Job Complete (under load that takes it tens of seconds);
// a pod that failed is not taken for the Job's end, since the pod failure policy may run
// another.
func TestStatusSucceededFromThePod(t *testing.T) {
	for _, tc := range []struct {
		name  string
		phase corev1.PodPhase
		exit  int32
		want  api.Status
	}{{"pod succeeded", corev1.PodSucceeded, 0, api.StatusSucceeded}, {"pod failed", corev1.PodFailed, 1, api.StatusRunning}} {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Options{Client: fake.NewClientset(), PodOptions: opts, Logger: slog.New(slog.DiscardHandler)})
			j, p := disruptedJob(t, e, "")
			j.Status.Conditions = nil // the Job controller has not got to it yet
			ended := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
			p.Status = corev1.PodStatus{Phase: tc.phase, ContainerStatuses: []corev1.ContainerStatus{{Name: "main",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: tc.exit, StartedAt: metav1.NewTime(ended.Add(-time.Minute)), FinishedAt: ended}}}}}
			if err := e.informers[1].GetIndexer().Add(p); err != nil {
				t.Fatal(err)
			}
			s, ok := e.status(j)
			if !ok {
				t.Fatal("the agent's sealed Job was not taken for an attempt")
			}
			if s.Status != tc.want {
				t.Fatalf("status %s (%s), want %s", s.Status, s.Message, tc.want)
			}
			if tc.want == api.StatusSucceeded && (!s.FinishedAt.Equal(ended.Time) || s.ExitCode == nil || *s.ExitCode != 0) {
				t.Errorf("finished at %v with exit code %v, want the container's end %v and 0", s.FinishedAt, s.ExitCode, ended.Time)
			}
		})
	}
}
