package testbed_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// Tests of the real node: real containers, real exit codes, real logs, real Services and DNS.

// realJob is a Job whose one container "main" runs the toolbox image with args on the real node.
func realJob(ns, name string, args ...string) *batchv1.Job {
	job := newJob(ns, name, nil)
	spec := &job.Spec.Template.Spec
	spec.Containers[0].Image = testbed.ToolboxImage
	spec.Containers[0].Args = args
	spec.Containers[0].ImagePullPolicy = corev1.PullNever
	testbed.OnRealNode(spec)
	return job
}

// realPod is a Pod running the toolbox image with args on the real node.
func realPod(ns, name string, labels map[string]string, restart corev1.RestartPolicy, args ...string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 restart,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "main", Image: testbed.ToolboxImage, Args: args, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
	testbed.OnRealNode(&pod.Spec)
	return pod
}

// jobPod returns the one Pod of a Job.
func jobPod(t *testing.T, c *testbed.Cluster, ns, job string) *corev1.Pod {
	t.Helper()
	pods, err := c.Client().CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("Job %s has %d Pods, want 1", job, len(pods.Items))
	}
	return &pods.Items[0]
}

// logs returns the logs of a Pod's container "main" the way `kubectl logs` gets them: from the
// API server, which asks the node's kubelet.
func logs(t *testing.T, c *testbed.Cluster, ns, pod string) string {
	t.Helper()
	b, err := c.Client().CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "main"}).DoRaw(t.Context())
	if err != nil {
		t.Fatalf("logs of %s: %v", pod, err)
	}
	return string(b)
}

func TestRealJobCompletesWithLogs(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	testbed.RequireNode(t, c)
	ns := testbed.NewNamespace(t, c)
	start := time.Now()
	word := "hello-" + rand.String(8)
	if _, err := c.Client().BatchV1().Jobs(ns).Create(t.Context(), realJob(ns, "ok", "echo", word), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, c, ns, "ok")
	if !hasCondition(got, batchv1.JobComplete) {
		t.Fatalf("Job finished without Complete: %+v", got.Status.Conditions)
	}
	t.Logf("real Job complete %s after create", time.Since(start).Round(time.Millisecond))
	pod := jobPod(t, c, ns, "ok")
	if pod.Spec.NodeName != testbed.RealNodeName {
		t.Errorf("Pod ran on %q, want the real node %q", pod.Spec.NodeName, testbed.RealNodeName)
	}
	if !strings.HasPrefix(pod.Status.PodIP, "10.246.") {
		t.Errorf("Pod IP %q, want one from the node's bridge (10.246.0.0/24)", pod.Status.PodIP)
	}
	st := pod.Status.ContainerStatuses
	if len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 0 || st[0].ContainerID == "" {
		t.Fatalf("container status %+v, want one terminated with exit code 0 by a real runtime", st)
	}
	if out := logs(t, c, ns, pod.Name); out != word+"\n" {
		t.Errorf("logs = %q, want %q", out, word+"\n")
	}
}

func TestRealJobFailsWithExitCode(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	testbed.RequireNode(t, c)
	ns := testbed.NewNamespace(t, c)
	job := realJob(ns, "fail", "fail", "7", "terraform said no")
	job.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action: batchv1.PodFailurePolicyActionFailJob,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			ContainerName: new("main"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{7},
		},
	}}}
	if _, err := c.Client().BatchV1().Jobs(ns).Create(t.Context(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, c, ns, "fail")
	failed := condition(got, batchv1.JobFailed)
	if failed == nil || failed.Reason != batchv1.JobReasonPodFailurePolicy {
		t.Fatalf("Job conditions %+v, want Failed by the pod failure policy on exit code 7", got.Status.Conditions)
	}
	pod := jobPod(t, c, ns, "fail")
	st := pod.Status.ContainerStatuses
	if len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 7 {
		t.Fatalf("container status %+v, want terminated with exit code 7", st)
	}
	if out := logs(t, c, ns, pod.Name); !strings.Contains(out, "terraform said no") {
		t.Errorf("logs = %q, want the container's stderr", out)
	}
}

// runToCompletion creates a Pod that runs once, waits for it to finish and returns its phase and
// logs.
func runToCompletion(t *testing.T, c *testbed.Cluster, pod *corev1.Pod) (corev1.PodPhase, string) {
	t.Helper()
	cs := c.Client()
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	for {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("waiting for Pod %s: %v", pod.Name, err)
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			return p.Status.Phase, logs(t, c, pod.Namespace, pod.Name)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Pod %s did not finish: %+v", pod.Name, p.Status)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// serveBehindService runs an HTTP server Pod answering text on port 8080 and a ClusterIP Service
// "web" on port 80 in front of it, and returns the Service's ClusterIP.
func serveBehindService(t *testing.T, c *testbed.Cluster, ns, text string) string {
	t.Helper()
	cs := c.Client()
	labels := map[string]string{"app": "web"}
	server := realPod(ns, "web", labels, corev1.RestartPolicyAlways, "serve", ":8080", text)
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), server, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	created, err := cs.CoreV1().Services(ns).Create(t.Context(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created.Spec.ClusterIP
}

func TestServiceClusterIPReachesPod(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	testbed.RequireNode(t, c)
	ns := testbed.NewNamespace(t, c)
	text := "served-" + rand.String(8)
	ip := serveBehindService(t, c, ns, text)
	// The client retries until kube-proxy has programmed the Service's endpoint.
	phase, out := runToCompletion(t, c, realPod(ns, "client", nil, corev1.RestartPolicyNever, "get", "-for", "60s", "http://"+ip+"/"))
	if phase != corev1.PodSucceeded || !strings.HasSuffix(out, text) {
		t.Fatalf("client Pod %s, output %q; want Succeeded with %q from the server behind ClusterIP %s", phase, out, text, ip)
	}
}

func TestClusterDNSResolvesService(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	testbed.RequireNode(t, c)
	ns := testbed.NewNamespace(t, c)
	text := "named-" + rand.String(8)
	ip := serveBehindService(t, c, ns, text)
	// By the short name, through the Pod's search path, and by the fully qualified name.
	phase, out := runToCompletion(t, c, realPod(ns, "resolve", nil, corev1.RestartPolicyNever, "resolve", "-for", "60s", "web."+ns+".svc.cluster.local"))
	if phase != corev1.PodSucceeded || strings.TrimSpace(lastLine(out)) != ip {
		t.Fatalf("resolve Pod %s, output %q; want Succeeded printing the ClusterIP %s", phase, out, ip)
	}
	phase, out = runToCompletion(t, c, realPod(ns, "client", nil, corev1.RestartPolicyNever, "get", "-for", "60s", "http://web/"))
	if phase != corev1.PodSucceeded || !strings.HasSuffix(out, text) {
		t.Fatalf("client Pod %s, output %q; want Succeeded with %q from http://web/", phase, out, text)
	}
}

// A Pod reaches a server of the test on HostIP (as job Pods reach the orchestrator), and the API
// server through the cluster's `kubernetes` Service (as the agent does, in-cluster).
func TestPodReachesHostAndAPIServer(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	testbed.RequireNode(t, c)
	ns := testbed.NewNamespace(t, c)
	text := "host-" + rand.String(8)
	_, port, err := net.SplitHostPort(serveOnHostIP(t, c, text))
	if err != nil {
		t.Fatal(err)
	}

	phase, out := runToCompletion(t, c, realPod(ns, "host", nil, corev1.RestartPolicyNever, "get", "http://"+net.JoinHostPort(c.HostIP, port)+"/"))
	if phase != corev1.PodSucceeded || !strings.HasSuffix(out, text) {
		t.Fatalf("Pod %s, output %q; want Succeeded with %q from the test's server on %s", phase, out, text, c.HostIP)
	}
	phase, out = runToCompletion(t, c, realPod(ns, "api", nil, corev1.RestartPolicyNever, "get", "https://kubernetes.default.svc/version"))
	if phase != corev1.PodSucceeded || !strings.Contains(out, fmt.Sprintf("%q", testbed.KubernetesVersion)) {
		t.Fatalf("Pod %s, output %q; want the API server's version through the kubernetes Service", phase, out)
	}
}

// serveOnHostIP runs an HTTP server of the test on HostIP answering text, until the test ends,
// and returns its address.
func serveOnHostIP(t *testing.T, c *testbed.Cluster, text string) string {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", net.JoinHostPort(c.HostIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, text)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}
