package testbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// NetworkPolicies on the real node, and a stand-in for a cloud's metadata service.
//
// A bridge CNI ignores NetworkPolicies, so the real node also runs kube-network-policies (the
// implementation kind uses, built from internal/testbed/netpol): a controller in the node's
// namespaces that puts an nftables table into the node's network namespace and judges, in user
// space through nfqueue, the first packet of every connection from or to a Pod of the node. It
// fails closed: while it is down, such packets are dropped. A Pod's first packets can pass
// before the controller has learnt the Pod's IP from the API server (about a second; the upstream
// project closes that gap with NRI, which containerd 1.6 lacks), so a test that expects a refusal
// waits a few seconds after its Pod started before it sends.
//
// The metadata stand-in answers HTTP on MetadataIP:80, the address the clouds' instance metadata
// services use, from a network namespace of its own beyond the node (as the real one is beyond
// the VM): its process runs in that namespace, where the address sits on the loopback interface
// (these machines' kernels have no dummy interfaces), and a veth joins it to the node's
// namespace, whose route for MetadataIP points there. Pods reach it
// as they would reach the real one, through the node, unless a NetworkPolicy says no. It is
// never put on this machine's own network, which may have a metadata service of its own there.

// MetadataIP is the address of the metadata stand-in, the cloud metadata services' address.
const MetadataIP = "169.254.169.254"

// MetadataText is what the metadata stand-in answers to every HTTP request.
const MetadataText = "outpost-testbed metadata stand-in"

// metadataLink returns the /30 between node num's network namespace and the metadata
// stand-in's: the node's address and the stand-in's. Both namespaces are the test bed's own, so
// every test bed can use the same addresses: 10.248.0.1 and .2 for the first node, .5 and .6 for
// the second.
func metadataLink(num int) (nodeIP, metaIP string) {
	base := 4 * (num - 1)
	return fmt.Sprintf("10.248.0.%d", base+1), fmt.Sprintf("10.248.0.%d", base+2)
}

// netpolTable is the nftables table kube-network-policies keeps in the node's network namespace.
const netpolTable = "kube-network-policies"

// netpolQueue is the nfqueue kube-network-policies reads.
const netpolQueue = 100

// startMetadataStandIn starts the metadata stand-in's process in a new network namespace;
// connectMetadata joins that namespace to each node's.
func (c *Cluster) startMetadataStandIn(binDir string, detach bool) error {
	p, err := startProcess(c.Dir, "metadata", "unshare", []string{
		"--net", "--", filepath.Join(binDir, podBinary), "serve", ":80", MetadataText,
	}, nodeEnv(), detach)
	if err != nil {
		return err
	}
	if err := c.track(p); err != nil {
		return err
	}
	pid := p.cmd.Process.Pid
	// unshare execs the server once the namespace exists: wait until the process's network
	// namespace is no longer this machine's.
	own, _ := os.Readlink("/proc/self/ns/net")
	deadline := time.Now().Add(10 * time.Second)
	for {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err == nil && ns != own {
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe == filepath.Join(binDir, podBinary) {
				break
			}
		}
		if err := p.exitedErr(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return p.failure("did not start the metadata stand-in within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.metadataPID = pid
	// The record said unshare until now; StopDir stops only a process that still runs what
	// was recorded, and the stand-in outlived every `make demo-down` before this.
	p.exe = filepath.Join(binDir, podBinary)
	if c.detached {
		if err := c.writeState(); err != nil {
			return fmt.Errorf("testbed: recording the processes in %s: %w", c.Dir, err)
		}
	}
	return nil
}

// connectMetadata joins node n's network namespace to the metadata stand-in's with a veth pair
// and routes MetadataIP over it. The stand-in answers the first node by its default route and
// every other by the /30 they share (Pods' traffic to it leaves their node masqueraded).
func (c *Cluster) connectMetadata(ctx context.Context, n *node) error {
	node, meta := strconv.Itoa(n.initPID), strconv.Itoa(c.metadataPID)
	nodeIP, metaIP := metadataLink(n.num)
	dev := "eth" + strconv.Itoa(n.num-1) // the stand-in's end
	inNode := func(args ...string) []string {
		return append([]string{"nsenter", "--target", node, "--net", "--"}, args...)
	}
	inMeta := func(args ...string) []string {
		return append([]string{"nsenter", "--target", meta, "--net", "--"}, args...)
	}
	steps := [][]string{
		inNode("ip", "link", "add", "metadata0", "type", "veth", "peer", "name", dev, "netns", meta),
		inNode("ip", "addr", "add", nodeIP+"/30", "dev", "metadata0"),
		inNode("ip", "link", "set", "metadata0", "up"),
		inNode("ip", "route", "add", MetadataIP+"/32", "via", metaIP),
		inMeta("ip", "addr", "add", metaIP+"/30", "dev", dev),
		inMeta("ip", "link", "set", dev, "up"),
	}
	if n.num == 1 {
		steps = append(steps,
			inMeta("ip", "link", "set", "lo", "up"),
			inMeta("ip", "addr", "add", MetadataIP+"/32", "dev", "lo"),
			inMeta("ip", "route", "add", "default", "via", nodeIP))
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			return fmt.Errorf("testbed: connecting the metadata stand-in to node %s: %w", n.name, err)
		}
	}
	return nil
}

// netpolArgs are kube-network-policies' arguments.
func (f nodeFiles) netpolArgs() []string {
	return []string{
		"--kubeconfig=" + f.kubeconfig,
		"--hostname-override=" + f.name,
		"--nfqueue-id=" + strconv.Itoa(netpolQueue),
	}
}

// waitNetworkPoliciesReady waits until kube-network-policies has put its table into each node's
// network namespace (it does once its informers synced), so the first test's packets are judged.
func (c *Cluster) waitNetworkPoliciesReady(ctx context.Context) error {
	nft, err := lookPath("nft")
	if err != nil {
		return err
	}
	for _, n := range c.nodes {
		p := c.proc(netpolBinary + n.suffix())
		err := c.waitFor(ctx, p, nodeReadyTimeout, "to put its nftables table into the node's network namespace", func() bool {
			cmd := exec.CommandContext(ctx, "nsenter", "--target", strconv.Itoa(n.initPID), "--net", "--", nft, "list", "table", "inet", netpolTable)
			return cmd.Run() == nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// netpolBinary is the name of the test bed's kube-network-policies binary.
const netpolBinary = "kube-network-policies"
