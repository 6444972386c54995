package testbed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StopNodeHard stops the real node of that name as a power cut or a spot reclaim would, for
// tests of a node lost under a running Pod: its network goes first (the host end of its veth and
// its links to the other nodes are deleted, so nothing it sends arrives any more), then every
// process of the node at once, containerd, the kubelet, kube-proxy, CoreDNS,
// kube-network-policies and every container, with SIGKILL of its init (the kernel kills the
// node's PID namespace with it). Nothing is told: the Node object stays Ready until the node
// lifecycle controller misses its Lease (Options.Nodes: 10 s), its Pods stay Running until the
// taint-based eviction and the pod garbage collector act. The first node carries HostIP, where
// the API server listens, so only a later one can be stopped.
func (c *Cluster) StopNodeHard(ctx context.Context, name string) error {
	i := slices.IndexFunc(c.nodes, func(n *node) bool { return n.name == name })
	if i < 0 {
		return fmt.Errorf("testbed: StopNodeHard: no real node %q runs here (nodes %v)", name, c.RealNodes)
	}
	n := c.nodes[i]
	if n.num == 1 {
		return fmt.Errorf("testbed: StopNodeHard: %s carries HostIP, where the API server listens; stop a later node", name)
	}
	// Its components exit now by design, not as a crash of the test bed.
	for _, p := range c.procs {
		if strings.HasSuffix(p.name, n.suffix()) {
			p.stopped.Store(true)
		}
	}
	var errs []error
	if _, err := deleteOwnLink(ctx, n.link.veth, n.link.ifindex); err != nil {
		errs = append(errs, err)
	}
	for _, other := range c.nodes {
		if other != n {
			errs = append(errs, run(ctx, "nsenter", "--target", strconv.Itoa(other.initPID), "--net", "--",
				"ip", "link", "del", "peer"+strconv.Itoa(n.num)))
		}
	}
	errs = append(errs, syscall.Kill(n.initPID, syscall.SIGKILL))
	deadline := time.Now().Add(nodeTeardownWait)
	for len(processesInPIDNamespace(n.pidNS)) > 0 {
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("processes of the node still running %s after SIGKILL: %v", nodeTeardownWait, processesInPIDNamespace(n.pidNS)))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.containerdSockets = slices.DeleteFunc(c.containerdSockets, func(s string) bool { return s == n.files.socket })
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("testbed: stopping node %s: %w", name, err)
	}
	return nil
}
