package testbed

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// A process in a namespace whose number matches the node's counts as the node's only if it
// started before the traces were taken: the kernel reuses the numbers of namespaces that are
// gone, and a test bed running beside this one got a stopped node's number once (a pod's pause
// process and init container were reported as left behind).
func TestNamespaceMatchesStartedLaterAreNotTheNodes(t *testing.T) {
	takenAt := ticksSinceBoot()
	time.Sleep(50 * time.Millisecond) // start times count in 10 ms ticks
	// A network namespace of its own, so nothing else on the machine is in it.
	sleep := exec.CommandContext(t.Context(), "unshare", "--net", "--", "sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	pid := sleep.Process.Pid
	var net string
	for range 100 { // until unshare has made the namespace and become sleep
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.HasPrefix(string(cmd), "sleep") {
			net, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if host, _ := os.Readlink("/proc/self/ns/net"); net == "" || net == host {
		t.Skipf("no network namespace of its own for the process (%q)", net)
	}
	tr := &NodeTraces{dir: t.TempDir(), namespaces: map[string]string{"net": net}, cgroupRoot: "/not-a-cgroup", takenAt: takenAt}
	mine := fmt.Sprintf("%d: sleep 30", pid)
	if procs := tr.Processes(); slices.Contains(procs, mine) {
		t.Errorf("a process started after the traces counts as the node's: %v", procs)
	}
	tr.takenAt = math.MaxUint64 // as if the traces were taken after it started
	if procs := tr.Processes(); !slices.Equal(procs, []string{mine}) {
		t.Errorf("the node's processes are %v, want only %q, the one in its network namespace", procs, mine)
	}
}
