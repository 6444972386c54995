package chart_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

const testName = "outpost-agent-test-connection"

// TestConnectionTestHook checks the `helm test` hook: a pod from the agent image running
// `outpost-agent check-connection` on the agent's Lease, hardened like the agent, under a
// ServiceAccount that may only get that one Lease, selected by none of the chart's
// NetworkPolicies (it needs the Kubernetes API only), and cleaned up by Helm.
func TestConnectionTestHook(t *testing.T) {
	r := render(t, "jobs: {namespace: outpost-jobs}\ntests: {maxAge: 90s, wait: 2m}\nimagePullSecrets: [regcred]")
	tests := r.tests
	if !strings.Contains(r.notes, "helm test outpost-agent -n outpost-system") {
		t.Errorf("NOTES.txt does not tell how to run the test:\n%s", r.notes)
	}
	wantKeys := []string{"Pod outpost-system/" + testName, "Role outpost-system/" + testName,
		"RoleBinding outpost-system/" + testName, "ServiceAccount outpost-system/" + testName}
	if got := tests.keys(); !slices.Equal(got, wantKeys) {
		t.Fatalf("test hooks %v, want %v", got, wantKeys)
	}
	for _, k := range wantKeys {
		if r.objects[k] != nil {
			t.Errorf("%s is installed with the release; it belongs to `helm test` only", k)
		}
	}

	pod := get[corev1.Pod](t, tests, "Pod", releaseNamespace, testName)
	if pod.Annotations["helm.sh/hook"] != "test" || pod.Annotations["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" ||
		pod.Annotations["helm.sh/hook-output-log-policy"] != "hook-failed" {
		t.Errorf("pod annotations %v", pod.Annotations)
	}
	for _, k := range wantKeys[1:] {
		var meta metav1.Object
		switch o := tests.objects[k].(type) {
		case *rbacv1.Role:
			meta = o
		case *rbacv1.RoleBinding:
			meta = o
		case *corev1.ServiceAccount:
			meta = o
		}
		// Created before the pod (lower weight), deleted with it.
		if a := meta.GetAnnotations(); a["helm.sh/hook"] != "test" || a["helm.sh/hook-weight"] != "-1" || a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
			t.Errorf("%s annotations %v", k, a)
		}
	}
	spec := pod.Spec
	if spec.ServiceAccountName != testName || spec.RestartPolicy != corev1.RestartPolicyNever || len(spec.Containers) != 1 ||
		len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "regcred" {
		t.Fatalf("pod spec %+v", spec)
	}
	c := spec.Containers[0]
	wantArgs := []string{"check-connection", "--namespace=outpost-system", "--lease=outpost-agent", "--max-age=90s", "--wait=2m"}
	if c.Image != agentImage || !slices.Equal(c.Args, wantArgs) || len(c.Command) != 0 {
		t.Errorf("container runs %s %v %v, want the agent image's entrypoint with %v", c.Image, c.Command, c.Args, wantArgs)
	}
	if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError || c.Resources.Limits.Memory().String() != "64Mi" {
		t.Errorf("termination message policy %s, resources %+v", c.TerminationMessagePolicy, c.Resources)
	}
	// Hardened like the agent: Pod Security restricted.
	d, agent := r.deployment(t)
	sc := c.SecurityContext
	if sc == nil || *sc.RunAsNonRoot != true || *sc.ReadOnlyRootFilesystem != true || *sc.AllowPrivilegeEscalation != false ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context %+v", sc)
	}
	if *sc.RunAsNonRoot != *agent.SecurityContext.RunAsNonRoot || spec.SecurityContext == nil || *spec.SecurityContext.RunAsUser != *d.Spec.Template.Spec.SecurityContext.RunAsUser {
		t.Errorf("pod security context %+v, want the agent's %+v", spec.SecurityContext, d.Spec.Template.Spec.SecurityContext)
	}

	// Its ServiceAccount may get the agent's Lease, and nothing else.
	for _, tc := range []struct {
		access
		want bool
	}{
		{access{"get", "coordination.k8s.io", "leases", releaseNamespace, releaseName}, true},
		{access{"get", "coordination.k8s.io", "leases", releaseNamespace, "another-lease"}, false},
		{access{"list", "coordination.k8s.io", "leases", releaseNamespace, ""}, false},
		{access{"update", "coordination.k8s.io", "leases", releaseNamespace, releaseName}, false},
		{access{"get", "", "secrets", releaseNamespace, "prod-eu-key"}, false},
		{access{"get", "", "pods", releaseNamespace, ""}, false},
	} {
		if got := tests.allowed(releaseNamespace, testName, tc.access); got != tc.want {
			t.Errorf("test ServiceAccount: %s allowed = %v, want %v", tc.access, got, tc.want)
		}
	}
	for _, rb := range all[rbacv1.RoleBinding](tests) {
		if len(rb.Subjects) != 1 || rb.Subjects[0].Name != testName {
			t.Errorf("RoleBinding %s binds %+v", rb.Name, rb.Subjects)
		}
	}

	// No NetworkPolicy of the chart selects it: it reaches the API server, and the agent's
	// policies (ingress of the agent pods, egress of the job pods) are not about it.
	for _, np := range all[networkingv1.NetworkPolicy](r) {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		if np.Namespace == pod.Namespace && sel.Matches(labels.Set(pod.Labels)) {
			t.Errorf("NetworkPolicy %s selects the test pod", np.Name)
		}
	}
}

func TestConnectionTestHookVariants(t *testing.T) {
	if r := render(t, "tests: {enabled: false}"); len(r.tests.objects) != 0 || strings.Contains(r.notes, "helm test") {
		t.Errorf("tests.enabled=false renders %v and notes:\n%s", r.tests.keys(), r.notes)
	}
	// The longest full name still gives names that fit, and the Lease it reads is the agent's.
	long := strings.Repeat("a", 63)
	r := render(t, "fullnameOverride: "+long)
	for _, k := range r.tests.keys() {
		if name := k[strings.LastIndex(k, "/")+1:]; len(name) > 63 {
			t.Errorf("%s: name longer than 63 characters", k)
		}
	}
	pods := all[corev1.Pod](r.tests)
	if len(pods) != 1 || !slices.Contains(pods[0].Spec.Containers[0].Args, "--lease="+long) {
		t.Errorf("test pod of a long full name: %+v", pods)
	}
	if lease := r.agentConfig(t).LeaderElection.LeaseName; lease != long {
		t.Errorf("leaderElection.leaseName = %q, want %q", lease, long)
	}
	if _, err := renderChart(t, "tests: {wait: soon}", renderOptions{}); err == nil || !strings.Contains(err.Error(), "tests") {
		t.Errorf("tests.wait=soon: %v", err)
	}
}
