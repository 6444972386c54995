package pods

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/benchtest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// cliStartIdle is the idle gap before every sample, the product's and the floor's alike, outside
// the timed region: back to back, a sample would absorb the previous pod's teardown.
const cliStartIdle = time.Second

// BenchmarkCLIStart measures how long a deployment takes to reach its CLI in a real job pod,
// beside the floor: a bare pod of the same job image, created directly with client-go.
//
// The product: plans of a small configuration, run one after the other by the chart's agent
// (from its image) in real job pods on the test bed's real node, OpenTofu from the default job
// image, present on the node. Timed from just before the admin API's create to the CLI's first
// line ("Initializing …" of init) by containerd's log timestamp of the job pod's main container,
// and to the moment that line is in the orchestrator's log (read every 10 ms, so late by up to
// 10 ms). Where the time goes, by the same clock: the pod seen by a watch on the jobs namespace,
// the end of outpost-inject's copy of the job runner (its one line), main's first line (the job
// runner's, after it fetched the job spec), the CLI's first line, visible in the orchestrator.
//
// The floor: a bare pod created directly in the same jobs namespace, with the product pod's
// service account, pod and container security context, resources, image pull secrets and pull
// policy, on the same node (a nodeSelector, so the scheduler still places it), running
// `tofu version` from the job image; timed from just before the create to its first line by
// containerd's log timestamp (the API serves a container's log only once the kubelet's status
// shows it running, about a second late, so reading the log as it comes cannot be the floor).
//
// Product and floor samples alternate, each after an idle gap of cliStartIdle.
// OUTPOST_BENCH_CLI_RUNS sets the number of timed runs of each (default 10), after two untimed
// plans and one untimed bare pod.
//
// Run: make bench (or go test -run '^$' -bench CLIStart -benchtime 1x ./agent/e2e/pods/).
func BenchmarkCLIStart(b *testing.B) {
	runs := 10
	if v, err := strconv.Atoi(os.Getenv("OUTPOST_BENCH_CLI_RUNS")); err == nil && v > 0 {
		runs = v
	}
	const warmup = 2
	began := time.Now()
	images(b, testbed.Shared(b))
	e := newEnv(b, envOptions{})
	e.waitConnected(imagesVersion)
	var prod []podStart
	var floor, floorInit []time.Duration
	for i := 0; i < b.N; i++ {
		prod, floor, floorInit = prod[:0], floor[:0], floorInit[:0]
		var bare, bareInit *corev1.Pod
		for range warmup {
			time.Sleep(cliStartIdle)
			s := e.cliStart()
			bare, bareInit = e.barePod(s.pod, false), e.barePod(s.pod, true)
		}
		for _, p := range []*corev1.Pod{bare, bareInit} {
			time.Sleep(cliStartIdle)
			e.bareStart(p)
		}
		for r := range runs {
			time.Sleep(cliStartIdle)
			s := e.cliStart()
			prod = append(prod, s)
			time.Sleep(cliStartIdle)
			f := e.bareStart(bare)
			floor = append(floor, f)
			time.Sleep(cliStartIdle)
			fi := e.bareStart(bareInit)
			floorInit = append(floorInit, fi)
			benchtest.Progress("real pod: run %d of %d: CLI's first line after %s (in the orchestrator's log after %s); bare pod's first line after %s, with an init container %s",
				r+1, runs, s.cliLine.Round(time.Millisecond), s.visible.Round(time.Millisecond), f.Round(time.Millisecond), fi.Round(time.Millisecond))
		}
	}
	if len(prod) > 0 {
		// Not b.Logf: go test cuts a benchmark's log after a few lines.
		benchtest.Progress("real pod: the last plan's job pod, by containerd's timestamps since the enqueue (outpost-inject's line, then main's):")
		for l := range strings.Lines(prod[len(prod)-1].excerpt) {
			benchtest.Progress("real pod:   %s", strings.TrimSuffix(l, "\n"))
		}
	}
	figures := cliStartFigures(prod, floor, floorInit)
	if err := benchtest.Write(benchtest.Results{Benchmark: "real-pod", Started: began, Seconds: time.Since(began).Seconds(), Figures: figures,
		Warmup: fmt.Sprintf("the test bed with its real node, the images and the chart install; %d plans and 1 bare pod before the %d timed of each; an idle gap of %s before every sample", warmup, runs, cliStartIdle)}); err != nil {
		b.Fatal(err)
	}
	if benchtest.Dir() == "" {
		fmt.Print("\n" + benchtest.Table([]benchtest.Results{{Figures: figures}}))
	}
}

// cliStartFigures are the benchmark's figures: the product beside the bare pod, then where the
// product's time goes (medians, each since the enqueue).
func cliStartFigures(prod []podStart, floor, floorInit []time.Duration) []benchtest.Figure {
	const sec, parts = "real pod", "real pod, where it goes (p50 after enqueue)"
	col := func(f func(podStart) time.Duration) []time.Duration {
		out := make([]time.Duration, len(prod))
		for i, s := range prod {
			out[i] = f(s)
		}
		return out
	}
	pct := func(ds []time.Duration, p float64) float64 { return benchtest.Ms(benchtest.Percentile(ds, p)) }
	cli, visible := col(func(s podStart) time.Duration { return s.cliLine }), col(func(s podStart) time.Duration { return s.visible })
	const floorName = "bare pod, tofu version"
	goal := func(f benchtest.Figure) benchtest.Figure { return f.Check("≤ 1.25× floor", f.Ratio() <= 1.25) }
	return []benchtest.Figure{
		goal(benchtest.Figure{Section: sec, Name: "enqueue → CLI's first line (containerd's timestamp) p50", Value: pct(cli, 50), Unit: "ms",
			Floor: pct(floor, 50), FloorName: floorName,
			Note: fmt.Sprintf("%d plans on the real node (containerd, runc, kubelet), OpenTofu from the job image, interleaved with %d bare pods of the job image (same namespace, node, service account, security context, resources, pull policy) running tofu version, timed from the create to their first line; an idle gap of %s before each", len(prod), len(floor), cliStartIdle)}),
		goal(benchtest.Figure{Section: sec, Name: "enqueue → CLI's first line in the orchestrator's log p50", Value: pct(visible, 50), Unit: "ms",
			Floor: pct(floor, 50), FloorName: floorName, Note: "the orchestrator's log read every 10 ms"}),
		{Section: sec, Name: "enqueue → CLI's first line in the orchestrator's log p99", Value: pct(visible, 99), Unit: "ms",
			Floor: pct(floor, 99), FloorName: floorName + " p99"},
		{Section: sec, Name: "enqueue → CLI's first line (containerd's timestamp) p50", Value: pct(cli, 50), Unit: "ms",
			Floor: pct(floorInit, 50), FloorName: "bare pod with an init container",
			Note: "the bare pod with the product's init container before main, running outpost-agent version instead of the copy: what a second container in a row costs on this kubelet"},
		{Section: parts, Name: "job pod exists (seen by a watch)", Value: pct(col(func(s podStart) time.Duration { return s.podSeen }), 50), Unit: "ms"},
		{Section: parts, Name: "outpost-inject has copied the job runner", Value: pct(col(func(s podStart) time.Duration { return s.injected }), 50), Unit: "ms"},
		{Section: parts, Name: "main's first line (job runner, spec fetched)", Value: pct(col(func(s podStart) time.Duration { return s.mainLine }), 50), Unit: "ms"},
		{Section: parts, Name: "the CLI's first line", Value: pct(cli, 50), Unit: "ms"},
		{Section: parts, Name: "visible in the orchestrator's log", Value: pct(visible, 50), Unit: "ms"},
		{Section: parts, Name: "log shipping: CLI's first line → the orchestrator's log (per plan)", Value: pct(col(func(s podStart) time.Duration { return s.visible - s.cliLine }), 50), Unit: "ms",
			Note: "the median of each plan's own difference, not the difference of the medians above; the log read every 10 ms"},
	}
}

// podStart is one plan's way to its CLI, each time since just before the enqueue.
type podStart struct {
	// pod is the job pod as the watch first saw it.
	pod *corev1.Pod
	// podSeen is when a watch on the jobs namespace saw the pod; injected the timestamp of
	// outpost-inject's last line (written once the copy is complete); mainLine and cliLine the
	// timestamps of main's first line and of the CLI's first ("Initializing"); visible when the
	// orchestrator's log held that line.
	podSeen, injected, mainLine, cliLine, visible time.Duration
	// excerpt is outpost-inject's line and main's up to the CLI's first, each with its time
	// since the enqueue, for the benchmark's log.
	excerpt string
}

// cliStart enqueues one plan and times its way to the CLI, then follows it to its end.
func (e *env) cliStart() podStart {
	e.t.Helper()
	ctx := e.t.Context()
	pods := e.c.Client().CoreV1().Pods(e.jobsNS)
	sel := kubeexec.LabelManagedBy + "=" + kubeexec.ManagedByValue
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		e.t.Fatal(err)
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		e.t.Fatal(err)
	}
	defer w.Stop()
	seen := make(chan *corev1.Pod, 1)
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
				seen <- p
				return
			}
		}
	}()

	t0 := time.Now()
	d := e.enqueue(api.OperationPlan, greeting, "bench")
	var s podStart
	select {
	case p := <-seen:
		s.podSeen, s.pod = time.Since(t0), p
	case <-time.After(2 * time.Minute):
		e.t.Fatalf("no job pod of %s after 2 minutes", d.ID)
	}
	s.visible = e.firstCLILine(d.ID, t0)

	main, err := e.podLines(s.pod.Name, podtemplate.MainContainer, func(ls []logLine) bool { return cliLine(ls) >= 0 })
	if err != nil {
		e.t.Fatal(err)
	}
	inject, err := e.podLines(s.pod.Name, kubeexec.InjectContainer, func(ls []logLine) bool { return len(ls) > 0 })
	if err != nil {
		e.t.Fatal(err)
	}
	s.injected = inject[len(inject)-1].at.Sub(t0)
	s.mainLine = main[0].at.Sub(t0)
	s.cliLine = main[cliLine(main)].at.Sub(t0)
	for _, l := range append(inject[len(inject)-1:], main[:cliLine(main)+1]...) {
		s.excerpt += fmt.Sprintf("%8s  %s\n", l.at.Sub(t0).Round(time.Millisecond), l.text)
	}
	if run := e.follow(d.ID, t0, 2*time.Minute); run.d.Status != api.StatusSucceeded {
		e.t.Fatalf("plan %s: %s (%s) %s\n%s", d.ID, run.d.Status, run.d.Reason, run.d.Message, run.log)
	}
	return s
}

// cliLine is the index of the CLI's first line in a job pod's main log, or -1.
func cliLine(ls []logLine) int {
	for i, l := range ls {
		if strings.HasPrefix(l.text, "Initializing") {
			return i
		}
	}
	return -1
}

// barePod is the floor's pod, made from a product job pod: the same namespace, node (by a
// nodeSelector: the scheduler still places it), service account and its token's mount,
// security contexts, image, pull policy and pull secrets, resources; one container running
// `tofu version`, nothing injected, no token Secret and no emptyDir. withInit puts the job
// pod's init container (outpost-inject's image, security context and resources) before it,
// running `outpost-agent version` instead of the copy.
func (e *env) barePod(job *corev1.Pod, withInit bool) *corev1.Pod {
	e.t.Helper()
	ctx := e.t.Context()
	// The pod as it is now: scheduled, so its node is known.
	job, err := e.c.Client().CoreV1().Pods(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var main *corev1.Container
	for i := range job.Spec.Containers {
		if job.Spec.Containers[i].Name == podtemplate.MainContainer {
			main = &job.Spec.Containers[i]
		}
	}
	if main == nil || job.Spec.NodeName == "" {
		e.t.Fatalf("job pod %s has no main container or no node", job.Name)
	}
	node, err := e.c.Client().CoreV1().Nodes().Get(ctx, job.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	bare := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "bare-", Namespace: job.Namespace, Labels: map[string]string{"outpost.dev/bench": "bare"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			ServiceAccountName:           job.Spec.ServiceAccountName,
			AutomountServiceAccountToken: job.Spec.AutomountServiceAccountToken,
			SecurityContext:              job.Spec.SecurityContext.DeepCopy(),
			ImagePullSecrets:             job.Spec.ImagePullSecrets,
			NodeSelector:                 map[string]string{corev1.LabelHostname: node.Labels[corev1.LabelHostname]},
			Containers: []corev1.Container{{
				Name: podtemplate.MainContainer, Image: main.Image, ImagePullPolicy: main.ImagePullPolicy,
				Command:         []string{"tofu", "version"},
				Env:             []corev1.EnvVar{{Name: "CHECKPOINT_DISABLE", Value: "1"}},
				Resources:       *main.Resources.DeepCopy(),
				SecurityContext: main.SecurityContext.DeepCopy(),
			}},
		},
	}
	if withInit {
		for _, c := range job.Spec.InitContainers {
			if c.Name == kubeexec.InjectContainer {
				bare.Spec.InitContainers = []corev1.Container{{Name: c.Name, Image: c.Image, ImagePullPolicy: c.ImagePullPolicy, Args: []string{"version"},
					Resources: *c.Resources.DeepCopy(), SecurityContext: c.SecurityContext.DeepCopy()}}
			}
		}
		if len(bare.Spec.InitContainers) == 0 {
			e.t.Fatalf("job pod %s has no %s init container", job.Name, kubeexec.InjectContainer)
		}
	}
	return bare
}

// bareStart creates a copy of the bare pod and returns the time from just before the create to
// its first line by containerd's timestamp, then deletes it and waits until it is gone.
func (e *env) bareStart(tpl *corev1.Pod) time.Duration {
	e.t.Helper()
	ctx := e.t.Context()
	pods := e.c.Client().CoreV1().Pods(tpl.Namespace)
	t0 := time.Now()
	p, err := pods.Create(ctx, tpl.DeepCopy(), metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating the bare pod: %v", err)
	}
	testbed.WaitFor(e.t, 2*time.Minute, "bare pod "+p.Name+" to end", func() (bool, string) {
		cur, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if cur.Status.Phase == corev1.PodFailed {
			e.t.Fatalf("bare pod %s failed: %s", p.Name, containerStates(cur.Status.ContainerStatuses))
		}
		return cur.Status.Phase == corev1.PodSucceeded, string(cur.Status.Phase) + " " + containerStates(cur.Status.ContainerStatuses)
	})
	lines, err := e.podLines(p.Name, podtemplate.MainContainer, func(ls []logLine) bool { return len(ls) > 0 })
	if err != nil {
		e.t.Fatal(err)
	}
	if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		e.t.Fatal(err)
	}
	testbed.WaitFor(e.t, time.Minute, "bare pod "+p.Name+" to be gone", func() (bool, string) {
		_, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	return lines[0].at.Sub(t0)
}

// logLine is one line of a container's log with the container runtime's timestamp of it.
type logLine struct {
	at   time.Time
	text string
}

// podLines reads a container's log with the runtime's timestamps (PodLogOptions.Timestamps:
// when containerd read each line from the container, however late the log is read) until done
// accepts the lines, for up to 30 s.
func (e *env) podLines(pod, container string, done func([]logLine) bool) ([]logLine, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		raw, err := e.c.Client().CoreV1().Pods(e.jobsNS).GetLogs(pod, &corev1.PodLogOptions{Container: container, Timestamps: true}).DoRaw(e.t.Context())
		var lines []logLine
		if err == nil {
			lines, err = parseLogLines(raw)
		}
		if err == nil && done(lines) {
			return lines, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("the lines waited for are not there")
			}
			return nil, fmt.Errorf("the log of %s[%s] after 30 s: %w\n%s", pod, container, err, raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// parseLogLines splits a log read with timestamps: "<RFC 3339 time> <line>" per line.
func parseLogLines(raw []byte) ([]logLine, error) {
	var out []logLine
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		ts, text, _ := strings.Cut(sc.Text(), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return nil, fmt.Errorf("a log line without a timestamp: %q", sc.Text())
		}
		out = append(out, logLine{at: at, text: text})
	}
	return out, sc.Err()
}

// firstCLILine reads the deployment's log every 10 ms until the CLI's first line is there and
// returns the time since t0.
func (e *env) firstCLILine(id string, t0 time.Time) time.Duration {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		chunk, err := e.admin.GetLogs(context.Background(), id, 0, 1<<20)
		if err == nil && strings.Contains(string(chunk.Data), "\nInitializing") {
			return time.Since(t0)
		}
		if time.Now().After(deadline) {
			d, _ := e.admin.GetDeployment(context.Background(), id)
			e.t.Fatalf("no CLI line in the log of %s after 2 minutes (%+v)", id, d)
		}
	}
	return 0
}
