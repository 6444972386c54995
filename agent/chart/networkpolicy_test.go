package chart_test

import (
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
)

// peerPod is a pod that may try to reach the agent: its namespace's labels and its own.
type peerPod struct {
	name      string
	nsLabels  map[string]string
	podLabels map[string]string
}

// admits reports whether the ingress policy lets pod p connect to port on the pods it selects,
// evaluating matchLabels selectors the way Kubernetes does (a peer with both selectors needs
// both; a peer with a podSelector only means the policy's own namespace).
func admits(np *networkingv1.NetworkPolicy, policyNS map[string]string, p peerPod, port int) bool {
	matches := func(sel map[string]string, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return true
	}
	for _, rule := range np.Spec.Ingress {
		portOK := len(rule.Ports) == 0
		for _, rp := range rule.Ports {
			if rp.Port != nil && rp.Port.IntValue() == port {
				portOK = true
			}
		}
		if !portOK {
			continue
		}
		if len(rule.From) == 0 {
			return true
		}
		for _, peer := range rule.From {
			nsOK := (peer.NamespaceSelector == nil && matches(policyNS, p.nsLabels) && len(policyNS) > 0) ||
				(peer.NamespaceSelector != nil && matches(peer.NamespaceSelector.MatchLabels, p.nsLabels))
			podOK := peer.PodSelector == nil || matches(peer.PodSelector.MatchLabels, p.podLabels)
			if peer.IPBlock == nil && nsOK && podOK {
				return true
			}
		}
	}
	return false
}

// TestAgentIngressNetworkPolicy: the agent's state port takes only this runner's job pods and the
// other agent replica; its metrics port only what networkPolicy.metricsFrom allows, nobody by
// default.
func TestAgentIngressNetworkPolicy(t *testing.T) {
	ns := func(name string) map[string]string { return map[string]string{"kubernetes.io/metadata.name": name} }
	agentLabels := map[string]string{"app.kubernetes.io/name": "outpost-agent", "app.kubernetes.io/instance": "outpost-agent", "app.kubernetes.io/component": "agent"}
	job := func(runner string) map[string]string {
		return map[string]string{"app.kubernetes.io/managed-by": "outpost-agent", "outpost.dev/runner-id": runner}
	}
	pods := map[string]peerPod{
		"job":           {"a job pod of this runner", ns("outpost-jobs"), job("prod-eu")},
		"otherRunner":   {"a job pod of another runner", ns("outpost-jobs"), job("staging")},
		"unlabelled":    {"another pod of the jobs namespace", ns("outpost-jobs"), map[string]string{"app": "x"}},
		"jobElsewhere":  {"a pod with job labels in another namespace", ns("default"), job("prod-eu")},
		"replica":       {"the other agent replica", ns(releaseNamespace), agentLabels},
		"prometheus":    {"Prometheus in monitoring", ns("monitoring"), map[string]string{"app": "prometheus"}},
		"sameNamespace": {"another pod of the release namespace", ns(releaseNamespace), map[string]string{"app": "x"}},
	}
	check := func(t *testing.T, values string, state, metrics []string) {
		t.Helper()
		r := render(t, "jobs: {namespace: outpost-jobs}\n"+values)
		np := get[networkingv1.NetworkPolicy](t, r, "NetworkPolicy", releaseNamespace, "outpost-agent")
		if !mapsEqual(np.Spec.PodSelector.MatchLabels, agentLabels) || len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
			t.Errorf("policy selects %v with types %v; want the agent pods, Ingress only", np.Spec.PodSelector.MatchLabels, np.Spec.PolicyTypes)
		}
		want := map[int][]string{8080: state, 8443: state, 9090: metrics}
		for port, allowed := range want {
			for key, p := range pods {
				wantIn := false
				for _, a := range allowed {
					wantIn = wantIn || a == key
				}
				if got := admits(np, ns(releaseNamespace), p, port); got != wantIn {
					t.Errorf("%s on port %d: admitted %v, want %v", p.name, port, got, wantIn)
				}
			}
		}
	}
	t.Run("default", func(t *testing.T) {
		check(t, "", []string{"job", "replica"}, nil)
	})
	t.Run("metricsFrom", func(t *testing.T) {
		check(t, "networkPolicy: {metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]}",
			[]string{"job", "replica"}, []string{"prometheus"})
	})
	t.Run("disabled", func(t *testing.T) {
		if r := render(t, "networkPolicy: {enabled: false}"); r.has("NetworkPolicy", releaseNamespace, "outpost-agent") {
			t.Fatal("networkPolicy.enabled=false still renders the agent's ingress policy")
		}
	})
}
