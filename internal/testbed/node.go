package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The real node (Options.Node).
//
// The node is a container made by hand, the way kind makes one out of a Docker container: the
// test bed starts an init process (testbed-pod pause, which reaps orphans) in new PID, mount and
// network namespaces (`unshare`), and containerd, the kubelet, kube-proxy and CoreDNS join all
// three (`nsenter`). What that buys:
//
//   - Nothing outlives the node. When the init dies, the kernel kills every process of its PID
//     namespace: containerd's shims and every container, which containerd deliberately detaches
//     from itself and which would otherwise survive as orphans. The init dies with the test bed
//     even when the test binary is killed (Pdeathsig, and unshare's --kill-child).
//   - Nothing is mounted on the host. Volumes, overlay root filesystems, the kubelet's bind mount
//     of its root and the Pods' network namespace files exist only in the node's mount namespace,
//     which the kernel drops with its last process. /run, /var/log and /var/lib/cni are tmpfs
//     of the node's own, so shim sockets, container log links and CNI state never reach the host.
//   - The network is the node's own (node_network.go), and so are the iptables rules.
//   - No zombies: PID 1 of these machines does not reap orphans, the node's init does.
//
// What remains on the host is only what must: the node's directory under the test bed's Dir and
// its cgroups (node_cgroups.go), both removed by Stop.

// RealNodeName is the name of the test bed's real node, the first one when it runs several
// (Options.Nodes); the others are named by RealNodeNames.
const RealNodeName = "outpost-testbed-real"

// MaxNodes is the most real nodes a test bed runs (Options.Nodes): each costs about 300 MiB and
// a core-second of start-up on machines with two cores.
const MaxNodes = 2

// realNodeName returns the name of real node number num (1-based): RealNodeName, then
// RealNodeName-2.
func realNodeName(num int) string {
	if num == 1 {
		return RealNodeName
	}
	return RealNodeName + "-" + strconv.Itoa(num)
}

// RealNodeLabel is a label every real node carries ("true"), so a Pod can be kept on real nodes
// without naming one (OnRealNodes).
const RealNodeLabel = "testbed.outpost.dev/real-node"

// RealNodeTaint is the key of the NoSchedule taint that keeps Pods off the real node when kwok's
// fake node runs too (Options{Jobs: true, Node: true}); Pods meant for the real node tolerate it
// and select the node (OnRealNode does both for a PodSpec).
const RealNodeTaint = "testbed.outpost.dev/real-node"

// nodeReadyTimeout bounds the start of the real node, from containerd to a probe Pod that ran.
const nodeReadyTimeout = 120 * time.Second

// node is the state of a running real node.
type node struct {
	num     int    // 1 for the first node, 2 for the second
	name    string // its Node's name, realNodeName(num)
	dir     string // <Dir>/node, <Dir>/node-2
	initPID int    // this machine's pid of the node's init, PID 1 of the node's namespaces
	pidNS   string // the node's PID namespace, as /proc/<pid>/ns/pid reads ("pid:[…]")
	link    *nodeLink
	cgroups []string // the node's cgroup root in each hierarchy
	files   nodeFiles
	imports chan error // the result of importing the built-in images, once
}

// startNodeSandbox creates the namespaces, network and cgroups of each of count nodes, joins
// their networks (node_network.go), and starts their containerd and the import of the built-in
// images, which need no API server, so they overlap etcd's and the API server's start-up. It
// sets c.HostIP, which the API server binds to: the host end of the first node's veth.
func (c *Cluster) startNodeSandbox(ctx context.Context, binDir string, count int, detach bool) error {
	if err := checkNodePrerequisites(binDir); err != nil {
		return err
	}
	sweepStaleCgroups()
	// The mount point of the node's tmpfs for CNI state; an empty directory, as the package
	// containernetworking-plugins would make.
	if err := os.MkdirAll("/var/lib/cni", 0o755); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	for num := 1; num <= count; num++ {
		n, err := c.startNodeNamespaces(ctx, binDir, num, detach)
		if err != nil {
			return err
		}
		if num == 1 {
			c.HostIP = n.link.hostIP.String()
			if err := c.startMetadataStandIn(binDir, detach); err != nil {
				return err
			}
		} else if err := reachHostIP(ctx, n, c.HostIP); err != nil {
			return fmt.Errorf("testbed: %w", err)
		}
		if err := c.connectMetadata(ctx, n); err != nil {
			return err
		}
	}
	if err := connectNodes(ctx, c.nodes); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	for _, n := range c.nodes {
		if err := c.startContainerd(ctx, n, binDir, detach); err != nil {
			return err
		}
	}
	return nil
}

// suffix is what the names of a node's processes, logs and directory end with: nothing for the
// first node (so one-node test beds keep their names), "-2" for the second.
func (n *node) suffix() string {
	if n.num == 1 {
		return ""
	}
	return "-" + strconv.Itoa(n.num)
}

// startNodeNamespaces starts node num's init in new namespaces, mounts its tmpfs, connects its
// network namespace to this machine and creates its cgroups.
func (c *Cluster) startNodeNamespaces(ctx context.Context, binDir string, num int, detach bool) (*node, error) {
	n := &node{num: num, name: realNodeName(num), imports: make(chan error, 1)}
	n.dir = c.path("node" + n.suffix())
	for _, d := range []string{"cni", "cni-ipam", "containerd", "kubelet", "pod-logs", "images", "certs.d"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("testbed: %w", err)
		}
	}
	pod := filepath.Join(binDir, podBinary)
	init, err := startProcess(c.Dir, "node"+n.suffix(), "unshare", []string{
		"--pid", "--fork", "--kill-child", "--mount", "--propagation", "private", "--mount-proc", "--net",
		"--", pod, "pause",
	}, nodeEnv(), detach)
	if err != nil {
		return nil, err
	}
	if err := c.track(init); err != nil {
		return nil, err
	}
	c.nodes = append(c.nodes, n)
	if num == 1 {
		c.node = n
	}
	if n.initPID, err = waitForChild(ctx, init, pod); err != nil {
		return nil, err
	}
	for _, dir := range []string{"/run", "/var/log", "/var/lib/cni"} {
		if err := run(ctx, nsenter(n.initPID, "mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", dir)...); err != nil {
			return nil, fmt.Errorf("testbed: preparing the node's mount namespace: %w", err)
		}
	}
	n.pidNS, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", n.initPID))
	if n.link, err = setupNodeLink(ctx, n.initPID); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	if err := keepPodAddresses(ctx, n); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	owner := strconv.Itoa(os.Getpid())
	if detach {
		owner = "detached" // not swept while `outpost-testbed up` is gone; StopDir removes it
	}
	name := cgroupPrefix + owner + "-" + strconv.Itoa(n.link.index)
	if n.cgroups, err = createCgroupRoot(name); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}

	n.files = nodeFiles{
		dir:        n.dir,
		name:       n.name,
		socket:     filepath.Join(n.dir, "containerd.sock"),
		kubeconfig: c.path("kubeconfig"),
		caFile:     c.path("pki/ca.crt"),
		nodeIP:     n.link.nodeIP.String(),
		podSubnet:  nodePodSubnet(num),
		cgroupRoot: "/" + name,
	}
	if detach {
		if err := c.writeState(); err != nil { // records the cgroups for StopDir
			return nil, fmt.Errorf("testbed: recording the node in %s: %w", c.Dir, err)
		}
	}
	if err := n.writeFiles(); err != nil {
		return nil, fmt.Errorf("testbed: writing the node's configuration: %w", err)
	}
	return n, nil
}

// startContainerd starts the node's containerd and, in the background, the import of the
// built-in images into it (startNodeAgents waits for it).
func (c *Cluster) startContainerd(ctx context.Context, n *node, binDir string, detach bool) error {
	ctrd, err := startProcess(c.Dir, "containerd"+n.suffix(), "nsenter",
		nsenter(n.initPID, "containerd", "--config", n.files.path("containerd.toml"))[1:], nodeEnv(), detach)
	if err != nil {
		return err
	}
	if err := c.track(ctrd); err != nil {
		return err
	}
	c.containerdSockets = append(c.containerdSockets, n.files.socket)
	go func() { n.imports <- c.importBuiltinImages(ctx, n, ctrd, filepath.Join(binDir, podBinary)) }()
	return nil
}

// writeFiles writes the configuration files of containerd, the CNI plugins, kube-proxy and
// CoreDNS (the kubelet's is written by startNodeAgents).
func (n *node) writeFiles() error {
	f := n.files
	files := map[string]string{
		"containerd.toml":        f.containerdConfig(),
		"cni/10-bridge.conflist": f.cniConfig(),
		"kube-proxy.yaml":        f.kubeProxyConfig(),
		"Corefile":               f.corefile(),
	}
	for name, content := range files {
		if err := os.WriteFile(f.path(name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// startNodeAgents starts the kubelet, kube-proxy, CoreDNS and kube-network-policies of every node
// once the API server answers and the built-in images are in the node's containerd, and returns
// the kubelets' processes for waitNodeReady, in node order. taint registers the nodes with
// RealNodeTaint (kwok's fake node runs too).
func (c *Cluster) startNodeAgents(ctx context.Context, binDir string, taint bool, detach bool) ([]*process, error) {
	var kubelets []*process
	for _, n := range c.nodes {
		select {
		case err := <-n.imports:
			if err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		n.files.taint = taint
		n.files.fastLifecycle = len(c.nodes) > 1
		if err := os.WriteFile(n.files.path("kubelet.yaml"), []byte(n.files.kubeletConfig()), 0o600); err != nil {
			return nil, fmt.Errorf("testbed: %w", err)
		}
		agents := []struct {
			name string
			args []string
		}{
			{"kubelet", []string{
				"--config=" + n.files.path("kubelet.yaml"),
				"--kubeconfig=" + n.files.kubeconfig,
				"--root-dir=" + n.files.path("kubelet"),
				"--hostname-override=" + n.name,
				"--node-ip=" + n.files.nodeIP,
				"--node-labels=" + RealNodeLabel + "=true",
				// Lowering it needs CAP_SYS_RESOURCE, which these machines lack.
				"--oom-score-adj=0",
			}},
			{"kube-proxy", []string{"--config=" + n.files.path("kube-proxy.yaml")}},
			{"coredns", []string{"-conf", n.files.path("Corefile")}},
			{netpolBinary, n.files.netpolArgs()},
		}
		for _, a := range agents {
			p, err := startProcess(c.Dir, a.name+n.suffix(), "nsenter", nsenter(n.initPID, filepath.Join(binDir, a.name), a.args...)[1:], nodeEnv(), detach)
			if err != nil {
				return nil, err
			}
			if err := c.track(p); err != nil {
				return nil, err
			}
			if a.name == "kubelet" {
				kubelets = append(kubelets, p)
			}
		}
	}
	return kubelets, nil
}

// nsenter returns the command line that runs program with args in all three namespaces of the
// node whose init is pid. nsenter forks to enter the PID namespace, and stays as the parent in
// this machine's namespace, so the test bed tracks and signals it like any other component.
func nsenter(pid int, program string, args ...string) []string {
	return append([]string{"nsenter", "--target", strconv.Itoa(pid), "--pid", "--mount", "--net", "--", program}, args...)
}

// nodeEnv is the environment of the node's processes: a PATH with the sbin directories, where
// containerd looks for runc and kube-proxy and the CNI plugins for iptables, even when the test
// runs from a shell whose PATH lacks them.
func nodeEnv() []string {
	path := os.Getenv("PATH")
	for _, dir := range []string{"/usr/local/sbin", "/usr/sbin", "/sbin"} {
		if !slices.Contains(filepath.SplitList(path), dir) {
			path += string(filepath.ListSeparator) + dir
		}
	}
	return []string{"PATH=" + strings.TrimPrefix(path, string(filepath.ListSeparator))}
}

// waitForChild returns this machine's pid of the child unshare forked, once it runs program
// (so the namespaces are made and /proc is mounted).
func waitForChild(ctx context.Context, p *process, program string) (int, error) {
	parent := p.cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", parent, parent))
		if f := strings.Fields(string(b)); len(f) > 0 {
			if pid, err := strconv.Atoi(f[0]); err == nil {
				if exe, _ := os.Readlink("/proc/" + f[0] + "/exe"); exe == program {
					return pid, nil
				}
			}
		}
		if err := p.exitedErr(); err != nil {
			return 0, err
		}
		if time.Now().After(deadline) {
			return 0, p.failure("did not start the node's init within 10s")
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// stopNode removes what the nodes leave on the host once their processes are gone: their
// cgroups, and the host ends of their veths (see removeNodeLeftovers).
func (c *Cluster) stopNode() error {
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, removeNodeLeftovers(n.leftovers()))
	}
	return errors.Join(errs...)
}

// leftovers is what of the node removeNodeLeftovers cleans up.
func (n *node) leftovers() nodeLeftovers {
	l := nodeLeftovers{Cgroups: n.cgroups, PIDNamespace: n.pidNS}
	if n.link != nil { // nil when the node failed before its network was set up
		l.Veth, l.VethIndex = n.link.veth, n.link.ifindex
	}
	return l
}

// nodeLeftovers names what of a node can outlive its processes for a moment. It is recorded in a
// detached test bed's state too, so StopDir cleans up the same way as Stop.
type nodeLeftovers struct {
	Cgroups      []string `json:"cgroups"`
	PIDNamespace string   `json:"pidNamespace,omitempty"`
	Veth         string   `json:"veth,omitempty"`
	VethIndex    int      `json:"vethIndex,omitempty"` // 0 in a state written before it was recorded
}

// nodeTeardownWait bounds the wait for the kernel's asynchronous part of a node's teardown.
const nodeTeardownWait = 10 * time.Second

// removeNodeLeftovers waits until the last process of the node's PID namespace has exited (a
// process killed with its namespace's init is still exiting for a moment after the init is gone),
// removes the node's cgroups, and deletes the host end of the veth if it is still there: the
// kernel destroys a network namespace, and with it the veth pair, asynchronously after its last
// process exits, so without this a test bed started right after could find the link and its
// address still taken, and a check for leftovers would race the kernel.
func removeNodeLeftovers(l nodeLeftovers) error {
	deadline := time.Now().Add(nodeTeardownWait)
	for l.PIDNamespace != "" && len(processesInPIDNamespace(l.PIDNamespace)) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("testbed: processes of the node still running %s after it was stopped: %v",
				nodeTeardownWait, processesInPIDNamespace(l.PIDNamespace))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := removeCgroups(l.Cgroups, nodeTeardownWait); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	if l.Veth == "" {
		return nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for {
		gone, err := deleteOwnLink(ctx, l.Veth, l.VethIndex)
		if err != nil {
			return fmt.Errorf("testbed: %w", err)
		}
		if gone {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("testbed: the node's veth %s is still there %s after the node stopped", l.Veth, nodeTeardownWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processesInPIDNamespace lists the live (not zombie) processes of the PID namespace ns.
func processesInPIDNamespace(ns string) []int {
	const kind = "pid"
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind)); link == ns && processAlive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
