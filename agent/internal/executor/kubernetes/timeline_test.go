package kubernetes

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// TestPodWaitingKeepsTheClustersWords: each way a pod waits that its status shows is classified
// into a typed reason, with the cluster's words verbatim in Detail and Outpost's advice in
// Message; a pod that waits for nothing named gives none.
func TestPodWaitingKeepsTheClustersWords(t *testing.T) {
	scheduler := "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
	registry := `failed to pull and unpack image "registry.example/acme/nope:1": 401 Unauthorized`
	for _, tc := range []struct {
		name   string
		status corev1.PodStatus
		reason api.Reason
		detail string
	}{
		{"no node matches", corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: scheduler}}}, api.ReasonUnschedulable, scheduler},
		{"image refused", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "main",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: registry}}}}},
			api.ReasonImagePull, "ErrImagePull: " + registry},
		{"secret missing", corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{Name: "outpost-inject",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `secret "x" not found`}}}}},
			api.ReasonStartFailed, `CreateContainerConfigError: secret "x" not found`},
		{"still creating", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "main",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example/acme/nope:1"}}}, Status: tc.status}
			w := podWaiting(p)
			if tc.reason == "" {
				if w != nil {
					t.Fatalf("waiting %+v, want none", w)
				}
				return
			}
			if w == nil || w.Reason != tc.reason || w.Detail != tc.detail || w.Message == "" {
				t.Fatalf("waiting %+v, want reason %s with detail %q", w, tc.reason, tc.detail)
			}
		})
	}
}

// TestFailureReasonNamesTheOOMLimitAndDeadline: an OOM kill's detail names main's memory limit,
// a deadline's the Job controller's condition.
func TestFailureReasonNamesTheOOMLimitAndDeadline(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")}}}}}}
	main := &corev1.ContainerStatus{Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}
	r, msg, detail := failureReason(batchv1.JobReasonPodFailurePolicy, "", p, main)
	if r != api.ReasonOOMKilled || detail != "OOMKilled: exit code 137, memory limit 32Mi" || msg == "" {
		t.Errorf("OOM: %s, %q, %q", r, msg, detail)
	}
	r, _, detail = failureReason(batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline", nil, nil)
	if r != api.ReasonDeadlineExceeded || detail != "DeadlineExceeded: Job was active longer than specified deadline" {
		t.Errorf("deadline: %s, %q", r, detail)
	}
}

// TestTimelineStepsFromTheOldestPod: the Job's creation, then the first pod's scheduling (with
// its node) and initialization; a pod not yet bound adds nothing.
func TestTimelineStepsFromTheOldestPod(t *testing.T) {
	created := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	bound := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "node-1"}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(created.Add(time.Second))},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(created.Add(3 * time.Second))}}}}
	pending := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse}}}}
	got := timeline(j, []*corev1.Pod{bound, pending})
	want := []executor.Step{{Step: api.StepJobCreated, Time: created}, {Step: api.StepPodScheduled, Time: created.Add(time.Second), Node: "node-1"},
		{Step: api.StepPodInitialized, Time: created.Add(3 * time.Second)}}
	if len(got) != len(want) {
		t.Fatalf("timeline %+v, want %+v", got, want)
	}
	for i := range want {
		if !got[i].Time.Equal(want[i].Time) || got[i].Step != want[i].Step || got[i].Node != want[i].Node {
			t.Fatalf("timeline %+v, want %+v", got, want)
		}
	}
	if got := timeline(j, []*corev1.Pod{pending}); len(got) != 1 {
		t.Errorf("timeline of an unbound pod %+v, want the Job's creation only", got)
	}
}

// TestWaitingFromTheJobsWarningEvents: a Job the Job controller cannot create a pod for (a
// ResourceQuota with no room) waits for quota_exceeded, in the API server's words, from the Job's
// Warning event; the same event is ignored once the Job has a pod.
func TestWaitingFromTheJobsWarningEvents(t *testing.T) {
	client := fake.NewClientset()
	e := New(Options{Client: client, PodOptions: opts, Logger: slog.New(slog.DiscardHandler)})
	j, p := disruptedJob(t, e, "")
	j.Status.Conditions = nil
	refusal := `pods "outpost-dep-1-1-abcde" is forbidden: exceeded quota: jobs, requested: requests.memory=512Mi, used: requests.memory=1Gi, limited: requests.memory=1Gi`
	if _, err := client.CoreV1().Events(j.Namespace).Create(t.Context(), &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: j.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Job", Name: j.Name, Namespace: j.Namespace}, Type: corev1.EventTypeWarning,
		Reason: "FailedCreate", Message: "Error creating: " + refusal}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = e.informers[0].GetIndexer().Add(j)
	e.observeWarnings(t.Context())
	s, ok := e.status(j)
	if !ok || s.Waiting == nil || s.Waiting.Reason != api.ReasonQuotaExceeded || !strings.Contains(s.Waiting.Detail, refusal) {
		t.Fatalf("waiting %+v, want quota_exceeded with the API server's refusal", s.Waiting)
	}

	p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	_ = e.informers[1].GetIndexer().Add(p)
	e.mu.Lock()
	e.warnings = map[types.UID]warning{}
	e.mu.Unlock()
	e.observeWarnings(t.Context())
	if s, _ := e.status(j); s.Waiting != nil {
		t.Fatalf("waiting %+v once the Job has a pod, want none", s.Waiting)
	}
}
