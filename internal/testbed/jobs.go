package testbed

import (
	"context"
	_ "embed" // kwok.yaml
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
)

// Annotations on test bed Pods understood by the kwok stages in kwok.yaml.
const (
	// ExitCodeAnnotation on a Pod makes its containers terminate with this exit code (a decimal
	// number); non-zero fails the Pod. Put it on a Job's pod template to make the Job fail the way
	// a failing terraform run would.
	ExitCodeAnnotation = "testbed.outpost.dev/exit-code"
	// RunDurationAnnotation on a Pod sets how long it runs before it terminates (a Go duration
	// such as "30s"; default 1s), for tests that must act on a running Pod (cancellation,
	// timeouts, adoption after an agent restart).
	RunDurationAnnotation = "testbed.outpost.dev/run-duration"
	// WaitingReasonAnnotation on a Pod keeps it Pending after it is scheduled, its containers
	// waiting with this reason (such as "ImagePullBackOff") and a Warning event "Failed" recorded,
	// for tests of start-up timeouts that report why a Pod never started.
	WaitingReasonAnnotation = "testbed.outpost.dev/waiting-reason"
)

// FakeNodeName is the name of the test bed's fake Node (a Job-enabled test bed has one, with
// practically unlimited CPU, memory and Pods).
const FakeNodeName = "outpost-testbed-node"

//go:embed kwok.yaml
var kwokConfig []byte

// schedulerConfig is the kube-scheduler configuration; %s is the kubeconfig path. QPS and burst
// are raised because load tests schedule hundreds of Pods at once.
const schedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 200
  burst: 400
leaderElection:
  leaderElect: false
`

// controllers are the kube-controller-manager controllers the test bed runs. node-lifecycle
// removes the not-ready taint from a Node once it is Ready (without it no Pod is ever scheduled);
// serviceaccount creates the "default" ServiceAccount Pods need; deployment and replicaset make
// Helm installs with --wait complete; disruption keeps PodDisruptionBudgets' status, without
// which the Eviction API refuses every eviction of a pod a budget selects.
var controllers = []string{
	"job-controller",
	"ttl-after-finished-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"node-lifecycle-controller",
	"deployment-controller",
	"replicaset-controller",
	"disruption-controller",
}

// nodeControllers are the controllers a real node needs on top of controllers: EndpointSlices for
// kube-proxy and CoreDNS, and the kube-root-ca.crt ConfigMap every Pod's service account volume
// mounts.
var nodeControllers = []string{
	"endpointslice-controller",
	"root-ca-certificate-publisher-controller",
}

// lifecycleControllers and lifecycleArgs make a lost node's Pods go within seconds when the test
// bed runs several real nodes (Options.Nodes): taint-eviction deletes the Pods of a node tainted
// unreachable or not-ready once their toleration (5 s, lifecycleAPIServerArgs) ends, and the pod
// garbage collector deletes the Pods bound to a Node that no longer exists.
var lifecycleControllers = []string{"taint-eviction-controller", "pod-garbage-collector-controller"}

var lifecycleArgs = []string{"--node-monitor-grace-period=10s", "--node-monitor-period=2s"}

// lifecycleAPIServerArgs shorten the tolerations the API server gives every Pod of a not-ready
// or unreachable node (default 300 s).
var lifecycleAPIServerArgs = []string{"--default-not-ready-toleration-seconds=5", "--default-unreachable-toleration-seconds=5"}

// startControlLoops starts kube-controller-manager and kube-scheduler, which Jobs on kwok's fake
// node and Pods on the real node both need.
func (c *Cluster) startControlLoops(binDir string, detach bool) error {
	kubeconfig := c.path("kubeconfig")
	ctrls := controllers
	if c.Node {
		ctrls = append(slices.Clip(ctrls), nodeControllers...)
	}
	var extra []string
	if len(c.nodes) > 1 {
		ctrls = append(slices.Clip(ctrls), lifecycleControllers...)
		extra = lifecycleArgs
	}
	kcm, err := startProcess(c.Dir, "kube-controller-manager", filepath.Join(binDir, "kube-controller-manager"), append([]string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--secure-port=0", // no health endpoint needed; and no fixed port to collide with other test beds
		"--leader-elect=false",
		"--controllers=" + strings.Join(ctrls, ","),
		"--root-ca-file=" + c.path("pki/ca.crt"),
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--concurrent-job-syncs=20",
		"--concurrent-gc-syncs=20",
		"--use-service-account-credentials=false",
	}, extra...), nil, detach)
	if err != nil {
		return err
	}
	if err := c.track(kcm); err != nil {
		return err
	}

	sched, err := startProcess(c.Dir, "kube-scheduler", filepath.Join(binDir, "kube-scheduler"), []string{
		"--config=" + c.path("scheduler.yaml"),
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--secure-port=0",
	}, nil, detach)
	if err != nil {
		return err
	}
	return c.track(sched)
}

// startKwok starts kwok; waitKwokReady then waits until its fake Node has run a probe Pod.
func (c *Cluster) startKwok(binDir string, detach bool) (*process, error) {
	kubeconfig := c.path("kubeconfig")
	kwok, err := startProcess(c.Dir, "kwok", filepath.Join(binDir, "kwok"), []string{
		"--kubeconfig=" + kubeconfig,
		"--config=" + c.path("kwok/kwok.yaml"),
	}, []string{
		// kwok would otherwise also load ~/.kwok/kwok.yaml.
		"KWOK_WORKDIR=" + c.path("kwok"),
	}, detach)
	if err != nil {
		return nil, err
	}
	return kwok, c.track(kwok)
}

func (c *Cluster) waitKwokReady(ctx context.Context, kwok *process) error {
	ctx, cancel := context.WithTimeout(ctx, jobsReadyTimeout)
	defer cancel()
	return c.waitJobsReady(ctx, c.proc("kube-controller-manager"), c.proc("kube-scheduler"), kwok)
}

// proc returns the tracked process of a component.
func (c *Cluster) proc(name string) *process {
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	panic("testbed: no component " + name)
}

// waitJobsReady creates the fake Node and proves, step by step, that a Pod goes all the way to
// Succeeded, so a broken part shows at start-up, named, rather than as a Job that never finishes.
func (c *Cluster) waitJobsReady(ctx context.Context, kcm, sched, kwok *process) error {
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: FakeNodeName,
		Annotations: map[string]string{
			"kwok.x-k8s.io/node":           "fake",
			"node.alpha.kubernetes.io/ttl": "0",
		},
		Labels: map[string]string{
			"kubernetes.io/hostname": FakeNodeName,
			"kubernetes.io/os":       "linux",
			"kubernetes.io/arch":     "amd64",
			"type":                   "kwok",
		},
	}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testbed: creating the fake Node: %w", err)
	}

	var lastNode *corev1.Node
	err = c.poll(ctx, func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, FakeNodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // transient; the deadline reports it
		}
		lastNode = n
		return nodeReady(n), nil
	})
	if err != nil {
		return c.jobsFailure(err, kwok, "did not make the fake Node Ready")
	}
	err = c.poll(ctx, func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, FakeNodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // transient
		}
		lastNode = n
		for _, t := range n.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return c.jobsFailure(err, kcm, fmt.Sprintf("did not remove the not-ready taint from the Ready fake Node (taints %v)", lastNode.Spec.Taints))
	}

	// The probe Pod needs the "default" ServiceAccount, which the controller manager creates.
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "testbed-probe-" + rand.String(5), Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "probe", Image: "registry.invalid/outpost/testbed-probe"}},
		},
	}
	if err := c.createProbe(ctx, cs, probe); err != nil {
		return err
	}
	defer deleteProbe(ctx, cs, probe)
	if _, err := c.waitPod(ctx, cs, probe, func(p *corev1.Pod) (bool, error) { return p.Spec.NodeName != "", nil }); err != nil {
		return c.jobsFailure(err, sched, "did not schedule a probe Pod onto the Ready fake Node")
	}
	lastPod, err := c.waitPod(ctx, cs, probe, func(p *corev1.Pod) (bool, error) { return p.Status.Phase == corev1.PodSucceeded, nil })
	if err != nil {
		phase := corev1.PodPhase("unknown")
		if lastPod != nil {
			phase = lastPod.Status.Phase
		}
		return c.jobsFailure(err, kwok, fmt.Sprintf("did not take the scheduled probe Pod to Succeeded (phase %q)", phase))
	}
	return nil
}

// createProbe creates a probe Pod, retrying until the namespace's "default" ServiceAccount, which
// the controller manager creates, lets it in.
func (c *Cluster) createProbe(ctx context.Context, cs kubernetes.Interface, probe *corev1.Pod) error {
	var createErr error
	err := c.poll(ctx, func() (bool, error) {
		_, createErr = cs.CoreV1().Pods(probe.Namespace).Create(ctx, probe, metav1.CreateOptions{})
		return createErr == nil || apierrors.IsAlreadyExists(createErr), nil
	})
	if err != nil {
		return c.jobsFailure(fmt.Errorf("%w (last error creating a Pod: %w)", err, createErr),
			c.proc("kube-controller-manager"), "did not create the default ServiceAccount")
	}
	return nil
}

func deleteProbe(ctx context.Context, cs kubernetes.Interface, probe *corev1.Pod) {
	_ = cs.CoreV1().Pods(probe.Namespace).Delete(context.WithoutCancel(ctx), probe.Name,
		metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
}

func (c *Cluster) jobsFailure(err error, p *process, what string) error {
	if ce := c.exitedErr(); ce != nil {
		return ce
	}
	return p.failure(fmt.Sprintf("%s (%v)", what, err))
}

// poll calls cond every 100 ms until it returns true, an error, a component exits, or ctx ends.
func (c *Cluster) poll(ctx context.Context, cond func() (bool, error)) error {
	for {
		if err := c.exitedErr(); err != nil {
			return err
		}
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPod polls pod until done says so, and returns the last Pod read (nil if none was), so a
// failure can say where the Pod got to.
func (c *Cluster) waitPod(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, done func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	var last *corev1.Pod
	err := c.poll(ctx, func() (bool, error) {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // transient
		}
		last = p
		return done(p)
	})
	return last, err
}
