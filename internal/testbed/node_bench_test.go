package testbed

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkStart measures how long a test bed takes to be ready, without and with the real node,
// and how much memory the processes of each part use once ready (resident set sizes added up).
//
//	go test -run '^$' -bench Start -benchtime 1x ./internal/testbed/
func BenchmarkStart(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"apiserver", Options{}},
		{"jobs", Options{Jobs: true}},
		{"node", Options{Node: true}},
		{"jobs+node", Options{Jobs: true, Node: true}},
		{"two-nodes", Options{Node: true, Nodes: 2}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var total time.Duration
			var rss, nodeRSS, node2RSS float64
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
				start := time.Now()
				c, err := Start(ctx, tc.opts)
				cancel()
				if IsNodeUnavailable(err) {
					b.Skipf("skipped: %v", err)
				}
				if err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				b.StopTimer()
				for _, p := range c.procs {
					r := processTreeRSS(p.cmd.Process.Pid)
					rss += r
					if slices.Contains(nodeComponents, p.name) {
						nodeRSS += r
					}
					if slices.Contains(nodeComponents, strings.TrimSuffix(p.name, "-2")) && strings.HasSuffix(p.name, "-2") {
						node2RSS += r
					}
				}
				for _, n := range c.nodes {
					extra := namespaceRSS(n.initPID)
					rss += extra
					if n.num == 1 {
						nodeRSS += extra
					} else {
						node2RSS += extra
					}
				}
				if err := c.Stop(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			n := float64(b.N)
			b.ReportMetric(total.Seconds()/n, "s/start")
			b.ReportMetric(rss/n/(1<<20), "MiB-RSS")
			if tc.opts.Node {
				b.ReportMetric(nodeRSS/n/(1<<20), "MiB-RSS-node")
			}
			if tc.opts.Nodes > 1 {
				b.ReportMetric(node2RSS/n/(1<<20), "MiB-RSS-node2")
			}
		})
	}
}

// nodeComponents are the processes of the real node, by their test bed names.
// (those of a second node end with "-2").
var nodeComponents = []string{"node", "containerd", "kubelet", "kube-proxy", "coredns", netpolBinary}

// processTreeRSS is the resident set size of pid and of its children in this machine's PID
// namespace (nsenter's child is the component itself).
func processTreeRSS(pid int) float64 {
	sum := rssOf(pid)
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for f := range strings.FieldsSeq(string(b)) {
		if child, err := strconv.Atoi(f); err == nil {
			sum += rssOf(child)
		}
	}
	return sum
}

// namespaceRSS is the resident set size of the processes in the node's PID namespace that are
// not already counted as a test bed component: containerd's shims and the containers.
func namespaceRSS(initPID int) float64 {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", initPID))
	if err != nil {
		return 0
	}
	var sum float64
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == initPID { // the init was counted as unshare's child
			continue
		}
		if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); link != ns {
			continue
		}
		// Components were counted through their nsenter parents.
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); isComponent(exe) {
			continue
		}
		sum += rssOf(pid)
	}
	return sum
}

func isComponent(exe string) bool {
	for _, name := range append([]string{"containerd"}, nodeBinaryNames...) {
		if strings.HasSuffix(exe, "/"+name) && name != podBinary {
			return true
		}
	}
	return false
}

// rssOf is VmRSS of a process in bytes, 0 if it is gone.
func rssOf(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}
