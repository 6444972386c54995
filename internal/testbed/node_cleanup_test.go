package testbed

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
			before := snapshotHost(t)
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
			n := c.node
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
			checkNothingLeft(t, before, bed, n)
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

// hostState is what this machine shows of test beds from its own namespaces.
type hostState struct {
	netns    string          // `ip netns list`
	iptables string          // iptables-save, without counters and comments
	links    map[string]bool // interface names
	mounts   map[string]bool // mount points of this mount namespace
}

func snapshotHost(t *testing.T) hostState {
	t.Helper()
	s := hostState{links: map[string]bool{}, mounts: map[string]bool{}}
	s.netns = output(t, "ip", "netns", "list")
	counters := regexp.MustCompile(`\[\d+:\d+\]`)
	for line := range strings.SplitSeq(output(t, "iptables-save"), "\n") {
		if !strings.HasPrefix(line, "#") {
			s.iptables += counters.ReplaceAllString(line, "") + "\n"
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		s.links[i.Name] = true
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			s.mounts[unescapeMountinfo(f[4])] = true
		}
	}
	return s
}

func output(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := lookPath(args[0])
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), bin, args[1:]...).Output()
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// runningNode identifies one node's traces: its namespaces, processes, link and cgroups.
type runningNode struct {
	dir        string
	namespaces map[string]string // "pid", "mnt", "net" -> the namespace's identity, e.g. "net:[4026532]"
	cgroupRoot string            // e.g. /outpost-testbed-123-0
	veth       string
	vethIndex  int
	hostIP     string
}

// describeNode records a running node's traces and checks they exist, so that their absence after
// the stop means something.
func describeNode(t *testing.T, c *Cluster) runningNode {
	t.Helper()
	n := c.node
	bed := runningNode{dir: c.Dir, namespaces: map[string]string{}, cgroupRoot: n.files.cgroupRoot, veth: n.link.veth, hostIP: c.HostIP}
	for _, ns := range []string{"pid", "mnt", "net"} {
		id, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", n.initPID, ns))
		if err != nil {
			t.Fatal(err)
		}
		bed.namespaces[ns] = id
	}
	link, err := net.InterfaceByName(n.link.veth)
	if err != nil {
		t.Fatalf("the node's veth: %v", err)
	}
	bed.vethIndex = link.Index
	var container bool
	for _, p := range nodeProcesses(bed) {
		container = container || strings.HasSuffix(p, ": /testbed-pod serve :8080 x")
	}
	if !container {
		t.Fatalf("the Pod's container is not among the node's processes: %v", nodeProcesses(bed))
	}
	for _, dir := range n.cgroups {
		if _, err := os.Stat(filepath.Join(dir, "kubepods")); err != nil {
			t.Fatalf("the kubelet's cgroups: %v", err)
		}
	}
	return bed
}

// nodeProcesses lists the live (not zombie) processes that belong to a node: inside one of its
// namespaces, in one of its cgroups, with its directory on their command line, or descended from
// such a process (containers have PID namespaces of their own). Each is "pid: command line".
func nodeProcesses(bed runningNode) []string {
	cmds := map[int]string{}
	parents := map[int]int{}
	ours := map[int]bool{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !processAlive(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cmds[pid] = string(bytes.ReplaceAll(bytes.TrimRight(cmdline, "\x00"), []byte{0}, []byte{' '}))
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i > 0 {
				if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
					parents[pid], _ = strconv.Atoi(f[1])
				}
			}
		}
		cgroups, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		ours[pid] = strings.Contains(cmds[pid], bed.dir) || strings.Contains(string(cgroups), ":"+bed.cgroupRoot+"/")
		for ns, id := range bed.namespaces {
			if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns)); link == id {
				ours[pid] = true
			}
		}
	}
	var out []string
	for pid, cmd := range cmds {
		for p, depth := pid, 0; p > 1 && depth < 64; p, depth = parents[p], depth+1 {
			if ours[p] {
				out = append(out, fmt.Sprintf("%d: %s", pid, cmd))
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

func checkNothingLeft(t *testing.T, before hostState, bed runningNode, n *node) {
	t.Helper()
	if procs := nodeProcesses(bed); len(procs) > 0 {
		t.Errorf("processes of the node still running: %v", procs)
	}
	after := snapshotHost(t)
	if after.netns != before.netns {
		t.Errorf("`ip netns list` changed:\nbefore: %q\nafter:  %q", before.netns, after.netns)
	}
	if after.iptables != before.iptables {
		t.Errorf("iptables rules of this machine changed:\nbefore:\n%s\nafter:\n%s", before.iptables, after.iptables)
	}
	if l, err := net.InterfaceByName(bed.veth); err == nil && l.Index == bed.vethIndex {
		t.Errorf("the node's veth %s is still there", bed.veth)
	}
	var newLinks []string
	for name := range after.links {
		// Another test bed's veth may come and go meanwhile; anything else is a leak.
		if !before.links[name] && !strings.HasPrefix(name, "otb") {
			newLinks = append(newLinks, name)
		}
	}
	if len(newLinks) > 0 {
		t.Errorf("links left on this machine: %v", newLinks)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.String() == bed.hostIP {
			t.Errorf("the node's host address %s is still assigned", bed.hostIP)
		}
	}
	var newMounts []string
	for m := range after.mounts {
		if !before.mounts[m] || strings.HasPrefix(m, bed.dir) {
			newMounts = append(newMounts, m)
		}
	}
	slices.Sort(newMounts)
	if len(newMounts) > 0 {
		t.Errorf("mounts left on this machine: %v", newMounts)
	}
	for _, dir := range n.cgroups {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("cgroup %s is still there", dir)
		}
	}
	if _, err := os.Stat(bed.dir); err == nil {
		t.Errorf("the test bed's directory %s is still there", bed.dir)
	}
}
