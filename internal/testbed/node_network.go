package testbed

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// The real node's network.
//
// The node (containerd, kubelet, kube-proxy, CoreDNS and every Pod) lives in a network namespace of
// its own that the test bed creates, joined to this machine by one veth pair whose two ends get the
// addresses of a /30 taken from nodeLinkRange:
//
//	this machine: veth "otb<N>", HostIP  (10.247.x.y+1) ── node namespace: "eth0", node IP (+2)
//
// Pods sit on a bridge inside the node's namespace (nodePodSubnet), Services (serviceClusterIPRange)
// exist only as kube-proxy's iptables rules there, and the bridge plugin masquerades Pod traffic
// leaving the namespace as the node IP. Why a namespace rather than the host's own network:
//
//   - Cleanup is structural. The bridge, the Pods' veths, their network namespaces and every
//     iptables rule of kube-proxy and the CNI plugins belong to the node's namespace, which the
//     kernel deletes with its last process, even when the test binary is killed with SIGKILL.
//     Nothing is ever added to the host's iptables, routes (other than the /30 of the veth) or
//     `ip netns` list.
//   - Two test beds never collide: each has its own namespace, so Pod subnets, Service ranges,
//     kubelet and kube-proxy ports and the bridge name can be the same constants in all of them;
//     only the /30 and the veth name are allocated (under a lock, see allocateNodeLink).
//   - Nothing reaches another host. The node's namespace has no default route, only the /30, so
//     a Pod can reach the node, other Pods, Services and HostIP, and nothing else, whatever this
//     machine's own forwarding settings. CoreDNS has no upstream.
//
// The API server listens on HostIP (not 127.0.0.1, which the node's namespace cannot reach) and
// advertises it, so the `kubernetes` Service of the cluster points there and in-cluster clients in
// Pods work. A server on this machine that Pods must reach (the orchestrator) listens on HostIP
// too; nothing outside this machine routes to that address.
//
// A second node (Options.Nodes) has a namespace, veth and /30 of its own, the next /24 of
// clusterCIDR for its Pods, and a route to HostIP through its own veth (this machine answers for
// its own addresses on any interface, so nothing is forwarded). The nodes' namespaces are joined
// by one more veth pair between them (connectNodes), with a /30 of nodeLinkRange's neighbour
// peerLinkRange and a route to each other's Pod subnet, so a Pod reaches every other Pod by its
// own address, as on a real cluster, without this machine forwarding a packet: traffic between
// Pods is not masqueraded (keepPodAddresses), so NetworkPolicies see who sent it.
const (
	nodeLinkRange = "10.247.0.0/16"
	// clusterCIDR holds every node's Pod subnet: node N has the /24 number N-1 (nodePodSubnet).
	clusterCIDR   = "10.246.0.0/16"
	peerLinkRange = "10.249.0.0/16"
	// nodeLinkLock serializes the choice of a free /30 between test beds starting at once, in any
	// process on this machine.
	nodeLinkLock = "/run/outpost-testbed-network.lock"
)

// nodePodSubnet is the Pod subnet of node num (1-based).
func nodePodSubnet(num int) string { return fmt.Sprintf("10.246.%d.0/24", num-1) }

// reachHostIP routes HostIP (the first node's host end, where the API server and the registry
// listen) through node n's own veth.
func reachHostIP(ctx context.Context, n *node, hostIP string) error {
	err := run(ctx, "nsenter", "--target", strconv.Itoa(n.initPID), "--net", "--",
		"ip", "route", "add", hostIP+"/32", "via", n.link.hostIP.String())
	if err != nil {
		return fmt.Errorf("routing HostIP from node %s: %w", n.name, err)
	}
	return nil
}

// keepPodAddresses exempts traffic between Pods from the masquerading the bridge plugin adds for
// each Pod (which would make a Pod on another node look like that node's address). It goes first
// in the node's nat POSTROUTING, before containerd has started any Pod; kube-proxy, which starts
// later, puts its own jump (hairpin traffic through a Service) above it.
func keepPodAddresses(ctx context.Context, n *node) error {
	iptables, err := lookPath("iptables")
	if err != nil {
		return err
	}
	err = run(ctx, "nsenter", "--target", strconv.Itoa(n.initPID), "--net", "--", iptables, "-t", "nat", "-I", "POSTROUTING", "1",
		"-s", clusterCIDR, "-d", clusterCIDR, "-m", "comment", "--comment", "outpost-testbed: Pod to Pod keeps its address", "-j", "ACCEPT")
	if err != nil {
		return fmt.Errorf("exempting Pod traffic from masquerading on node %s: %w", n.name, err)
	}
	return nil
}

// connectNodes joins every pair of nodes' network namespaces with a veth pair ("peer<N>" in each
// names the other node) and routes each node's Pod subnet over it. The link goes with either
// namespace.
func connectNodes(ctx context.Context, nodes []*node) error {
	base := binary.BigEndian.Uint32(netip.MustParsePrefix(peerLinkRange).Addr().AsSlice())
	block := uint32(0)
	for i, a := range nodes {
		for _, b := range nodes[i+1:] {
			ipA, ipB := addrFrom(base+block*4+1), addrFrom(base+block*4+2)
			block++
			inA := func(args ...string) []string {
				return append([]string{"nsenter", "--target", strconv.Itoa(a.initPID), "--net", "--"}, args...)
			}
			inB := func(args ...string) []string {
				return append([]string{"nsenter", "--target", strconv.Itoa(b.initPID), "--net", "--"}, args...)
			}
			devA, devB := "peer"+strconv.Itoa(b.num), "peer"+strconv.Itoa(a.num)
			steps := [][]string{
				inA("ip", "link", "add", devA, "type", "veth", "peer", "name", devB, "netns", strconv.Itoa(b.initPID)),
				inA("ip", "addr", "add", ipA.String()+"/30", "dev", devA),
				inA("ip", "link", "set", devA, "up"),
				inA("ip", "route", "add", b.files.podSubnet, "via", ipB.String()),
				inB("ip", "addr", "add", ipB.String()+"/30", "dev", devB),
				inB("ip", "link", "set", devB, "up"),
				inB("ip", "route", "add", a.files.podSubnet, "via", ipA.String()),
			}
			for _, s := range steps {
				if err := run(ctx, s...); err != nil {
					return fmt.Errorf("joining the networks of nodes %s and %s: %w", a.name, b.name, err)
				}
			}
		}
	}
	return nil
}

// nodeLink is the veth pair of one node.
type nodeLink struct {
	index  int        // block number within nodeLinkRange; names the veth
	hostIP netip.Addr // this machine's end
	nodeIP netip.Addr // the node namespace's end, the Node's InternalIP
	veth   string     // name of this machine's end
	// ifindex is the host end's interface index. Names come back: once the node is gone another
	// test bed may take the same block and name, so the link is deleted only if it still has
	// this index (ownLinkGone).
	ifindex int
}

// setupNodeLink chooses a free /30 and connects the network namespace of process pid to this
// machine with a veth pair. The namespace side is named eth0 and gets its address, the loopback
// comes up, and no default route is added.
func setupNodeLink(ctx context.Context, pid int) (*nodeLink, error) {
	unlock, err := lockNodeLinks()
	if err != nil {
		return nil, err
	}
	defer unlock()
	l, err := allocateNodeLink()
	if err != nil {
		return nil, err
	}
	ns := strconv.Itoa(pid)
	hostCIDR := l.hostIP.String() + "/30"
	nodeCIDR := l.nodeIP.String() + "/30"
	steps := [][]string{
		{"ip", "link", "add", l.veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "addr", "add", hostCIDR, "dev", l.veth},
		{"ip", "link", "set", l.veth, "up"},
		{"nsenter", "--target", ns, "--net", "--", "ip", "addr", "add", nodeCIDR, "dev", "eth0"},
		{"nsenter", "--target", ns, "--net", "--", "ip", "link", "set", "eth0", "up"},
		{"nsenter", "--target", ns, "--net", "--", "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			// The veth, if created, goes with the namespace; only a half-configured host end
			// would stay if the namespace outlived this, and it does not.
			return nil, fmt.Errorf("connecting the node's network namespace: %w", err)
		}
	}
	host, err := net.InterfaceByName(l.veth)
	if err != nil {
		return nil, fmt.Errorf("reading the index of the node's veth %s: %w", l.veth, err)
	}
	l.ifindex = host.Index
	return l, nil
}

// lockNodeLinks takes nodeLinkLock, which every test bed on this machine holds while it chooses
// and creates a veth and while it deletes one; the returned function releases it.
func lockNodeLinks() (func(), error) {
	lock, err := os.OpenFile(nodeLinkLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", nodeLinkLock, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return nil, fmt.Errorf("locking %s: %w", nodeLinkLock, err)
	}
	return func() { lock.Close() }, nil // closing releases the lock
}

// deleteOwnLink deletes the host end of a node's veth if the link of that name is still the one
// the node created (same interface index), under nodeLinkLock so that no test bed can create a
// link of that name between the check and the deletion. It reports whether the node's link is
// gone. Deleting by name alone once deleted a veth another test bed had just been given under
// the same name (after StopNodeHard freed it), taking that bed's API server address with it.
func deleteOwnLink(ctx context.Context, name string, ifindex int) (bool, error) {
	unlock, err := lockNodeLinks()
	if err != nil {
		return false, err
	}
	defer unlock()
	l, err := net.InterfaceByName(name)
	if err != nil || (ifindex != 0 && l.Index != ifindex) {
		return true, nil // gone, or the name now belongs to another test bed's node
	}
	// Deleting either end of a veth pair deletes both; "Cannot find device" means the kernel
	// got there first.
	_ = exec.CommandContext(ctx, "ip", "link", "del", name).Run()
	_, err = net.InterfaceByName(name)
	return err != nil, nil
}

// allocateNodeLink returns the first /30 of nodeLinkRange that no interface of this machine has
// an address in and no route of this machine covers. The caller holds nodeLinkLock.
func allocateNodeLink() (*nodeLink, error) {
	rng := netip.MustParsePrefix(nodeLinkRange)
	var used []netip.Prefix
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing this machine's addresses: %w", err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if p, ok := netipPrefix(ipn); ok {
				used = append(used, p)
			}
		}
	}
	routes, err := hostRoutes()
	if err != nil {
		return nil, err
	}
	used = append(used, routes...)

	base := binary.BigEndian.Uint32(rng.Addr().AsSlice())
	blocks := 1 << (32 - rng.Bits() - 2)
	// The search starts at a random block, so a block (and veth name) freed a moment ago is
	// rarely the next one handed out: a test binary built before deleteOwnLink existed still
	// deletes its node's veth by name.
	start := rand.IntN(blocks)
	for k := range blocks {
		i := (start + k) % blocks
		first := base + uint32(i)*4
		block := netip.PrefixFrom(addrFrom(first), 30)
		if overlapsAny(block, used) {
			continue
		}
		return &nodeLink{index: i, hostIP: addrFrom(first + 1), nodeIP: addrFrom(first + 2), veth: "otb" + strconv.Itoa(i)}, nil
	}
	return nil, fmt.Errorf("no free /30 left in %s for the node's veth (every block is in use or routed)", nodeLinkRange)
}

// hostRoutes returns the destinations of this machine's IPv4 routes in the main table, except
// the default route, from /proc/net/route (no netlink dependency for one read).
func hostRoutes() ([]netip.Prefix, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []netip.Prefix
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 {
			continue
		}
		dst, err1 := strconv.ParseUint(fields[1], 16, 32)
		mask, err2 := strconv.ParseUint(fields[7], 16, 32)
		if err1 != nil || err2 != nil || mask == 0 {
			continue
		}
		// /proc/net/route prints addresses in host (little-endian) byte order.
		var d, m [4]byte
		binary.LittleEndian.PutUint32(d[:], uint32(dst))
		binary.LittleEndian.PutUint32(m[:], uint32(mask))
		ones, _ := net.IPMask(m[:]).Size()
		out = append(out, netip.PrefixFrom(netip.AddrFrom4(d), ones).Masked())
	}
	return out, sc.Err()
}

func netipPrefix(ipn *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(ipn.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := ipn.Mask.Size()
	a = a.Unmap()
	if !a.Is4() {
		return netip.Prefix{}, false
	}
	if ones > 32 {
		ones -= 96
	}
	return netip.PrefixFrom(a, ones).Masked(), true
}

func overlapsAny(p netip.Prefix, set []netip.Prefix) bool {
	for _, q := range set {
		if p.Overlaps(q) {
			return true
		}
	}
	return false
}

func addrFrom(u uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], u)
	return netip.AddrFrom4(b)
}

// run runs a short command and returns its combined output in the error when it fails.
func run(ctx context.Context, args ...string) error {
	bin, err := lookPath(args[0])
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, bin, args[1:]...).CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	return nil
}
