package testbed

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// nodeBinaryNames are the test bed binaries the real node needs on top of binaryNames.
var nodeBinaryNames = []string{"kubelet", "kube-proxy", "coredns", "registry", netpolBinary, podBinary}

// nodePackages maps each host program the real node runs to the Debian package that installs it
// (scripts/testbed-build.sh installs them when missing).
var nodePackages = []struct{ program, pkg string }{
	{"containerd", "containerd"},
	{"containerd-shim-runc-v2", "containerd"},
	{"ctr", "containerd"},
	{"runc", "runc"},
	{cniBinDir + "/bridge", "containernetworking-plugins"},
	{cniBinDir + "/host-local", "containernetworking-plugins"},
	{cniBinDir + "/loopback", "containernetworking-plugins"},
	{cniBinDir + "/portmap", "containernetworking-plugins"},
	{"iptables", "iptables"},
	{"ip", "iproute2"},
	// kube-network-policies programs nftables through netlink itself; the test bed reads its
	// table with nft to know it is ready.
	{"nft", "nftables"},
	{"nsenter", "util-linux"},
	{"unshare", "util-linux"},
	{"mount", "mount"},
}

// NodeUnavailableError says that this machine cannot run the test bed's real node, and exactly
// what is missing. Main skips the tests that need the node with this message (RequireNode), except
// under CI=true, where it fails the run.
type NodeUnavailableError struct {
	Missing []string // each a sentence: what is missing and how to get it
}

// Error implements error.
func (e *NodeUnavailableError) Error() string {
	return "testbed: this machine cannot run a real node: " + strings.Join(e.Missing, "; ")
}

// IsNodeUnavailable reports whether err says this machine cannot run the real node.
func IsNodeUnavailable(err error) bool {
	var target *NodeUnavailableError
	return errors.As(err, &target)
}

// checkNodePrerequisites returns a *NodeUnavailableError listing everything the real node needs
// that this machine lacks, or a *MissingBinariesError if only `make testbed-build` is missing.
func checkNodePrerequisites(binDir string) error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the node creates namespaces, cgroups and mounts; run the tests as root)")
	}
	pkgs := map[string]bool{}
	var programs []string
	for _, p := range nodePackages {
		if _, err := lookPath(p.program); err != nil && !pkgs[p.pkg] {
			pkgs[p.pkg] = true
			programs = append(programs, fmt.Sprintf("%s (Debian package %s)", filepath.Base(p.program), p.pkg))
		}
	}
	if len(programs) > 0 {
		missing = append(missing, "programs "+strings.Join(programs, ", ")+
			" (`make testbed-build` installs them with apt-get when run as root)")
	}
	if mounts, err := cgroupMounts(); err != nil || len(mounts) == 0 {
		missing = append(missing, "a mounted cgroup filesystem under /sys/fs/cgroup")
	}
	if fs, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(fs), "\toverlay\n") {
		missing = append(missing, "overlayfs in the kernel (containerd's snapshotter; try `modprobe overlay`)")
	}
	if len(missing) > 0 {
		return &NodeUnavailableError{Missing: missing}
	}
	var unbuilt []string
	for _, name := range nodeBinaryNames {
		if !isExecutable(filepath.Join(binDir, name)) {
			unbuilt = append(unbuilt, name)
		}
	}
	if len(unbuilt) > 0 {
		return &MissingBinariesError{Dir: binDir, Missing: unbuilt}
	}
	return nil
}

// lookPath finds a program on PATH or in the sbin directories, which a non-login root shell may
// lack on its PATH.
func lookPath(program string) (string, error) {
	if filepath.IsAbs(program) {
		if isExecutable(program) {
			return program, nil
		}
		return "", fmt.Errorf("%s not found", program)
	}
	if p, err := exec.LookPath(program); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		if p := filepath.Join(dir, program); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH", program)
}

// CIEnv is the environment variable that, set to "true" (as CI systems do), turns a real node that
// cannot start from a skip into a failure: CI must never go green without real Pods.
const CIEnv = "CI"

func inCI() bool { return os.Getenv(CIEnv) == "true" }

// RequireNode skips the test when the test bed has no real node because this machine cannot run
// one, with the reason; under CI=true it fails the test instead. A test bed started without
// Options.Node fails the test: that is a mistake in the test, not a missing tool.
func RequireNode(t testing.TB, c *Cluster) {
	t.Helper()
	if c.Node {
		return
	}
	if c.nodeErr == nil {
		t.Fatal("testbed.RequireNode: this test bed runs no real node; start it with testbed.Options{Node: true}")
		return
	}
	if inCI() {
		t.Fatalf("the real node is required under %s=true: %v", CIEnv, c.nodeErr)
		return
	}
	t.Skipf("skipped: %v", c.nodeErr)
}

// OnRealNode makes a Pod run on the test bed's real node: it selects the node by name and
// tolerates the taint that keeps other Pods off the real node when kwok's fake node runs too
// (Options{Jobs: true, Node: true}), so tests written for kwok keep their simulated Pods.
func OnRealNode(spec *corev1.PodSpec) {
	if spec.NodeSelector == nil {
		spec.NodeSelector = map[string]string{}
	}
	spec.NodeSelector[corev1.LabelHostname] = RealNodeName
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{
		Key: RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
	})
}
