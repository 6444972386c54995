package e2e

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/benchtest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// Sizes of BenchmarkAgent (the issue asks for ≥ 500 pickups and a burst of 1,000).
const (
	benchWarmup  = 20
	benchPickups = 500
	benchBurst   = 1000
	// benchRunFor is how long the burst's simulated pods run, so the 1,000 are in flight together
	// while the agent's memory is read.
	benchRunFor = 20 * time.Second
	// benchGap is the idle time before every timed sample, the product's and the floor's alike,
	// outside the timed region: back to back, a sample absorbs the queueing the previous one left
	// (the Job controller creating its pod, the scheduler, kwok), and the floor more than the
	// product, so the ratio drifted towards 1 (issue 30).
	benchGap = 300 * time.Millisecond
)

// benchOnlyEnv runs one part of BenchmarkAgent: "pickup" or "burst" (the throughput and the
// agent's figures); unset, both.
const benchOnlyEnv = "OUTPOST_BENCH_AGENT_ONLY"

// BenchmarkAgent measures one agent process (the kubernetes executor, kwok's simulated pods, the
// reference orchestrator in this process) against a bare client-go floor on the same test bed in
// the same run:
//
//   - pickup: enqueue → the attempt's Job seen by a watch, for benchPickups sequential
//     deployments interleaved with bare client-go creates of the same Job seen by the same watch,
//     every sample after an idle gap (benchGap);
//   - throughput: benchBurst deployments queued while the agent is stopped (SIGSTOP), then
//     SIGCONT: time until every Job exists, until the orchestrator has every finished event, and
//     until every Job is cleaned up, with where the time between a pod's end and the orchestrator
//     knowing goes; the floor is benchBurst Jobs plus their token Secrets created by 32
//     goroutines with no client rate limit, on a test bed with nothing left to clean up;
//   - the agent's RSS and CPU idle, and with 100 and 1,000 Jobs in flight.
//
// Run: make bench (or go test -run '^$' -bench Agent -benchtime 1x ./agent/e2e/).
func BenchmarkAgent(b *testing.B) {
	began := time.Now()
	var figures []benchtest.Figure
	only := os.Getenv(benchOnlyEnv)
	for i := 0; i < b.N; i++ {
		figures = nil
		var quiet []string // namespaces the burst waits on until they have nothing left to clean up
		if only != "burst" {
			var pickupNS string
			figures, pickupNS = benchPickup(b)
			quiet = append(quiet, pickupNS)
		}
		if only != "pickup" {
			figures = append(figures, benchThroughput(b, quiet)...)
		}
	}
	if err := benchtest.Write(benchtest.Results{Benchmark: "agent", Started: began, Seconds: time.Since(began).Seconds(), Figures: figures,
		Warmup: fmt.Sprintf("%d deployments and %d bare creates before the %d timed pickups, each sample after an idle gap of %s; the burst and its floor each start once the test bed has nothing left to clean up; the burst agent idles 10 s after its first poll", benchWarmup, benchWarmup, benchPickups, benchGap)}); err != nil {
		b.Fatal(err)
	}
	if benchtest.Dir() == "" { // make bench prints one table of every benchmark at the end
		fmt.Print("\n" + benchtest.Table([]benchtest.Results{{Figures: figures}}))
	}
}

func benchPickup(b *testing.B) ([]benchtest.Figure, string) {
	// max_concurrency 200: no pickup waits for a free slot. The Jobs are queued about two a
	// second and hold their job lease for a few seconds each (kwok's pods run about 1 s, then
	// the Job controller, the finished event), so a handful are in flight; with 50 and the
	// samples back to back, a fifth of the pickups measured the wait for a slot instead.
	e := newEnv(b, "", 200)
	e.startAgent("bench-pickup", "--poll-wait", "30s", "--log-level", "info")
	w := watchJobs(b, e.cluster.Client(), e.ns)
	floor := bareClient(b, e.cluster.RESTConfig)
	ctx := b.Context()
	var template *batchv1.Job
	var agentLat, floorLat, enqueueLat []time.Duration
	pickup := func(i int) (time.Duration, time.Duration) {
		time.Sleep(benchGap)
		t0 := time.Now()
		d, err := e.admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: e.runnerID, Operation: api.OperationPlan,
			Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive(b)}}, StateKey: fmt.Sprintf("pickup-%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		enqueued := time.Since(t0)
		name := kubeexec.JobName(d.ID, 1)
		seen := w.waitAdded(b, name)
		if template == nil {
			if template, err = e.cluster.Client().BatchV1().Jobs(e.ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		return seen.Sub(t0), enqueued
	}
	bare := func(i int) time.Duration {
		job := floorJob(template, fmt.Sprintf("floor-pickup-%d", i))
		time.Sleep(benchGap)
		t1 := time.Now()
		if _, err := floor.BatchV1().Jobs(e.ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		return w.waitAdded(b, job.Name).Sub(t1)
	}
	for i := range benchWarmup + benchPickups {
		// The pickup and its bare create alternate which goes first, so neither is always the
		// one that follows the other's aftermath (the Job controller creating its pod).
		var ag, enq, fl time.Duration
		if i%2 == 1 {
			fl = bare(i)
			ag, enq = pickup(i)
		} else {
			ag, enq = pickup(i)
			fl = bare(i)
		}
		if done := i + 1 - benchWarmup; done > 0 && done%100 == 0 {
			benchtest.Progress("pickup: %d of %d deployments", done, benchPickups)
		}
		if i >= benchWarmup {
			agentLat = append(agentLat, ag)
			floorLat = append(floorLat, fl)
			enqueueLat = append(enqueueLat, enq)
		}
	}
	p := func(ds []time.Duration, q float64) float64 { return benchtest.Ms(benchtest.Percentile(ds, q)) }
	fig := func(name string, q float64) benchtest.Figure {
		return benchtest.Figure{Section: "pickup", Name: "enqueue → Job created " + name, Value: p(agentLat, q), Unit: "ms",
			Floor: p(floorLat, q), FloorName: "bare create"}
	}
	p50, p95, p99 := fig("p50", 50), fig("p95", 95), fig("p99", 99)
	p50 = p50.Check("≤ 15 ms", p50.Value <= 15)
	p99 = p99.Check("≤ 1.5× floor", p99.Value <= 1.5*p99.Floor)
	p50.Note = fmt.Sprintf("%d sequential deployments interleaved with as many bare client-go creates of the same Job (alternating which goes first), each sample after an idle gap of %s outside the timed region; all seen by one watch", benchPickups, benchGap)
	over := func(q float64) float64 { return p(agentLat, q) - p(floorLat, q) }
	enq := benchtest.Figure{Section: "pickup", Name: "of which the enqueue request p50", Value: p(enqueueLat, 50), Unit: "ms",
		Note: "the admin API's create (a bbolt commit) until it answered; the rest is poll answer, claim and Job create"}
	return []benchtest.Figure{p50, p95, p99, enq,
		benchtest.Figure{Section: "pickup", Name: "the product's time over a bare create p50", Value: over(50), Unit: "ms"}.Check("≤ 3 ms", over(50) <= 3),
		benchtest.Figure{Section: "pickup", Name: "the product's time over a bare create p99", Value: over(99), Unit: "ms"}.Check("≤ 10 ms", over(99) <= 10),
	}, e.ns
}

func benchThroughput(b *testing.B, quiet []string) []benchtest.Figure {
	e := newEnv(b, fmt.Sprintf(`{"metadata":{"annotations":{"testbed.outpost.dev/run-duration":%q}},"spec":{"containers":[{"name":"main"}]}}`, benchRunFor), benchBurst)
	ctx := b.Context()
	cs := e.cluster.Client()
	benchtest.Progress("throughput: waiting until the test bed has nothing left to clean up")
	quietFor := waitQuiet(b, cs, quiet...)
	a := e.startAgent("bench-burst", "--poll-wait", "30s", "--log-level", "info")
	testbed.WaitFor(b, 60*time.Second, "the agent's first poll", func() (bool, string) {
		r, err := e.admin.GetRunner(ctx, e.runnerID)
		return err == nil && r.Status.Connected, fmt.Sprint(r, err)
	})
	// Idle: after its first polls, the agent only waits on its long poll and its watches.
	idleFrom := mustUsage(b, a.cmd.Process.Pid)
	benchtest.Progress("throughput: agent idle for 10 s, then %d deployments queued while it is stopped", benchBurst)
	time.Sleep(10 * time.Second)
	idleTo := mustUsage(b, a.cmd.Process.Pid)

	w := watchJobs(b, cs, e.ns)
	pods := watchPodEnds(b, cs, e.ns)
	a.signal(syscall.SIGSTOP)
	ids := queue(b, e.admin, e.runnerID, benchBurst)
	w.onAdded(100, func() { w.mark("100", mustUsage(b, a.cmd.Process.Pid)) })
	w.onAdded(benchBurst, func() { w.mark("1000", mustUsage(b, a.cmd.Process.Pid)) })
	pods.onFirst(func() { w.mark("first pod ended", mustUsage(b, a.cmd.Process.Pid)) })
	w.onCount(finished, benchBurst, func() { w.mark("all cleaned up", mustUsage(b, a.cmd.Process.Pid)) })
	t0 := time.Now()
	a.signal(syscall.SIGCONT)
	allCreated := w.waitCount(b, watch.Added, benchBurst, 5*time.Minute)
	benchtest.Progress("throughput: all %d Jobs created; waiting for them to be reported finished (pods run %s)", benchBurst, benchRunFor)
	first := w.nth(watch.Added, 1)
	template, err := cs.BatchV1().Jobs(e.ns).Get(ctx, kubeexec.JobName(ids[0], 1), metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	inFlight := w.marked("1000")
	time.Sleep(5 * time.Second) // CPU with 1,000 in flight, read outside the timed regions
	busy := mustUsage(b, a.cmd.Process.Pid)
	allCleaned := w.waitCount(b, finished, benchBurst, 5*time.Minute)
	pipe := pipelineOf(b, e, ids, w, pods)

	// The floor on a test bed as quiet as the burst's start: the burst's Jobs, pods and Secrets
	// gone (the garbage collector's work done), not while they are being cleaned up.
	benchtest.Progress("throughput: waiting until the burst is cleaned up, then the bare client-go floor creates %d Jobs and Secrets", benchBurst)
	floorQuietFor := waitQuiet(b, cs, append(quiet, e.ns)...)
	floorRate := floorBurst(b, e, template)
	rate := float64(benchBurst-1) / allCreated.Sub(first).Seconds()
	created := benchtest.Figure{Section: "throughput", Name: fmt.Sprintf("%d queued → Jobs created per second", benchBurst), Value: rate, Unit: "Jobs/s",
		Floor: floorRate, FloorName: "bare Job+Secret creates",
		Note: fmt.Sprintf("first to last Job seen by the watch; all %d existed %.1f s after SIGCONT of the agent stopped while they were queued; the burst started %.1f s and its floor %.1f s after the test bed had been waited on to have nothing left to clean up",
			benchBurst, allCreated.Sub(t0).Seconds(), quietFor.Seconds(), floorQuietFor.Seconds())}
	created = created.Check("≥ 90% of a clean floor and ≥ 100/s", rate >= 0.9*floorRate && rate >= 100)
	rss := func(u benchtest.Usage) float64 { return benchtest.MiB(u.RSS) }
	idle := benchtest.Figure{Section: "agent", Name: "RSS idle", Value: rss(idleTo), Unit: "MiB"}
	hundred := w.marked("100")
	reported := pipe.lastKnown.Sub(t0).Seconds()
	floorReported := allCreated.Sub(t0).Seconds() + benchRunFor.Seconds()
	out := []benchtest.Figure{
		created,
		{Section: "throughput", Name: fmt.Sprintf("%d queued → all Jobs created", benchBurst), Value: allCreated.Sub(t0).Seconds(), Unit: "s"},
		benchtest.Figure{Section: "throughput", Name: fmt.Sprintf("%d queued → all reported finished", benchBurst), Value: reported, Unit: "s",
			Floor: floorReported, FloorName: "all created + the pods' run",
			Note: fmt.Sprintf("each simulated pod runs %s; reported = the orchestrator's finished_at of the last deployment (it took the finished event); the last pod ended %.1f s after SIGCONT (the test bed's kwok and scheduler)",
				benchRunFor, pipe.lastPodEnd.Sub(t0).Seconds())}.Check("≤ 1.3× floor", reported <= 1.3*floorReported),
		{Section: "throughput", Name: fmt.Sprintf("%d queued → all cleaned up", benchBurst), Value: allCleaned.Sub(t0).Seconds(), Unit: "s",
			Note: "the agent deleted the Job, or kept it in the history, after the orchestrator acknowledged its finished event"},
	}
	out = append(out, pipe.figures()...)
	return append(out,
		idle.Check("≤ 32 MiB", idle.Value <= 32),
		benchtest.Figure{Section: "agent", Name: "CPU idle", Value: 100 * benchtest.CPUShare(idleFrom, idleTo), Unit: "% of a core", Note: "10 s after the first poll"},
		benchtest.Figure{Section: "agent", Name: "RSS with 100 Jobs in flight", Value: rss(hundred), Unit: "MiB"},
		benchtest.Figure{Section: "agent", Name: "RSS with 1,000 Jobs in flight", Value: rss(inFlight), Unit: "MiB"}.Check("≤ 128 MiB", rss(inFlight) <= 128),
		benchtest.Figure{Section: "agent", Name: "CPU with 1,000 Jobs in flight", Value: 100 * benchtest.CPUShare(inFlight, busy), Unit: "% of a core", Note: "the 5 s after the last Job was created"},
		benchtest.Figure{Section: "agent", Name: "CPU while the burst ends", Value: 100 * benchtest.CPUShare(pipe.agentFrom, pipe.agentTo), Unit: "% of a core",
			Note: "from the first pod's end until the last Job was cleaned up: finished events and cleanups"},
	)
}

// queue enqueues n deployments, 8 at a time, and returns their ids.
func queue(b *testing.B, admin *client.AdminClient, runnerID string, n int) []string {
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				d, err := admin.CreateDeployment(b.Context(), api.DeploymentInput{RunnerID: runnerID, Operation: api.OperationPlan,
					Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive(b)}}, StateKey: fmt.Sprintf("burst-%d", i)})
				if err != nil {
					errs <- err
					return
				}
				ids[i] = d.ID
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return ids
}

// floorBurst creates benchBurst copies of one of the agent's Jobs, each with a token Secret owned
// by it (what the agent writes), from 32 goroutines with no client-side rate limit, and returns
// Jobs per second from the first to the last Job seen by a watch.
func floorBurst(b *testing.B, e *env, template *batchv1.Job) float64 {
	ctx := b.Context()
	w := watchJobs(b, e.cluster.Client(), e.ns)
	cs := bareClient(b, e.cluster.RESTConfig)
	next := make(chan int, benchBurst)
	for i := range benchBurst {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range next {
				job := floorJob(template, fmt.Sprintf("floor-burst-%d", i))
				created, err := cs.BatchV1().Jobs(e.ns).Create(ctx, job, metav1.CreateOptions{})
				if err != nil {
					b.Error(err)
					return
				}
				sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-token", Namespace: e.ns,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: created.Name, UID: created.UID}}},
					Data: map[string][]byte{"token": []byte("opj_floor")}}
				if _, err := cs.CoreV1().Secrets(e.ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	last := w.waitCount(b, watch.Added, benchBurst, 5*time.Minute)
	return float64(benchBurst-1) / last.Sub(w.nth(watch.Added, 1)).Seconds()
}

// floorJob is a copy of one of the agent's Jobs under another name, without the agent's labels
// (its informers must not see it) and without what the API server filled in.
func floorJob(of *batchv1.Job, name string) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: of.Namespace, Labels: map[string]string{"bench": "floor"},
		Annotations: of.Annotations}, Spec: *of.Spec.DeepCopy()}
	j.Spec.Selector, j.Spec.ManualSelector = nil, nil
	j.Spec.Template.Labels = map[string]string{"bench": "floor"}
	j.Spec.Suspend = nil
	return j
}

// bareClient is client-go with no client-side rate limit: the floor.
func bareClient(b *testing.B, rc *rest.Config) kubernetes.Interface {
	c := rest.CopyConfig(rc)
	c.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

func mustUsage(b *testing.B, pid int) benchtest.Usage {
	u, err := benchtest.ReadUsage(pid)
	if err != nil {
		b.Error(err)
	}
	return u
}

// finished is the jobWatch's event for a Job the agent is done with: deleted, or kept in the
// history (labelled, its token Secret gone) after the orchestrator acknowledged its result.
const finished watch.EventType = "FINISHED"

// complete is the jobWatch's event for a Job the Job controller marked Complete or Failed: from
// then on the agent can know the attempt ended.
const complete watch.EventType = "COMPLETE"

// jobWatch records when a watch first saw each Job added, deleted and finished.
type jobWatch struct {
	mu    sync.Mutex
	seen  map[watch.EventType]map[string]time.Time
	order map[watch.EventType][]time.Time
	wake  chan struct{}
	hooks []countHook
	marks map[string]benchtest.Usage
}

type countHook struct {
	typ watch.EventType
	n   int
	fn  func()
}

// watchJobs records, from now on, when an informer on the namespace's Jobs (a list and watch
// that resumes by itself if the API server ends the watch) first saw each Job added and deleted.
func watchJobs(b *testing.B, cs kubernetes.Interface, ns string) *jobWatch {
	w := &jobWatch{seen: map[watch.EventType]map[string]time.Time{watch.Added: {}, watch.Deleted: {}, finished: {}, complete: {}},
		order: map[watch.EventType][]time.Time{}, wake: make(chan struct{}), marks: map[string]benchtest.Usage{}}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := factory.Batch().V1().Jobs().Informer()
	name := func(obj any) string {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if j, ok := obj.(*batchv1.Job); ok {
			return j.Name
		}
		return ""
	}
	var existing map[string]bool // Jobs there before the watch started are not counted
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.record(watch.Added, name(obj), existing) },
		UpdateFunc: func(_, obj any) {
			j, ok := obj.(*batchv1.Job)
			if !ok {
				return
			}
			if j.Labels[kubeexec.LabelHistory] != "" {
				w.record(finished, j.Name, existing)
			}
			if jobEnded(j) {
				w.record(complete, j.Name, existing)
			}
		},
		DeleteFunc: func(obj any) {
			w.record(watch.Deleted, name(obj), existing)
			w.record(finished, name(obj), existing)
		},
	}); err != nil {
		b.Fatal(err)
	}
	list, err := cs.BatchV1().Jobs(ns).List(b.Context(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	existing = map[string]bool{}
	for _, j := range list.Items {
		existing[j.Name] = true
	}
	stop := make(chan struct{})
	b.Cleanup(func() { close(stop); factory.Shutdown() })
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	return w
}

// record notes the first time a Job was seen with the event type, and runs the hooks due.
func (w *jobWatch) record(typ watch.EventType, job string, existing map[string]bool) {
	now := time.Now()
	if job == "" || existing[job] {
		return
	}
	w.mu.Lock()
	if _, dup := w.seen[typ][job]; dup {
		w.mu.Unlock()
		return
	}
	w.seen[typ][job] = now
	w.order[typ] = append(w.order[typ], now)
	var run []func()
	for _, h := range w.hooks {
		if h.typ == typ && h.n == len(w.order[typ]) {
			run = append(run, h.fn)
		}
	}
	close(w.wake)
	w.wake = make(chan struct{})
	w.mu.Unlock()
	for _, fn := range run {
		fn()
	}
}

// onAdded runs fn (on the watch's goroutine) when the n-th Job is added.
func (w *jobWatch) onAdded(n int, fn func()) { w.onCount(watch.Added, n, fn) }

// onCount runs fn (on the watch's goroutine) when the n-th Job is seen with the event type.
func (w *jobWatch) onCount(typ watch.EventType, n int, fn func()) {
	w.mu.Lock()
	w.hooks = append(w.hooks, countHook{typ, n, fn})
	w.mu.Unlock()
}

func (w *jobWatch) mark(name string, u benchtest.Usage) {
	w.mu.Lock()
	w.marks[name] = u
	w.mu.Unlock()
}

func (w *jobWatch) marked(name string) benchtest.Usage {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.marks[name]
}

// until waits for cond (called with w.mu held) or fails the benchmark after timeout.
func (w *jobWatch) until(b *testing.B, timeout time.Duration, what string, cond func() bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		ok, wake := cond(), w.wake
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-wake:
		case <-deadline.C:
			b.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

func (w *jobWatch) waitAdded(b *testing.B, name string) time.Time {
	var at time.Time
	w.until(b, 60*time.Second, "Job "+name, func() bool { at = w.seen[watch.Added][name]; return !at.IsZero() })
	return at
}

// waitCount waits until n Jobs were seen with the event type and returns when the n-th was.
func (w *jobWatch) waitCount(b *testing.B, typ watch.EventType, n int, timeout time.Duration) time.Time {
	w.until(b, timeout, fmt.Sprintf("%d Jobs %s", n, typ), func() bool { return len(w.order[typ]) >= n })
	return w.nth(typ, n)
}

// at is when the watch first saw the Job with the event type (zero if never).
func (w *jobWatch) at(typ watch.EventType, job string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[typ][job]
}

func (w *jobWatch) nth(typ watch.EventType, n int) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.order[typ][n-1]
}
