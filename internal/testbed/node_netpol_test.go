package testbed_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// TestNetworkPoliciesAreEnforced: the real node's kube-network-policies drops what a
// NetworkPolicy refuses. A client Pod reaches the metadata stand-in and a server Pod; after an
// egress policy blocking the metadata address and an ingress policy denying the server
// everything, a new client reaches neither, by real packets on the node's network.
func TestNetworkPoliciesAreEnforced(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	testbed.RequireNode(t, c)
	ns := testbed.NewNamespace(t, c)
	cs := c.Client()
	text := "served-" + rand.String(8)
	server := realPod(ns, "web", map[string]string{"app": "web"}, corev1.RestartPolicyAlways, "serve", ":8080", text)
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), server, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	webIP := waitPodIP(t, c, ns, "web")
	metadata := "http://" + testbed.MetadataIP + "/latest/meta-data/"
	web := "http://" + webIP + ":8080/"
	// -after: the controller learns a new Pod's IP from the API server a moment after it starts.
	probe := []string{"reach", "-after", "3s", metadata, web}

	_, out := runToCompletion(t, c, realPod(ns, "before", map[string]string{"app": "client"}, corev1.RestartPolicyNever, probe...))
	for _, want := range []string{"reach " + metadata + ": ok: 200 OK \"" + testbed.MetadataText + "\"", "reach " + web + ": ok: 200 OK \"" + text + "\""} {
		if !strings.Contains(out, want) {
			t.Fatalf("without a NetworkPolicy the client must reach both; its output:\n%s\nwant %q", out, want)
		}
	}

	egress := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-metadata", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{
				IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{testbed.MetadataIP + "/32"}},
			}}}},
		},
	}
	ingress := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "web-deny-all", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
	for _, p := range []*networkingv1.NetworkPolicy{egress, ingress} {
		if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_, out = runToCompletion(t, c, realPod(ns, "after", map[string]string{"app": "client"}, corev1.RestartPolicyNever, probe...))
	for _, want := range []string{"reach " + metadata + ": unreachable", "reach " + web + ": unreachable"} {
		if !strings.Contains(out, want) {
			t.Errorf("with the NetworkPolicies the client must reach neither; its output:\n%s\nwant %q", out, want)
		}
	}
	t.Logf("refused client ran in %s", time.Since(start).Round(100*time.Millisecond))
}

// waitPodIP waits until a Pod is Running and returns its IP.
func waitPodIP(t *testing.T, c *testbed.Cluster, ns, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	for {
		p, err := c.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("waiting for Pod %s: %v", name, err)
		}
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			return p.Status.PodIP
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Pod %s is not running: %+v", name, p.Status)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
