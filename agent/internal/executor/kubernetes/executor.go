// Package kubernetes is the kubernetes executor: it runs each claimed attempt as one batch/v1
// Job. The Job object is the agent's memory: its name is derived from the attempt, its labels
// find it again after a restart, and its annotations hold the job lease's fencing number, the
// state key and an undelivered finished event (the pending event). Watching is informer-based
// (list + watch, filtered by the agent's labels).
package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/kubeclient"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
)

// Options configure the executor. The cluster owner's settings carry the names of the agent's
// configuration file (section jobs, package config), so the file decodes straight into them;
// the fields tagged "-" are the agent's runtime parts and settings it shares with other parts,
// which the agent fills in.
type Options struct {
	Client kubeclient.Interface `json:"-"`
	// OrgID is the agent's organisation: it labels every Job, so runners of two organisations
	// can share a jobs namespace.
	OrgID string `json:"-"`
	// SealKey keys the seals of the agent's Jobs (SealKey of the runner's private key); a random
	// key when nil, whose seals do not outlive the process. SetSealKeys replaces it when the
	// runner's key rotates.
	SealKey []byte `json:"-"`
	// Namespace is the jobs namespace to watch; empty watches all namespaces.
	Namespace string `json:"namespace"`
	// ServiceAccount, when set, is the job service account the agent was installed for (and made
	// RBAC for); a placement naming another one fails with a message saying what to align.
	ServiceAccount string `json:"serviceAccount"`
	PodOptions
	// Policy is the cluster owner's job pod policy: a pod it refuses is never created.
	Policy Policy `json:"policy"`
	// SecurityDefaults are the security defaults of job pods, completed with
	// RestrictedDefaults (New), so a zero value is Pod Security "restricted".
	SecurityDefaults
	// PinnedTemplate, when set, is the pod template of every Job, pinned by the cluster owner
	// (chart value jobs.podTemplate): the runner's template from the orchestrator is ignored.
	PinnedTemplate string `json:"-"`
	// StartupTimeout fails an attempt whose Job's pod has not started within it.
	StartupTimeout metav1.Duration `json:"startupTimeout"`
	// History is how many finished Jobs are kept after their finished event was acknowledged.
	History History      `json:"history"`
	Logger  *slog.Logger `json:"-"`
	// Tracing is where the spans of Job creations, job runners and their CLI go (trace.go).
	Tracing Tracing `json:"-"`
}

// Executor implements executor.Executor on Kubernetes Jobs.
type Executor struct {
	o         Options
	informers []cache.SharedIndexInformer // Jobs, then pods
	jobs      batchlisters.JobLister
	synced    chan struct{}
	notify    *executor.Notifier
	log       *slog.Logger
	// sealKeys key the seals, newest first (SetSealKeys).
	sealKeys atomic.Pointer[[][]byte]

	mu       sync.Mutex
	unsealed map[types.UID]bool // Jobs already reported as not the agent's
	// tokenSecrets maps the UID of a Job this process started to the UID of the token Secret it
	// created for it, so the Secret can be deleted without reading it first (keep, history.go).
	// An entry goes when the informer sees its Job deleted.
	tokenSecrets map[types.UID]types.UID
	// expiring holds the kept Jobs whose delete was sent, until the informer sees them go, so
	// trimHistory (run after every keep, on a cache that lags) deletes each once.
	expiring map[types.UID]bool
	// warnings are the last Warning-event lookups of waiting Jobs (observeWarnings).
	warnings map[types.UID]warning
	// lostNodes are the Jobs whose pod the pod informer saw Kubernetes give up with its node
	// ("<node>: <reason>"), kept from the event itself: the Job controller may fail the Job and
	// the pod go before markNodeLost's next tick writes AnnNodeLost, and the failure must still
	// read as a lost node, not an eviction.
	lostNodes map[types.UID]string
}

var _ executor.Executor = (*Executor)(nil)

// New returns an executor; call Run to start watching.
func New(o Options) *Executor {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	security := &o.SecurityDefaults
	*security = security.WithRestricted()
	if len(o.SealKey) == 0 {
		o.SealKey = randomSealKey()
	}
	if o.History.keeps() && o.TTLAfterFinished == 0 {
		o.TTLAfterFinished = historyTTL
	}
	selector := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue, LabelOrgID: o.OrgID, LabelRunnerID: o.PodOptions.RunnerID}).String()
	jobs := newInformer(&batchv1.Job{}, selector,
		func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
			return o.Client.BatchV1().Jobs(o.Namespace).List(ctx, lo)
		},
		func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			return o.Client.BatchV1().Jobs(o.Namespace).Watch(ctx, lo)
		})
	pods := newInformer(&corev1.Pod{}, selector,
		func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
			return o.Client.CoreV1().Pods(o.Namespace).List(ctx, lo)
		},
		func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			return o.Client.CoreV1().Pods(o.Namespace).Watch(ctx, lo)
		})
	// A Job's pods by its name: one event pass reads every attempt's pods, and the lister's
	// label selector would scan the namespace's pods for each (1,000 attempts: 190 ms a pass,
	// BenchmarkList).
	if err := pods.AddIndexers(cache.Indexers{podsByJobIndex: podsByJob}); err != nil {
		o.Logger.Error("index pods by Job", "err", err) // only when added after the informer started
	}
	e := &Executor{
		o: o, informers: []cache.SharedIndexInformer{jobs, pods},
		jobs:     batchlisters.NewJobLister(jobs.GetIndexer()),
		synced:   make(chan struct{}),
		notify:   executor.NewNotifier(),
		log:      o.Logger.With("executor", "kubernetes"),
		unsealed: map[types.UID]bool{}, tokenSecrets: map[types.UID]types.UID{}, expiring: map[types.UID]bool{},
		warnings: map[types.UID]warning{}, lostNodes: map[types.UID]string{},
	}
	e.SetSealKeys([][]byte{o.SealKey})
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { e.notify.Notify() },
		UpdateFunc: func(any, any) { e.notify.Notify() },
		DeleteFunc: func(any) { e.notify.Notify() },
	}
	if _, err := jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    h.AddFunc,
		UpdateFunc: h.UpdateFunc,
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if j, ok := obj.(*batchv1.Job); ok {
				e.forgetJob(j.UID)
			}
			e.notify.Notify()
		},
	}); err != nil {
		e.log.Error("register Job handler", "err", err)
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: h.AddFunc,
		UpdateFunc: func(_, obj any) {
			e.noteLostNode(obj)
			e.notify.Notify()
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			e.noteLostNode(obj)
			e.notify.Notify()
		},
	}); err != nil {
		e.log.Error("register pod handler", "err", err)
	}
	return e
}

// podsByJobIndex names the pod informer's index of a Job's pods: namespace/name of the Job, from
// the label the Job controller puts on its pods.
const podsByJobIndex = "job"

func podsByJob(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Labels[batchv1.JobNameLabel] == "" {
		return nil, nil
	}
	return []string{p.Namespace + "/" + p.Labels[batchv1.JobNameLabel]}, nil
}

// newInformer watches the agent's objects of one kind in its namespace, those matching selector.
// Built from the typed clients, not client-go's informer factory, which links an informer for
// every API group into the binary.
func newInformer(obj runtime.Object, selector string, list cache.ListWithContextFunc, watchFn cache.WatchFuncWithContext) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
			lo.LabelSelector = selector
			return list(ctx, lo)
		},
		WatchFuncWithContext: func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			lo.LabelSelector = selector
			return watchFn(ctx, lo)
		},
	}
	return cache.NewSharedIndexInformer(lw, obj, 10*time.Minute, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// Run watches Jobs and Pods and enforces the startup timeout until ctx ends.
func (e *Executor) Run(ctx context.Context) error {
	var running sync.WaitGroup
	defer running.Wait() // the informers stop with ctx
	synced := make([]cache.InformerSynced, len(e.informers))
	for i, inf := range e.informers {
		running.Go(func() { inf.RunWithContext(ctx) })
		synced[i] = inf.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("the Job and pod informers did not sync: %w", ctx.Err())
	}
	close(e.synced)
	e.log.Info("watching Jobs", "namespace", e.o.Namespace, "runner", e.o.RunnerID)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			e.markNodeLost(ctx)
			e.watchdog(ctx)
			e.observeWarnings(ctx)
			e.trimHistory(kubeclient.Deferrable(ctx))
		}
	}
}

// forgetJob drops what the executor remembers of a deleted Job, so nothing grows with the Jobs
// that come and go (unsealed ones included: anyone who can create Jobs here could otherwise
// grow the map without end).
func (e *Executor) forgetJob(uid types.UID) {
	e.mu.Lock()
	delete(e.tokenSecrets, uid)
	delete(e.expiring, uid)
	delete(e.unsealed, uid)
	delete(e.warnings, uid)
	delete(e.lostNodes, uid)
	e.mu.Unlock()
}

func (e *Executor) waitSynced(ctx context.Context) error {
	select {
	case <-e.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the Job informers to sync: %w", ctx.Err())
	}
}

// Changes implements executor.Executor.
func (e *Executor) Changes() <-chan struct{} { return e.notify.C() }

// List implements executor.Executor from the informer cache.
func (e *Executor) List(ctx context.Context) ([]executor.AttemptStatus, error) {
	if err := e.waitSynced(ctx); err != nil {
		return nil, err
	}
	jobs, err := e.jobs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]executor.AttemptStatus, 0, len(jobs))
	for _, j := range jobs {
		if s, ok := e.status(j); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// find returns the cached Job of an attempt.
func (e *Executor) find(ctx context.Context, deploymentID string, attempt int) (*batchv1.Job, error) {
	if err := e.waitSynced(ctx); err != nil {
		return nil, err
	}
	sel := labels.SelectorFromSet(labels.Set{LabelDeploymentID: labelValue(deploymentID), LabelAttempt: strconv.Itoa(attempt)})
	jobs, err := e.jobs.List(sel)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		if j.Annotations[AnnDeploymentID] == deploymentID && j.DeletionTimestamp == nil && !kept(j) && e.sealed(j) {
			return j, nil
		}
	}
	return nil, nil
}

// Cancel implements executor.Executor. The Job is suspended and marked rather than deleted: the
// Job controller stops its pods, each with its terminationGracePeriodSeconds (set from the cancel
// grace when the Job was built, so grace is already in force and the agent needs no pod delete
// permission), and the Job keeps carrying the finished event until the orchestrator has it.
func (e *Executor) Cancel(ctx context.Context, deploymentID string, attempt int, _ time.Duration) error {
	j, err := e.find(ctx, deploymentID, attempt)
	if err != nil || j == nil {
		return err
	}
	if finished(j) != "" || j.Annotations[AnnCancel] != "" {
		return nil
	}
	return e.stop(ctx, j, AnnCancel, time.Now().UTC().Format(time.RFC3339))
}

// stop suspends a Job and records why in an annotation.
func (e *Executor) stop(ctx context.Context, j *batchv1.Job, annotation, value string) error {
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{annotation: value}},
		"spec":     map[string]any{"suspend": true},
	})
	_, err := e.o.Client.BatchV1().Jobs(j.Namespace).Patch(ctx, j.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("stop Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	return nil
}

// Cleanup implements executor.Executor: a finished Job goes into the history (see history.go)
// when it has room there; any other is deleted with one call, its pods and token Secret being
// dependents the garbage collector removes (background propagation). Its requests give way to
// the starts of new attempts at the client's rate limit (kubeclient.Deferrable).
func (e *Executor) Cleanup(ctx context.Context, deploymentID string, attempt int) error {
	ctx = kubeclient.Deferrable(ctx)
	j, err := e.find(ctx, deploymentID, attempt)
	if err != nil || j == nil {
		return err
	}
	if s, ok := e.status(j); ok && s.Terminal() {
		if done, err := e.keep(ctx, j, s.Status); done || err != nil {
			e.notify.Notify()
			return err
		}
	}
	if err := e.deleteJob(ctx, j); err != nil {
		return err
	}
	e.notify.Notify()
	return nil
}

// SavePendingEvent implements executor.Executor on the Job's annotation.
func (e *Executor) SavePendingEvent(ctx context.Context, deploymentID string, attempt int, event []byte) error {
	j, err := e.find(ctx, deploymentID, attempt)
	if err != nil {
		return err
	}
	if j == nil {
		return fmt.Errorf("no Job for deployment %s attempt %d to keep its finished event on", deploymentID, attempt)
	}
	if ev, ok := e.pendingEvent(j); ok && ev == string(event) {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		AnnPendingEvent: string(event), AnnPendingEventSeal: e.eventSeal(j, string(event))}}})
	if _, err := e.o.Client.BatchV1().Jobs(j.Namespace).Patch(ctx, j.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("save the finished event on Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	return nil
}
