package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// What a test bed with a real node leaves on this machine, for the tests that check that
// stopping it removes everything: TestNodeCleanup here, and the demo's end-to-end test, which
// stops a detached test bed through `make demo-down`.

// HostState is what this machine shows of test beds from its own namespaces.
type HostState struct {
	netns    string          // `ip netns list`
	iptables string          // iptables-save, without counters and comments
	links    map[string]bool // interface names
	mounts   map[string]bool // mount points of this mount namespace
}

// SnapshotHost records this machine's network namespaces, iptables rules, links and mounts.
func SnapshotHost(ctx context.Context) (HostState, error) {
	s := HostState{links: map[string]bool{}, mounts: map[string]bool{}}
	var err error
	if s.netns, err = output(ctx, "ip", "netns", "list"); err != nil {
		return s, err
	}
	rules, err := output(ctx, "iptables-save")
	if err != nil {
		return s, err
	}
	counters := regexp.MustCompile(`\[\d+:\d+\]`)
	for line := range strings.SplitSeq(rules, "\n") {
		if !strings.HasPrefix(line, "#") {
			s.iptables += counters.ReplaceAllString(line, "") + "\n"
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return s, err
	}
	for _, i := range ifs {
		s.links[i.Name] = true
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return s, err
	}
	for line := range strings.SplitSeq(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			s.mounts[unescapeMountinfo(f[4])] = true
		}
	}
	return s, nil
}

func output(ctx context.Context, args ...string) (string, error) {
	bin, err := lookPath(args[0])
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, bin, args[1:]...).Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// NodeTraces identifies one running real node's traces on this machine: its namespaces,
// processes, link, address and cgroups.
type NodeTraces struct {
	dir        string
	namespaces map[string]string // "pid", "mnt", "net" -> the namespace's identity, e.g. "net:[4026532]"
	cgroups    []string          // the node's cgroup root in each hierarchy
	cgroupRoot string            // e.g. /outpost-testbed-123-0
	veth       string
	vethIndex  int
	hostIP     string
	// takenAt is when the traces were recorded, in clock ticks since boot (as /proc/<pid>/stat
	// counts a process's start). Namespace identities are inode numbers the kernel hands out
	// again once a namespace is gone, so a process that started later in a namespace of the same
	// number belongs to another node (another test bed, running beside this one), not to this one.
	takenAt uint64
}

// traceNode records the traces of c's running real node.
func (c *Cluster) traceNode() (*NodeTraces, error) {
	n := c.node
	return newTraces(c.Dir, n.initPID, n.cgroups, n.link.veth, c.HostIP)
}

// TraceDir records the traces of the real node of the detached test bed in dir (Options{Dir: dir,
// Detach: true, Node: true}), while it runs.
func TraceDir(dir string) (*NodeTraces, error) {
	st, err := readState(dir)
	if err != nil {
		return nil, err
	}
	if st == nil || st.Node == nil {
		return nil, fmt.Errorf("testbed: %s records no test bed with a real node", dir)
	}
	// The node's init, containerd, the kubelet and kube-proxy all share its namespaces.
	pids := processesInPIDNamespace(st.Node.PIDNamespace)
	if len(pids) == 0 {
		return nil, fmt.Errorf("testbed: no process of the node of %s runs", dir)
	}
	return newTraces(dir, slices.Min(pids), st.Node.Cgroups, st.Node.Veth, st.Node.HostIP)
}

func newTraces(dir string, pid int, cgroups []string, veth, hostIP string) (*NodeTraces, error) {
	tr := &NodeTraces{dir: dir, namespaces: map[string]string{}, cgroups: cgroups, veth: veth, hostIP: hostIP, takenAt: ticksSinceBoot()}
	if len(cgroups) == 0 {
		return nil, errors.New("testbed: the node has no cgroups")
	}
	tr.cgroupRoot = "/" + filepath.Base(cgroups[0])
	for _, ns := range []string{"pid", "mnt", "net"} {
		id, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil {
			return nil, fmt.Errorf("testbed: the node's namespaces: %w", err)
		}
		tr.namespaces[ns] = id
	}
	link, err := net.InterfaceByName(veth)
	if err != nil {
		return nil, fmt.Errorf("testbed: the node's veth: %w", err)
	}
	tr.vethIndex = link.Index
	return tr, nil
}

// Processes lists the live (not zombie) processes that belong to the node: inside one of its
// namespaces, in one of its cgroups, with its directory on their command line or as their
// working directory (the metadata stand-in, in a network namespace of its own), or descended
// from such a process (containers have PID namespaces of their own). Each is "pid: command
// line".
func (tr *NodeTraces) Processes() []string {
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
		var started uint64
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i > 0 {
				// After the command name: state, ppid, …, starttime (the 20th).
				if f := strings.Fields(string(stat[i+1:])); len(f) > 19 {
					parents[pid], _ = strconv.Atoi(f[1])
					started, _ = strconv.ParseUint(f[19], 10, 64)
				}
			}
		}
		cgroups, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		cwd = strings.TrimSuffix(cwd, " (deleted)")
		ours[pid] = strings.Contains(cmds[pid], tr.dir) || strings.Contains(string(cgroups), ":"+tr.cgroupRoot+"/") ||
			cwd == tr.dir || strings.HasPrefix(cwd, tr.dir+"/")
		for ns, id := range tr.namespaces {
			if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns)); link == id && started <= tr.takenAt {
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

// Left lists what of the node is still on this machine once its test bed has stopped, compared
// with before (taken before the test bed started): processes, network namespaces, iptables rules,
// links, its host address, mounts, cgroups and its directory. Empty means nothing is left.
func (tr *NodeTraces) Left(ctx context.Context, before HostState) ([]string, error) {
	var left []string
	if procs := tr.Processes(); len(procs) > 0 {
		left = append(left, fmt.Sprintf("processes of the node still running: %v", procs))
	}
	after, err := SnapshotHost(ctx)
	if err != nil {
		return nil, err
	}
	if after.netns != before.netns {
		left = append(left, fmt.Sprintf("`ip netns list` changed:\nbefore: %q\nafter:  %q", before.netns, after.netns))
	}
	if after.iptables != before.iptables {
		left = append(left, fmt.Sprintf("iptables rules of this machine changed:\nbefore:\n%s\nafter:\n%s", before.iptables, after.iptables))
	}
	if l, err := net.InterfaceByName(tr.veth); err == nil && l.Index == tr.vethIndex {
		left = append(left, fmt.Sprintf("the node's veth %s is still there", tr.veth))
	}
	var newLinks []string
	for name := range after.links {
		// Another test bed's veth may come and go meanwhile; anything else is a leak.
		if !before.links[name] && !strings.HasPrefix(name, "otb") {
			newLinks = append(newLinks, name)
		}
	}
	if len(newLinks) > 0 {
		slices.Sort(newLinks)
		left = append(left, fmt.Sprintf("links left on this machine: %v", newLinks))
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.String() == tr.hostIP {
			left = append(left, fmt.Sprintf("the node's host address %s is still assigned", tr.hostIP))
		}
	}
	var newMounts []string
	for m := range after.mounts {
		if !before.mounts[m] || strings.HasPrefix(m, tr.dir) {
			newMounts = append(newMounts, m)
		}
	}
	slices.Sort(newMounts)
	if len(newMounts) > 0 {
		left = append(left, fmt.Sprintf("mounts left on this machine: %v", newMounts))
	}
	for _, dir := range tr.cgroups {
		if _, err := os.Stat(dir); err == nil {
			left = append(left, fmt.Sprintf("cgroup %s is still there", dir))
		}
	}
	if _, err := os.Stat(tr.dir); err == nil {
		left = append(left, fmt.Sprintf("the test bed's directory %s is still there", tr.dir))
	}
	return left, nil
}

// ticksSinceBoot is the time since boot in the clock ticks of /proc/<pid>/stat (USER_HZ, 100 on
// Linux whatever the kernel's own tick rate), rounded up, so a process that started before this
// call never counts as later.
func ticksSinceBoot() uint64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return math.MaxUint64 // no /proc: every namespace match counts, as before
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return math.MaxUint64
	}
	secs, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return math.MaxUint64
	}
	return uint64(math.Ceil(secs*100)) + 1
}
