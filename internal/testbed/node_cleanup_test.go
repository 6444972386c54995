package testbed

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Stopping a test bed with a real node that runs a Pod behind a Service leaves nothing behind on
// this machine: no process (zombies aside), mount, network namespace, link, address, iptables
// rule or cgroup. Both ways of stopping: Stop, and StopDir of a detached test bed.
func TestNodeCleanup(t *testing.T) {
	for _, detach := range []bool{false, true} {
		t.Run(fmt.Sprintf("detach=%v", detach), func(t *testing.T) {
			before, err := SnapshotHost(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{Node: true}
			if detach {
				opts.Dir, opts.Detach = filepath.Join(t.TempDir(), "bed"), true
			}
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			c, err := Start(ctx, opts)
			if IsNodeUnavailable(err) && !inCI() {
				t.Skipf("skipped: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			stopped := false
			defer func() {
				if !stopped && detach {
					_ = StopDir(c.Dir)
				} else if !stopped {
					_ = c.Stop()
				}
			}()
			runLongPod(t, c)
			bed := describeNode(t, c)

			if detach {
				err = StopDir(c.Dir)
			} else {
				err = c.Stop()
			}
			stopped = true
			if err != nil {
				t.Fatalf("stopping: %v", err)
			}
			checkNothingLeft(t, before, bed)
		})
	}
}

// runLongPod runs a Pod that keeps running (a container, its shim, its volumes and its network
// namespace) behind a Service (iptables rules), so the stop has something to clean up.
func runLongPod(t *testing.T, c *Cluster) {
	t.Helper()
	cs := c.Client()
	ns := "default"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "long", Namespace: ns, Labels: map[string]string{"app": "long"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: ToolboxImage, Args: []string{"serve", ":8080", "x"}, ImagePullPolicy: corev1.PullNever,
		}}},
	}
	OnRealNode(&pod.Spec)
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "long", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: pod.Labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := cs.CoreV1().Services(ns).Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), "long", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodRunning {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Pod did not start: %s", podSummary(p))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// describeNode records a running node's traces and checks they exist, so that their absence after
// the stop means something.
func describeNode(t *testing.T, c *Cluster) *NodeTraces {
	t.Helper()
	bed, err := c.traceNode()
	if c.detached {
		bed, err = TraceDir(c.Dir) // as another process (`make demo-down`'s test) would
	}
	if err != nil {
		t.Fatal(err)
	}
	var container bool
	for _, p := range bed.Processes() {
		container = container || strings.HasSuffix(p, ": /testbed-pod serve :8080 x")
	}
	if !container {
		t.Fatalf("the Pod's container is not among the node's processes: %v", bed.Processes())
	}
	for _, dir := range bed.cgroups {
		if _, err := os.Stat(filepath.Join(dir, "kubepods")); err != nil {
			t.Fatalf("the kubelet's cgroups: %v", err)
		}
	}
	return bed
}

func checkNothingLeft(t *testing.T, before HostState, bed *NodeTraces) {
	t.Helper()
	left, err := bed.Left(t.Context(), before)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range left {
		t.Error(l)
	}
}

// A node's teardown deletes its own veth, never a link another test bed has since been given
// under the same name: once a node is gone its block and veth name are free, and deleting by name
// alone took a concurrent test bed's API server address with it (a demo test failed with
// "connection refused" while another test bed stopped a node hard).
func TestNodeTeardownSparesALinkThatReusedItsName(t *testing.T) {
	if _, err := lookPath("ip"); err != nil {
		if inCI() {
			t.Fatal(err)
		}
		t.Skipf("skipped: %v", err)
	}
	ctx := t.Context()
	name := fmt.Sprintf("otbq%d", os.Getpid()%1000000)
	addVeth := func() int {
		t.Helper()
		if err := run(ctx, "ip", "link", "add", name, "type", "veth", "peer", "name", name+"p"); err != nil {
			t.Fatal(err)
		}
		l, err := net.InterfaceByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return l.Index
	}
	t.Cleanup(func() { _ = run(context.WithoutCancel(ctx), "ip", "link", "del", name) })

	ours := addVeth()
	if err := run(ctx, "ip", "link", "del", name); err != nil { // the node's link goes first, as in StopNodeHard
		t.Fatal(err)
	}
	theirs := addVeth() // another test bed's node is given the same name
	if theirs == ours {
		t.Fatalf("the kernel reused interface index %d at once; the test cannot tell the links apart", ours)
	}
	if err := removeNodeLeftovers(nodeLeftovers{Veth: name, VethIndex: ours}); err != nil {
		t.Fatal(err)
	}
	if l, err := net.InterfaceByName(name); err != nil || l.Index != theirs {
		t.Fatalf("the other test bed's link %s (index %d) was deleted by a teardown of a node whose link had index %d", name, theirs, ours)
	}
	if err := removeNodeLeftovers(nodeLeftovers{Veth: name, VethIndex: theirs}); err != nil {
		t.Fatal(err)
	}
	if linkExists(name) {
		t.Fatalf("the link %s is still there after the teardown of the node it belongs to", name)
	}
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}
