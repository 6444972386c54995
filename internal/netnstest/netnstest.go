// Package netnstest runs a test inside a network namespace of its own, where it may add
// netfilter rules to loopback (drop every packet to a port, as a peer whose node was lost, or
// spread connections over two ports, as a Service) without touching the machine's own rules.
// It needs unshare(1), ip(8) and iptables(8), and root or unprivileged user namespaces.
package netnstest

import (
	"os"
	"os/exec"
	"testing"
)

// insideEnv marks the test binary re-run inside the namespace.
const insideEnv = "OUTPOST_NETNSTEST_INSIDE"

// Inside reports whether this test binary is a re-run inside the namespace. A TestMain that
// starts shared fixtures (a test bed) skips them there: the namespace has only loopback.
func Inside() bool { return os.Getenv(insideEnv) == "1" }

// Enter re-runs the calling test (t.Name(), its subtests included) in a new network namespace
// and reports whether the caller is that re-run, with loopback up; when it is not, the caller
// returns at once: the re-run's outcome is the test's. The namespace ends with the re-run.
func Enter(t *testing.T) bool {
	t.Helper()
	if Inside() {
		if out, err := exec.CommandContext(t.Context(), "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("ip link set lo up: %v\n%s", err, out)
		}
		return true
	}
	args := []string{"--net"}
	if os.Geteuid() != 0 {
		args = append(args, "--map-root-user")
	}
	args = append(args, "--", os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd := exec.CommandContext(t.Context(), "unshare", args...) //nolint:gosec // the test binary itself
	cmd.Env = append(os.Environ(), insideEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in a network namespace of its own:\n%s", out)
	if err != nil {
		t.Fatalf("the test in its network namespace: %v (it needs unshare(1), ip(8) and iptables(8), and root or user namespaces)", err)
	}
	return false
}

// Iptables runs iptables with args in the namespace (call it only after Enter returned true).
func Iptables(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.CommandContext(t.Context(), "iptables", args...).CombinedOutput(); err != nil {
		t.Fatalf("iptables %v: %v\n%s", args, err, out)
	}
}

// Lose makes the server on loopback port as good as gone: every packet to it and from it is
// dropped, so nothing answers and nothing resets, as for a peer whose node was lost. Packets
// to it are matched after a Service's DNAT, packets from it before that DNAT is undone (the raw
// table comes first).
func Lose(t *testing.T, port string) {
	t.Helper()
	Iptables(t, "-I", "INPUT", "-p", "tcp", "--dport", port, "-j", "DROP")
	Iptables(t, "-t", "raw", "-I", "OUTPUT", "-p", "tcp", "--sport", port, "-j", "DROP")
}
