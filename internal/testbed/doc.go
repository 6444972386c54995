// Package testbed runs a local Kubernetes control plane made of real parts for tests: etcd,
// kube-apiserver and, when Jobs are wanted, kube-controller-manager, kube-scheduler and kwok, all
// built from Go sources by scripts/testbed-build.sh.
//
// Why real parts: the agent's correctness depends on what a real API server does (resourceVersion
// compare-and-swap on Secrets, Lease semantics, RBAC, admission, the Job controller's pod failure
// policy, garbage collection of a Job's pods). A fake clientset agrees with whatever the test
// assumes; the real API server does not.
//
// There is no container runtime on the machines that run these tests, so no Pod really runs.
// kwok plays the kubelet for fake Nodes instead: a Pod that is scheduled becomes Running and then,
// after about a second, Succeeded with exit code 0, unless it carries the annotation
// testbed.outpost.dev/exit-code: "N", in which case its containers terminate with exit code N and
// the Pod fails (so the real Job controller fails the Job and a pod failure policy on exit codes
// acts on it). A Pod that cannot be scheduled stays Pending, with the scheduler's FailedScheduling
// events, as on a real cluster. RunDurationAnnotation makes a Pod run longer (cancellation tests),
// WaitingReasonAnnotation keeps it Pending as if its image could not be pulled (start-up timeout
// tests). Pods with restartPolicy Always (Deployments) stay Running. kwok.yaml has the details.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { testbed.Main(m, testbed.Options{Jobs: true}) }
//
//	func TestSomething(t *testing.T) {
//		c := testbed.Shared(t)
//		ns := testbed.NewNamespace(t, c)
//		_, err := c.Client().CoreV1().Secrets(ns).Create(...)
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
