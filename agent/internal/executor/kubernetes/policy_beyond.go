package kubernetes

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Fields of a pod that Pod Security does not judge but that reach beyond the pod: other claims'
// data, other workloads' priority and nodes, other runtimes, other Secrets' registry logins, the
// agent's own Service. The job pod policy refuses each unless the cluster owner allows it by
// name (policy.go has the fields and values).

// beyondThePod checks the pod-level fields that reach beyond the pod.
func (c *policyCheck) beyondThePod(tpl *corev1.PodTemplateSpec) {
	spec := &tpl.Spec
	if pc := spec.PriorityClassName; pc != "" && !slices.Contains(c.p.AllowedPriorityClasses, pc) {
		c.refuse("spec.priorityClassName", fmt.Sprintf("is %q: job pods keep the default priority, so they preempt nothing", pc), valuePriorityClasses)
	}
	if rc := spec.RuntimeClassName; rc != nil && *rc != "" && !slices.Contains(c.p.AllowedRuntimeClasses, *rc) {
		c.refuse("spec.runtimeClassName", fmt.Sprintf("is %q: job pods run with the node's default container runtime", *rc), valueRuntimeClasses)
	}
	if !c.p.AllowTolerateAll {
		for i, t := range spec.Tolerations {
			if t.Key == "" && t.Operator == corev1.TolerationOpExists {
				c.refuse(fmt.Sprintf("spec.tolerations[%d]", i), "tolerates every taint (operator Exists without a key): job pods stay off the nodes tainted against them", valueTolerateAll)
			}
		}
	}
	for i, s := range spec.ImagePullSecrets {
		c.secret(fmt.Sprintf("spec.imagePullSecrets[%d].name", i), s.Name)
	}
	if sel := c.p.AgentSelector; len(sel) > 0 && !c.p.AllowAgentLabels && matchesSelector(tpl.Labels, sel) {
		keys := slices.Sorted(maps.Keys(sel))
		c.refuse("metadata.labels", fmt.Sprintf("match the agent Service's selector (%s): a job pod must not receive the agent's traffic", strings.Join(keys, ", ")), valueAgentLabels)
	}
}

// matchesSelector reports whether labels has every label of sel.
func matchesSelector(labels, sel map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// handlerHosts refuses probes and lifecycle hooks that name a host: the kubelet sends those
// requests from the node's network namespace, where NetworkPolicies do not apply, to whatever
// the host names (the metadata service, another pod), and the probe's outcome tells the pod
// whether it answered. Pod Security baseline refuses them too.
func (c *policyCheck) handlerHosts(at string, ctr *corev1.Container) {
	if c.p.AllowHostNamespaces {
		return
	}
	check := func(field string, http *corev1.HTTPGetAction, tcp *corev1.TCPSocketAction) {
		if http != nil && http.Host != "" {
			c.refuse(field+".httpGet.host", fmt.Sprintf("is %q: probes and hooks reach only their own pod", http.Host), valueHostNamespaces)
		}
		if tcp != nil && tcp.Host != "" {
			c.refuse(field+".tcpSocket.host", fmt.Sprintf("is %q: probes and hooks reach only their own pod", tcp.Host), valueHostNamespaces)
		}
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
	}{{"livenessProbe", ctr.LivenessProbe}, {"readinessProbe", ctr.ReadinessProbe}, {"startupProbe", ctr.StartupProbe}} {
		if p.probe != nil {
			check(at+"."+p.name, p.probe.HTTPGet, p.probe.TCPSocket)
		}
	}
	if l := ctr.Lifecycle; l != nil {
		for _, h := range []struct {
			name    string
			handler *corev1.LifecycleHandler
		}{{"postStart", l.PostStart}, {"preStop", l.PreStop}} {
			if h.handler != nil {
				check(at+".lifecycle."+h.name, h.handler.HTTPGet, h.handler.TCPSocket)
			}
		}
	}
}
