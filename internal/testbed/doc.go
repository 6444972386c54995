// Package testbed runs a local Kubernetes cluster made of real parts for tests: etcd,
// kube-apiserver and, when Pods are wanted, kube-controller-manager, kube-scheduler, kwok and a
// real node, all built from Go sources by scripts/testbed-build.sh.
//
// Why real parts: the agent's correctness depends on what a real API server does (resourceVersion
// compare-and-swap on Secrets, Lease semantics, RBAC, admission, the Job controller's pod failure
// policy, garbage collection of a Job's pods). A fake clientset agrees with whatever the test
// assumes; the real API server does not.
//
// Two kinds of node run Pods, chosen per test binary with Options:
//
// Options.Jobs: kwok plays the kubelet for a fake Node. A Pod that is scheduled becomes Running and
// then, after about a second, Succeeded with exit code 0, unless it carries the annotation
// testbed.outpost.dev/exit-code: "N", in which case its containers terminate with exit code N and
// the Pod fails (so the real Job controller fails the Job and a pod failure policy on exit codes
// acts on it). A Pod that cannot be scheduled stays Pending, with the scheduler's FailedScheduling
// events, as on a real cluster. RunDurationAnnotation makes a Pod run longer (cancellation tests),
// WaitingReasonAnnotation keeps it Pending as if its image could not be pulled (start-up timeout
// tests). Pods with restartPolicy Always (Deployments) stay Running. kwok.yaml has the details.
// Cheap: hundreds of Pods in seconds, for load tests.
//
// Options.Node: a real node (node.go) where containers really run: containerd and runc from
// Debian, the kubelet and kube-proxy (iptables) built from Kubernetes' sources, CoreDNS, the
// CNI bridge and kube-network-policies, which enforces NetworkPolicies on the node's packets
// (node_netpol.go), all in PID, mount and network namespaces of their own, so stopping the test
// bed leaves nothing behind. A stand-in of the cloud metadata service answers HTTP on MetadataIP
// from a network namespace beyond the node, so a test can show a Pod reaching it or not. The node pulls images from the test bed's own OCI registry
// (Cluster.Registry, registry.go: HTTPS with the test bed's CA, basic auth, so a Pod pulls only
// with an imagePullSecret that logs in); Cluster.ImportImage imports an archive instead
// (PauseImage and ToolboxImage are built in). Pods reach servers of the test at Cluster.HostIP. With both options, the real node is tainted (RealNodeTaint) and only Pods that
// OnRealNode marked go there. A machine that cannot run the node (not root, no cgroups, no
// overlayfs, a Debian package missing) makes Start fail with a NodeUnavailableError saying what
// is missing; Main then runs the tests without it and RequireNode skips those that need it,
// except under CI=true, where the run fails.
//
// Options.Nodes: 2 runs a second real node beside the first (Cluster.RealNodes names both): its
// own namespaces, containerd, kubelet, kube-proxy, CoreDNS and kube-network-policies, joined to
// the first's network so Pods on both reach each other by their own addresses (node_network.go).
// The node lifecycle then takes seconds rather than minutes, for tests that lose or drain a node;
// Kubectl gives them the kubectl of the same Kubernetes release.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { testbed.Main(m, testbed.Options{Jobs: true, Node: true}) }
//
//	func TestSomething(t *testing.T) {
//		c := testbed.Shared(t)
//		ns := testbed.NewNamespace(t, c)
//		_, err := c.Client().CoreV1().Secrets(ns).Create(...)
//	}
//
//	func TestRealPod(t *testing.T) {
//		c := testbed.Shared(t)
//		testbed.RequireNode(t, c)
//		ref, err := c.PushToolbox(t.Context(), "test/toolbox:1") // or remote.Write with tools/ocitest.RemoteOptions
//		// a Pod pulling ref with an imagePullSecret of c.Registry.DockerConfigJSON(...)
//		spec := corev1.PodSpec{...}
//		testbed.OnRealNode(&spec)
//	}
//
// A package whose other tests need no cluster gives the one test that does a test bed of its own
// with ForTest instead of a TestMain.
//
// Under `go test -short` (`make check`) no test bed starts: Main runs the package's tests and
// Shared and ForTest skip the tests that need one, with SkipReason, so the plain unit tests of the
// same package still run. `make test` never passes -short, and with CI=true -short is refused.
//
// Setting OUTPOST_TESTBED_KUBECONFIG to the kubeconfig of a running test bed (from
// `make testbed-up`) makes Main use it instead of starting a new one, which saves the few seconds
// of start-up when iterating on one test.
package testbed
