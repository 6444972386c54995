package kubernetes

import (
	"context"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// warningsEvery is how often the Warning events of a Job that waits for a reason its pod does not
// show (no pod yet: a quota, an admission webhook) are listed again. Listing events is an API
// call, unlike everything else status reads, so it is paced per Job.
const warningsEvery = 10 * time.Second

// warningsAfter is how long a Job waits before its Warning events are listed at all: most Jobs
// have a pod, and that pod shows its own reasons, well within it.
const warningsAfter = 5 * time.Second

// warning is the last Warning-event lookup of a waiting Job.
type warning struct {
	at      time.Time
	waiting *executor.Waiting
}

// timeline is what the Job and its pods show of the attempt's way to its CLI: the Job created,
// its pod scheduled (to which node), its pod's init containers done. Each step is taken from the
// oldest pod that reached it, so a replaced pod does not move a step already reported.
func timeline(j *batchv1.Job, pods []*corev1.Pod) []executor.Step {
	out := []executor.Step{{Step: api.StepJobCreated, Time: j.CreationTimestamp.UTC()}}
	var scheduled, initialized *executor.Step
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch {
			case c.Type == corev1.PodScheduled && scheduled == nil && p.Spec.NodeName != "":
				scheduled = &executor.Step{Step: api.StepPodScheduled, Time: c.LastTransitionTime.UTC(), Node: p.Spec.NodeName}
			case c.Type == corev1.PodInitialized && initialized == nil && p.Spec.NodeName != "":
				initialized = &executor.Step{Step: api.StepPodInitialized, Time: c.LastTransitionTime.UTC()}
			}
		}
	}
	for _, s := range []*executor.Step{scheduled, initialized} {
		if s != nil {
			out = append(out, *s)
		}
	}
	return out
}

// waiting is what an attempt that has not started waits for: what its newest pod shows, else
// what the last Warning-event lookup of its Job found (observeWarnings).
func (e *Executor) waiting(j *batchv1.Job, pods []*corev1.Pod) *executor.Waiting {
	if len(pods) > 0 {
		if w := podWaiting(pods[len(pods)-1]); w != nil {
			return w
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.warnings[j.UID].waiting
}

// observeWarnings looks up the Warning events of each Job that has waited warningsAfter without
// its pod naming why (or without a pod), at most every warningsEvery per Job, so the session can
// report the reason while the attempt waits, not only when the startup timeout fails it.
func (e *Executor) observeWarnings(ctx context.Context) {
	jobs, err := e.jobs.List(labels.Everything())
	if err != nil {
		return
	}
	now := time.Now()
	seen := map[types.UID]bool{}
	for _, j := range jobs {
		if j.DeletionTimestamp != nil || kept(j) || finished(j) != "" || j.Annotations[AnnCancel] != "" || now.Sub(j.CreationTimestamp.Time) < warningsAfter {
			continue
		}
		pods := e.podsOf(j)
		if started(pods) || (len(pods) > 0 && podWaiting(pods[len(pods)-1]) != nil) {
			continue
		}
		seen[j.UID] = true
		e.mu.Lock()
		last := e.warnings[j.UID]
		e.mu.Unlock()
		if now.Sub(last.at) < warningsEvery {
			continue
		}
		// Events outlive what they report: a pod already bound is no longer unschedulable, and
		// a Job with a pod no longer fails to create one.
		var w *executor.Waiting
		if len(pods) > 0 {
			p := pods[len(pods)-1]
			if w = e.eventReason(ctx, p, p.Namespace, "Pod", p.Name); w != nil && w.Reason == executor.ReasonUnschedulable && p.Spec.NodeName != "" {
				w = nil
			}
		} else {
			w = e.eventReason(ctx, nil, j.Namespace, "Job", j.Name)
		}
		e.mu.Lock()
		e.warnings[j.UID] = warning{at: now, waiting: w}
		e.mu.Unlock()
		if w != nil && (last.waiting == nil || last.waiting.Reason != w.Reason) {
			e.notify.Notify()
		}
	}
	e.mu.Lock()
	for uid := range e.warnings {
		if !seen[uid] {
			delete(e.warnings, uid)
		}
	}
	e.mu.Unlock()
}

// started reports whether main of one of the pods has started.
func started(pods []*corev1.Pod) bool {
	for _, p := range pods {
		if cs := mainStatus(p); cs != nil && (cs.State.Running != nil || cs.State.Terminated != nil) {
			return true
		}
	}
	return false
}
