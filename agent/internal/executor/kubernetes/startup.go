package kubernetes

// Why a Job's pod has not started: the watchdog of the startup timeout and the waiting reasons
// read from the pod and its Warning events.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// neverStarts are the waiting reasons of a container that no wait can fix: the image name is
// invalid, or the pull policy is Never and the node does not have the image. A Job whose pod
// shows one fails at once instead of after the startup timeout.
var neverStarts = map[string]bool{"InvalidImageName": true, "ErrImageNeverPull": true}

// watchdog fails Jobs whose pod has not started within the startup timeout, or whose pod can
// never start (neverStarts). Left alone such a Job would wait for activeDeadlineSeconds (the
// whole job timeout) holding a slot, and the user would learn nothing about why.
func (e *Executor) watchdog(ctx context.Context) {
	jobs, err := e.jobs.List(labels.Everything())
	if err != nil {
		return
	}
	now := time.Now()
	for _, j := range jobs {
		if j.DeletionTimestamp != nil || finished(j) != "" || j.Annotations[AnnCancel] != "" || j.Annotations[AnnStartupError] != "" {
			continue
		}
		pods := e.podsOf(j)
		if len(pods) == 0 && ending(j, now) {
			continue
		}
		hopeless := neverStartsReason(pods)
		// The newest pod's start-up is timed: one that replaced a disrupted pod (a plan evicted
		// by a drain, or given up with its node) has the timeout of its own, however old the Job.
		since, started := j.CreationTimestamp.Time, false
		if len(pods) > 0 {
			newest := pods[len(pods)-1]
			since = newest.CreationTimestamp.Time
			cs := mainStatus(newest)
			started = cs != nil && (cs.State.Running != nil || cs.State.Terminated != nil)
		}
		if now.Sub(since) < e.o.StartupTimeout.Duration && hopeless == "" {
			continue
		}
		if _, ok := e.status(j); !ok || started {
			continue
		}
		reason, msg, detail := e.startupReason(ctx, j)
		f := startupFailure{Reason: reason, Detail: detail, Message: fmt.Sprintf("the Job's pod did not start within %s: %s", e.o.StartupTimeout.Duration, msg)}
		if hopeless != "" {
			f.Message = "the Job's pod cannot start: " + msg
		}
		data, _ := json.Marshal(f)
		e.log.Warn("Job did not start in time", "k8s_job", j.Name, "namespace", j.Namespace, "reason", reason, "message", msg)
		if err := e.stop(ctx, j, AnnStartupError, string(data)); err != nil {
			e.log.Error("stop Job stuck in startup", "k8s_job", j.Name, "err", err)
		}
	}
}

// ending reports whether a Job without pods in the cache is between its pods or past its end
// rather than waiting for its first: a pod already ran (the Job counts it), the Job controller
// has decided the Job's end (FailureTarget, SuccessCriteriaMet) or its activeDeadlineSeconds
// has passed. At a deadline the controller deletes the pod before it writes the Failed
// condition; timing the Job's start-up from its creation then took the deadline for a pod that
// never started (startup_timeout instead of deadline_exceeded, TestReasonsOnRealPods). A
// replacement pod, once created, is timed on its own.
func ending(j *batchv1.Job, now time.Time) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobFailureTarget || c.Type == batchv1.JobSuccessCriteriaMet) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	if j.Status.Failed > 0 || j.Status.Succeeded > 0 || (j.Status.Terminating != nil && *j.Status.Terminating > 0) {
		return true
	}
	if d := j.Spec.ActiveDeadlineSeconds; d != nil && j.Status.StartTime != nil {
		return !now.Before(j.Status.StartTime.Add(time.Duration(*d) * time.Second))
	}
	return false
}

// neverStartsReason returns the waiting reason of a container of the Job's newest pod (pods
// oldest first) that no wait can fix, or "".
func neverStartsReason(pods []*corev1.Pod) string {
	if len(pods) == 0 {
		return ""
	}
	p := pods[len(pods)-1]
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && neverStarts[w.Reason] {
			return w.Reason
		}
	}
	return ""
}

// startupReason explains why a Job's pod is not running, from the pod's conditions and
// container states first and from events second (those need `list events`): the reason,
// Outpost's message and the cluster's own words.
func (e *Executor) startupReason(ctx context.Context, j *batchv1.Job) (api.Reason, string, string) {
	pods := e.podsOf(j)
	for i := len(pods) - 1; i >= 0; i-- {
		p := pods[i]
		if w := podWaiting(p); w != nil {
			return w.Reason, w.Message, w.Detail
		}
		if w := e.eventReason(ctx, p, p.Namespace, "Pod", p.Name); w != nil {
			return w.Reason, w.Message, w.Detail
		}
	}
	if w := e.eventReason(ctx, nil, j.Namespace, "Job", j.Name); w != nil {
		return w.Reason, w.Message, w.Detail
	}
	if len(pods) == 0 {
		return executor.ReasonStartupTimeout, "no pod was created for the Job", ""
	}
	return executor.ReasonStartupTimeout, fmt.Sprintf("pod %s is %s", pods[len(pods)-1].Name, pods[len(pods)-1].Status.Phase), ""
}

// podWaiting is what a pod that has not started waits for, as its container states and
// conditions say (no API call): an image that cannot be pulled, no node for it, a container
// the runtime cannot create. nil when they name nothing.
func podWaiting(p *corev1.Pod) *executor.Waiting {
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
			image := imageOf(p, cs)
			return &executor.Waiting{Reason: executor.ReasonImagePull, Detail: strings.TrimSpace(w.Reason + ": " + w.Message),
				Message: fmt.Sprintf("%s: container %s cannot get image %s: %s; %s", w.Reason, cs.Name, image, w.Message, imagePullHint(p, image, w.Message))}
		case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
			return &executor.Waiting{Reason: executor.ReasonStartFailed, Detail: strings.TrimSpace(w.Reason + ": " + w.Message),
				Message: fmt.Sprintf("%s: container %s cannot be created: %s", w.Reason, cs.Name, w.Message)}
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return &executor.Waiting{Reason: executor.ReasonUnschedulable, Detail: c.Message,
				Message: fmt.Sprintf("%s: %s; check the pod template's nodeSelector, affinity, tolerations and resource requests against the nodes", c.Reason, c.Message)}
		}
	}
	return nil
}

// imageOf is the image of a container as the pod spec names it (the status may show a resolved
// name, or nothing before the pull).
func imageOf(p *corev1.Pod, cs corev1.ContainerStatus) string {
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if c.Name == cs.Name {
			return c.Image
		}
	}
	return cs.Image
}

// imagePullEvent reports whether a Warning event is about getting an image: the kubelet's
// "Failed to pull image …" and "Back-off pulling image …", and its "Failed" events whose message
// is only the container's waiting reason ("Error: ErrImagePull", "Error: ImagePullBackOff",
// "Error: ErrImageNeverPull", "Error: InvalidImageName"), which come before the detailed ones,
// and InspectFailed, an image name the kubelet cannot parse.
func imagePullEvent(reason, message string) bool {
	switch reason {
	case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName", "InspectFailed":
		return true
	}
	m := strings.ToLower(message)
	return strings.Contains(m, "pull") || strings.Contains(m, "invalidimagename")
}

// terseFailure reports the kubelet's "Failed" events whose message is only a container's
// waiting reason ("Error: ErrImagePull"): they come with, or just after, the event that says what
// happened ("Failed to pull image …: 401 Unauthorized"), and the attempt's reason is kept from
// the first event that names it, so the terse one must not be it.
func terseFailure(ev corev1.Event) bool {
	code, ok := strings.CutPrefix(ev.Message, "Error: ")
	return ev.Reason == "Failed" && ok && code != "" && !strings.ContainsAny(code, " :")
}

// eventReason explains a start-up failure from the newest Warning event of an object; p is the
// pod (nil for the Job), whose pull secrets an image pull failure's hint names. nil when the
// object has no Warning event.
func (e *Executor) eventReason(ctx context.Context, p *corev1.Pod, ns, kind, name string) *executor.Waiting {
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name, "type": corev1.EventTypeWarning}.AsSelector().String()
	evs, err := e.o.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil || len(evs.Items) == 0 {
		return nil
	}
	items := evs.Items
	sort.Slice(items, func(a, b int) bool { return items[a].LastTimestamp.Before(&items[b].LastTimestamp) })
	for i := len(items) - 1; i >= 0; i-- {
		ev := items[i]
		if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != kind || ev.InvolvedObject.Name != name || terseFailure(ev) {
			continue
		}
		detail := ev.Reason + ": " + ev.Message
		switch {
		case ev.Reason == "FailedScheduling":
			return &executor.Waiting{Reason: executor.ReasonUnschedulable, Message: detail, Detail: ev.Message}
		case ev.Reason == "FailedCreate" && strings.Contains(ev.Message, "exceeded quota"):
			return &executor.Waiting{Reason: executor.ReasonQuotaExceeded, Detail: ev.Message,
				Message: detail + "; the jobs namespace's ResourceQuota has no room for the pod: raise the quota, lower the pod template's requests or wait for other pods to end"}
		case imagePullEvent(ev.Reason, ev.Message):
			hint := imagePullFallbackHint
			if p != nil {
				hint = imagePullHint(p, eventImage(ev.Message), ev.Message)
			}
			words := ev.Message
			if ev.Reason != "Failed" && ev.Reason != "BackOff" {
				words = detail // the reason is the kubelet's code (ErrImageNeverPull), part of its words
			}
			return &executor.Waiting{Reason: executor.ReasonImagePull, Message: detail + "; " + hint, Detail: words}
		default:
			return &executor.Waiting{Reason: executor.ReasonStartFailed, Message: detail, Detail: detail}
		}
	}
	return nil
}
