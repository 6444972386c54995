package testbed_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// TestTwoRealNodes starts a test bed with two real nodes (Options.Nodes) and shows that they
// form one cluster: both are Ready; a server Pod on the first node is reached from a Pod on the
// second by its Pod IP, through a ClusterIP Service and by its DNS name; a Pod on the second
// node reaches the API server through the kubernetes Service and a server of the test on
// HostIP; and traffic between Pods keeps its source address, so an ingress NetworkPolicy that
// admits only Pods labelled as clients admits a client on the other node and refuses one
// without the label (with masquerading, both would look like the node and both be refused).
func TestTwoRealNodes(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := testbed.ForTest(t, testbed.Options{Node: true, Nodes: 2})
	testbed.RequireNode(t, c)
	t.Logf("two-node test bed ready in %s", time.Since(start).Round(100*time.Millisecond))
	if len(c.RealNodes) != 2 || c.RealNodes[0] != testbed.RealNodeName {
		t.Fatalf("RealNodes = %v, want %s and a second", c.RealNodes, testbed.RealNodeName)
	}
	first, second := c.RealNodes[0], c.RealNodes[1]
	ns := testbed.NewNamespace(t, c)
	cs := c.Client()

	text := "served-" + rand.String(8)
	server := onNode(realPod(ns, "web", map[string]string{"app": "web"}, corev1.RestartPolicyAlways, "serve", ":8080", text), first)
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), server, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	created, err := cs.CoreV1().Services(ns).Create(t.Context(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	webIP := waitPodIP(t, c, ns, "web")
	if !strings.HasPrefix(webIP, "10.246.0.") {
		t.Errorf("the first node's Pod has IP %s, want one of its subnet 10.246.0.0/24", webIP)
	}

	hostText := "host-" + rand.String(8)
	hostAddr := serveOnHostIP(t, c, hostText)

	targets := map[string]string{
		"http://" + webIP + ":8080/":               text,
		"http://" + created.Spec.ClusterIP + "/":   text,
		"http://web." + ns + ".svc.cluster.local/": text,
		"http://" + hostAddr + "/":                 hostText,
	}
	for url, want := range targets {
		pod := onNode(realPod(ns, "client-"+rand.String(5), map[string]string{"role": "client"}, corev1.RestartPolicyNever, "get", "-for", "60s", url), second)
		phase, out := runToCompletion(t, c, pod)
		if phase != corev1.PodSucceeded || !strings.HasSuffix(out, want) {
			t.Errorf("a Pod on %s got %s: %s, output %q; want %q", second, url, phase, out, want)
		}
	}
	phase, out := runToCompletion(t, c, onNode(realPod(ns, "api", nil, corev1.RestartPolicyNever, "get", "https://kubernetes.default.svc/version"), second))
	if phase != corev1.PodSucceeded || !strings.Contains(out, fmt.Sprintf("%q", testbed.KubernetesVersion)) {
		t.Errorf("a Pod on %s: %s, output %q; want the API server's version through the kubernetes Service", second, phase, out)
	}
	pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "role=client"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Status.PodIP, "10.246.1.") {
			t.Errorf("Pod %s on the second node has IP %q, want one of its subnet 10.246.1.0/24", p.Name, p.Status.PodIP)
		}
	}

	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "web-from-clients", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}},
			}}}},
		},
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(t.Context(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := "http://" + webIP + ":8080/"
	probe := []string{"reach", "-after", "3s", web}
	_, out = runToCompletion(t, c, onNode(realPod(ns, "client-allowed", map[string]string{"role": "client"}, corev1.RestartPolicyNever, probe...), second))
	if want := "reach " + web + ": ok"; !strings.Contains(out, want) {
		t.Errorf("a client on the other node must pass the policy by its own address; output:\n%s\nwant %q", out, want)
	}
	_, out = runToCompletion(t, c, onNode(realPod(ns, "stranger", nil, corev1.RestartPolicyNever, probe...), second))
	if want := "reach " + web + ": unreachable"; !strings.Contains(out, want) {
		t.Errorf("a Pod without the client label must be refused; output:\n%s\nwant %q", out, want)
	}
}

// onNode puts a real-node Pod on the node of that name.
func onNode(pod *corev1.Pod, node string) *corev1.Pod {
	pod.Spec.NodeSelector[corev1.LabelHostname] = node
	return pod
}
