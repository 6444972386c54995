package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/benchtest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// podEnds records when an informer on a namespace's pods first saw each Job's pod end (phase
// Succeeded or Failed): the earliest moment anyone could know the attempt ended.
type podEnds struct {
	mu    sync.Mutex
	ended map[string]time.Time // by the Job's name
	first func()
}

func watchPodEnds(b *testing.B, cs kubernetes.Interface, ns string) *podEnds {
	p := &podEnds{ended: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	seen := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || (pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed) {
			return
		}
		job := pod.Labels[batchv1.JobNameLabel]
		now := time.Now()
		p.mu.Lock()
		var first func()
		if _, dup := p.ended[job]; !dup && job != "" {
			p.ended[job] = now
			if len(p.ended) == 1 {
				first = p.first
			}
		}
		p.mu.Unlock()
		if first != nil {
			first()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) }}); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	b.Cleanup(func() { close(stop); factory.Shutdown() })
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	return p
}

// onFirst runs fn (on the informer's goroutine) when the first pod ends.
func (p *podEnds) onFirst(fn func()) {
	p.mu.Lock()
	p.first = fn
	p.mu.Unlock()
}

func (p *podEnds) at(job string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended[job]
}

// pipeline is where the burst's time went between each pod's end and its Job being cleaned up.
type pipeline struct {
	// Per attempt: pod ended → the orchestrator's finished_at (what the agent waits for, its
	// event pipeline and the orchestrator), pod ended → Job marked Complete (the test bed's Job
	// controller, for comparison), finished_at → Job cleaned up (the agent's cleanup at its
	// client rate limit).
	report, jobController, cleanup []time.Duration
	// cleanedBeforeComplete counts the Jobs the agent deleted before the Job controller marked
	// them Complete (it reports an attempt finished once its pod succeeded).
	cleanedBeforeComplete int
	lastPodEnd, lastKnown time.Time
	agentFrom, agentTo    benchtest.Usage
}

// pipelineOf reads the orchestrator's finished_at of every deployment of the burst and lines it
// up with what the watches saw. Call it once every Job is cleaned up.
func pipelineOf(b *testing.B, e *env, ids []string, w *jobWatch, pods *podEnds) pipeline {
	ds, err := e.admin.ListDeployments(b.Context(), client.DeploymentFilter{RunnerID: e.runnerID})
	if err != nil {
		b.Fatal(err)
	}
	finishedAt := map[string]time.Time{}
	for _, d := range ds {
		if d.Status != api.StatusSucceeded {
			b.Fatalf("deployment %s of the burst ended %s (%s): %s", d.ID, d.Status, d.Reason, d.Message)
		}
		if d.FinishedAt != nil {
			finishedAt[d.ID] = *d.FinishedAt
		}
	}
	var p pipeline
	for _, id := range ids {
		job := kubeexec.JobName(id, 1)
		ended, done, known, cleaned := pods.at(job), w.at(complete, job), finishedAt[id], w.at(finished, job)
		if ended.IsZero() || known.IsZero() || cleaned.IsZero() {
			b.Fatalf("deployment %s of the burst: pod ended %v, orchestrator finished_at %v, cleaned up %v: the burst did not run to its end",
				id, ended, known, cleaned)
		}
		if done.IsZero() {
			p.cleanedBeforeComplete++ // the agent deleted it before the Job controller got to it
		} else {
			p.jobController = append(p.jobController, done.Sub(ended))
		}
		p.report = append(p.report, known.Sub(ended))
		p.cleanup = append(p.cleanup, cleaned.Sub(known))
		if ended.After(p.lastPodEnd) {
			p.lastPodEnd = ended
		}
		if known.After(p.lastKnown) {
			p.lastKnown = known
		}
	}
	p.agentFrom, p.agentTo = w.marked("first pod ended"), w.marked("all cleaned up")
	return p
}

func (p pipeline) figures() []benchtest.Figure {
	var out []benchtest.Figure
	add := func(name, note string, ds []time.Duration) {
		for _, q := range []float64{50, 99, 100} {
			label := fmt.Sprintf("p%.0f", q)
			if q == 100 {
				label = "max"
			}
			f := benchtest.Figure{Section: "event pipeline", Name: name + " " + label, Value: benchtest.Ms(benchtest.Percentile(ds, q)), Unit: "ms"}
			if q == 50 {
				f.Note = note
			}
			out = append(out, f)
		}
	}
	add("pod ended → orchestrator knows", "per attempt of the burst: from the pod's end (seen by the benchmark's informer) to the orchestrator's finished_at", p.report)
	add("pod ended → Job complete", fmt.Sprintf("the test bed's Job controller, from the pod's end to the Job's Complete condition, both seen by the benchmark's informers; %d Jobs deleted by the agent before it got to them are left out", p.cleanedBeforeComplete), p.jobController)
	add("orchestrator knows → cleaned up", "the agent's cleanup after the acknowledgement (Job deleted or kept in the history)", p.cleanup)
	return out
}

// waitQuiet waits until the namespaces have nothing left to clean up: every Job ended, the
// agent's kept in the history, none being deleted, no pod or Secret whose owning Job is gone (the
// garbage collector's work done). It returns how long it waited. A floor or a burst started
// while hundreds of deletes are still going measures those deletes as well.
func waitQuiet(b *testing.B, cs kubernetes.Interface, namespaces ...string) time.Duration {
	began := time.Now()
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	var busy string
	for {
		busy = ""
		for _, ns := range namespaces {
			if busy = busyIn(ctx, cs, ns); busy != "" {
				break
			}
		}
		if busy == "" {
			return time.Since(began)
		}
		select {
		case <-ctx.Done():
			b.Fatalf("the test bed still had work left after %s: %s", time.Since(began).Round(time.Second), busy)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func jobEnded(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// busyIn says what is left to clean up in ns, or "" when nothing is.
func busyIn(ctx context.Context, cs kubernetes.Interface, ns string) string {
	jobs, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	live := map[types.UID]bool{}
	for _, j := range jobs.Items {
		agents := j.Labels[kubeexec.LabelDeploymentID] != ""
		switch {
		case j.DeletionTimestamp != nil:
			return fmt.Sprintf("Job %s/%s being deleted", ns, j.Name)
		case agents && j.Labels[kubeexec.LabelHistory] == "":
			return fmt.Sprintf("Job %s/%s not yet cleaned up by the agent", ns, j.Name)
		case !jobEnded(&j):
			return fmt.Sprintf("Job %s/%s still running", ns, j.Name)
		}
		live[j.UID] = true
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	orphaned := func(refs []metav1.OwnerReference) bool {
		for _, r := range refs {
			if r.Kind == "Job" && !live[r.UID] {
				return true
			}
		}
		return false
	}
	for _, p := range pods.Items {
		if orphaned(p.OwnerReferences) || p.DeletionTimestamp != nil {
			return fmt.Sprintf("pod %s/%s of a deleted Job", ns, p.Name)
		}
	}
	secrets, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, s := range secrets.Items {
		if orphaned(s.OwnerReferences) {
			return fmt.Sprintf("Secret %s/%s of a deleted Job", ns, s.Name)
		}
	}
	return ""
}
