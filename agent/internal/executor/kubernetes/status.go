package kubernetes

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// startupFailure is the JSON of the startup-failure annotation.
type startupFailure struct {
	Reason  api.Reason `json:"reason"`
	Message string     `json:"message"`
	// Detail is the cluster's own words (an annotation written before it existed has none).
	Detail string `json:"detail,omitempty"`
}

// status derives an attempt's status from its Job and pods. ok is false for objects that are not
// ours after all (no valid seal, see seal.go), are being deleted, or are kept in the history.
func (e *Executor) status(j *batchv1.Job) (executor.AttemptStatus, bool) {
	if j.DeletionTimestamp != nil || kept(j) {
		return executor.AttemptStatus{}, false
	}
	if !e.sealed(j) {
		e.reportUnsealed(j)
		return executor.AttemptStatus{}, false
	}
	deploymentID := j.Annotations[AnnDeploymentID]
	attempt, err := strconv.Atoi(j.Labels[LabelAttempt])
	if deploymentID == "" || err != nil {
		return executor.AttemptStatus{}, false
	}
	s := executor.AttemptStatus{DeploymentID: deploymentID, Attempt: attempt, StateKey: j.Annotations[AnnStateKey], StateNamespace: j.Annotations[AnnStateNS],
		Operation: api.Operation(j.Annotations[AnnOperation]), PlanOf: j.Annotations[AnnPlanOf], Status: api.StatusClaimed}
	s.Fencing, _ = strconv.ParseInt(j.Annotations[AnnFencing], 10, 64)
	if ev, ok := e.pendingEvent(j); ok {
		s.PendingEvent = []byte(ev)
	} else if j.Annotations[AnnPendingEvent] != "" {
		e.log.Warn("ignoring a pending event without a valid seal on the agent's Job", "k8s_job", j.Name, "namespace", j.Namespace)
	}
	s.ClaimedAt, _ = time.Parse(time.RFC3339Nano, j.Annotations[AnnClaimedAt])
	pods := e.podsOf(j)
	live := false
	var main *corev1.ContainerStatus
	var mainPod *corev1.Pod
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			live = true
		}
		if cs := mainStatus(p); cs != nil && (cs.State.Running != nil || cs.State.Terminated != nil) {
			s.Started = true
			main, mainPod = cs, p
			if cs.State.Running != nil {
				s.StartedAt = cs.State.Running.StartedAt.Time
			} else {
				s.StartedAt = cs.State.Terminated.StartedAt.Time
			}
		}
	}
	if s.Started {
		s.Status = api.StatusRunning
	}
	s.Timeline = timeline(j, pods)
	if main != nil && main.State.Terminated != nil {
		code := int(main.State.Terminated.ExitCode)
		s.ExitCode = &code
		s.FinishedAt = main.State.Terminated.FinishedAt.Time
	}
	switch cond, reason, msg, at := finishedCondition(j); {
	case j.Annotations[AnnCancel] != "" && (!live || cond != ""):
		s.Status, s.Reason, s.Message = api.StatusCanceled, executor.ReasonCanceled, "canceled by request"
		s.Detail = conditionDetail(j, batchv1.JobSuspended)
		s.FinishedAt = latest(s.FinishedAt, at)
	case j.Annotations[AnnStartupError] != "":
		var f startupFailure
		_ = json.Unmarshal([]byte(j.Annotations[AnnStartupError]), &f)
		s.Status, s.Reason, s.Message, s.Detail = api.StatusFailed, f.Reason, f.Message, f.Detail
		s.FinishedAt = latest(s.FinishedAt, at)
	case cond == batchv1.JobComplete || (cond == "" && podSucceeded(pods)):
		// A pod that succeeded completes the Job: one completion, no retries (backoffLimit 0).
		// The Job controller's Complete condition follows, late by as much as its work queue at
		// its API rate limit (tens of seconds when a thousand Jobs end together, seen in
		// BenchmarkAgent), so the attempt is reported finished from the pod. A failed pod is left
		// to the Job controller: the pod failure policy may ignore it and run another.
		s.Status = api.StatusSucceeded
		if s.ExitCode == nil {
			zero := 0
			s.ExitCode = &zero
		}
		s.FinishedAt = latest(s.FinishedAt, at)
	case cond == batchv1.JobFailed:
		s.Status = api.StatusFailed
		s.Reason, s.Message, s.Detail = failureReason(reason, msg, mainPod, main)
		switch p := disrupted(pods); {
		case reason == batchv1.JobReasonDeadlineExceeded:
		case j.Annotations[AnnNodeLost] != "" || e.lostNode(j.UID) != "" || (p != nil && nodeLost(disruptionReason(p))):
			lost := cmp.Or(j.Annotations[AnnNodeLost], e.lostNode(j.UID))
			if lost == "" {
				lost = p.Spec.NodeName + ": " + disruptionReason(p)
			}
			s.Reason, s.Detail, s.Message = executor.ReasonNodeLost, lost, fmt.Sprintf("the node of the Job's pod was lost (%s) while it ran; "+
				"the run may have partly happened and is not re-run automatically: check what it changed and the state (its lock is released) before running it again", lost)
		case p != nil:
			s.Reason, s.Detail = executor.ReasonEvicted, disruptionDetail(p)
			s.Message = fmt.Sprintf("pod %s was evicted or preempted (%s); an apply or destroy is not re-run automatically", p.Name, disruptionReason(p))
		case reason == batchv1.JobReasonPodFailurePolicy && strings.Contains(msg, string(corev1.DisruptionTarget)):
			// The disrupted pod is gone already (deleted with the eviction): the Job's condition
			// still names the disruption.
			s.Reason, s.Message, s.Detail = executor.ReasonEvicted, "the Job's pod was evicted or preempted; an apply or destroy is not re-run automatically: "+msg, msg
		}
		s.FinishedAt = latest(s.FinishedAt, at)
	}
	if !s.Started && !s.Terminal() && j.Annotations[AnnCancel] == "" {
		s.Waiting = e.waiting(j, pods)
	}
	if s.Terminal() && s.FinishedAt.IsZero() {
		s.FinishedAt = j.CreationTimestamp.Time
	}
	return s, true
}

// podSucceeded reports whether one of a Job's pods ended with success.
func podSucceeded(pods []*corev1.Pod) bool {
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded {
			return true
		}
	}
	return false
}

// finishedCondition returns the final condition of a Job (Complete or Failed), if any.
func finishedCondition(j *batchv1.Job) (batchv1.JobConditionType, string, string, time.Time) {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.Type, c.Reason, c.Message, c.LastTransitionTime.Time
		}
	}
	return "", "", "", time.Time{}
}

// conditionDetail is a true condition of the Job in the Job controller's words ("" without it).
func conditionDetail(j *batchv1.Job, t batchv1.JobConditionType) string {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	return ""
}

func finished(j *batchv1.Job) batchv1.JobConditionType {
	c, _, _, _ := finishedCondition(j)
	return c
}

// failureReason maps a Failed Job to the agent's reason set, preferring what main's container
// status says (exit code, OOM) over the Job controller's summary; p is the pod main ran in. It
// returns the reason, Outpost's message and the cluster's own words.
func failureReason(condReason, condMsg string, p *corev1.Pod, main *corev1.ContainerStatus) (api.Reason, string, string) {
	if condReason == batchv1.JobReasonDeadlineExceeded {
		return executor.ReasonDeadlineExceeded, "the Job ran past its timeout (activeDeadlineSeconds): " + condMsg +
			"; raise the deployment's timeout_seconds or the runner's job_timeout if the run needs longer", condReason + ": " + condMsg
	}
	if main != nil && main.State.Terminated != nil {
		t := main.State.Terminated
		if t.Reason == "OOMKilled" {
			limit := memoryLimit(p)
			detail := fmt.Sprintf("OOMKilled: exit code %d, memory limit %s", t.ExitCode, limit)
			return executor.ReasonOOMKilled, fmt.Sprintf("main was killed for exceeding its memory limit of %s (OOMKilled, exit code %d); "+
				"raise resources.limits.memory of main in the runner's pod template", limit, t.ExitCode), detail
		}
		msg := fmt.Sprintf("main exited with code %d", t.ExitCode)
		if t.Message != "" {
			msg += ": " + t.Message
		}
		return executor.ReasonExitCode, msg, strings.TrimSpace(t.Message)
	}
	return executor.ReasonUnknownTermination, strings.TrimSpace(condReason + ": " + condMsg), strings.TrimSpace(condReason + ": " + condMsg)
}

// memoryLimit is main's memory limit in the pod, or "(none set)": an OOM kill without one is the
// node running out of memory.
func memoryLimit(p *corev1.Pod) string {
	if p != nil {
		for _, c := range p.Spec.Containers {
			if c.Name == podtemplate.MainContainer {
				if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
					return q.String()
				}
			}
		}
	}
	return "(none set)"
}

// disruptionDetail is the DisruptionTarget condition of a disrupted pod in the cluster's words.
func disruptionDetail(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	return ""
}

// nodeLost reports whether a DisruptionTarget reason says Kubernetes gave a pod up with its
// node: the taint manager evicts the pods of a node that stopped answering, the pod garbage
// collector fails those bound to a node that is gone or out of service.
func nodeLost(reason string) bool {
	return reason == "DeletionByTaintManager" || reason == "DeletionByPodGC"
}

// noteLostNode remembers, from a pod event, that Kubernetes gives the pod up with its node,
// under the UID of the Job that owns it (lostNodes).
func (e *Executor) noteLostNode(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	reason := disruptionReason(p)
	if !nodeLost(reason) {
		return
	}
	owner := metav1.GetControllerOf(p)
	if owner == nil || owner.Kind != "Job" {
		return
	}
	e.mu.Lock()
	if _, seen := e.lostNodes[owner.UID]; !seen {
		e.lostNodes[owner.UID] = p.Spec.NodeName + ": " + reason
	}
	e.mu.Unlock()
}

// lostNode is what noteLostNode remembered of a Job, or "".
func (e *Executor) lostNode(uid types.UID) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lostNodes[uid]
}

// markNodeLost records on each running Job whose pod Kubernetes is giving up with its node
// (AnnNodeLost), so the Job's failure reads as a lost node even after the pod is gone.
func (e *Executor) markNodeLost(ctx context.Context) {
	jobs, err := e.jobs.List(labels.Everything())
	if err != nil {
		return
	}
	for _, j := range jobs {
		if j.DeletionTimestamp != nil || j.Annotations[AnnNodeLost] != "" || finished(j) == batchv1.JobComplete {
			continue
		}
		value := e.lostNode(j.UID)
		for _, p := range e.podsOf(j) {
			if value != "" {
				break
			}
			if reason := disruptionReason(p); nodeLost(reason) {
				value = p.Spec.NodeName + ": " + reason
			}
		}
		if value == "" {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnNodeLost: value}}})
		if _, err := e.o.Client.BatchV1().Jobs(j.Namespace).Patch(ctx, j.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.log.Error("record the lost node on the Job", "k8s_job", j.Name, "err", err)
			continue
		}
		e.log.Warn("the node of a job pod was lost", "k8s_job", j.Name, "namespace", j.Namespace, "lost", value)
	}
}

// disrupted returns a pod that failed with the DisruptionTarget condition, if any.
func disrupted(pods []*corev1.Pod) *corev1.Pod {
	for _, p := range pods {
		if p.Status.Phase == corev1.PodFailed && disruptionReason(p) != "" {
			return p
		}
	}
	return nil
}

func disruptionReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func mainStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == podtemplate.MainContainer {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// podsOf lists a Job's pods from the cache, oldest first.
func (e *Executor) podsOf(j *batchv1.Job) []*corev1.Pod {
	objs, _ := e.informers[1].GetIndexer().ByIndex(podsByJobIndex, j.Namespace+"/"+j.Name)
	var out []*corev1.Pod
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && metav1.IsControlledBy(p, j) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].CreationTimestamp.Before(&out[b].CreationTimestamp) })
	return out
}
