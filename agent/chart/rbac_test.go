package chart_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// access is one request a subject may or may not make, the question a SubjectAccessReview asks.
type access struct {
	verb, group, resource, namespace, name string
}

func (a access) String() string {
	s := fmt.Sprintf("%s %s", a.verb, a.resource)
	if a.group != "" {
		s += "." + a.group
	}
	if a.name != "" {
		s += "/" + a.name
	}
	return s + " in " + a.namespace
}

// allowed evaluates the rendered Roles and RoleBindings the way the RBAC authorizer does for a
// ServiceAccount (subject namespace/name): the request is allowed when a RoleBinding in the
// request's namespace binds the subject to a Role there with a matching rule. The chart creates no
// ClusterRole, so Roles are all there is.
func (r *rendered) allowed(subjectNamespace, subjectName string, a access) bool {
	for _, rb := range all[rbacv1.RoleBinding](r) {
		if rb.Namespace != a.namespace || rb.RoleRef.Kind != "Role" {
			continue
		}
		if !slices.ContainsFunc(rb.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == subjectNamespace && s.Name == subjectName
		}) {
			continue
		}
		role, ok := r.objects["Role "+rb.Namespace+"/"+rb.RoleRef.Name].(*rbacv1.Role)
		if !ok {
			continue
		}
		for _, rule := range role.Rules {
			if matches(rule.APIGroups, a.group) && matches(rule.Resources, a.resource) && matches(rule.Verbs, a.verb) &&
				(len(rule.ResourceNames) == 0 || slices.Contains(rule.ResourceNames, a.name)) {
				return true
			}
		}
	}
	return false
}

func matches(list []string, v string) bool {
	return slices.Contains(list, v) || slices.Contains(list, "*")
}

// agentAccess lists what the agent must and must not be able to do with jobs in outpost-jobs and
// state in outpost-state. The install test on the test bed asks the real API server the same.
var agentAccess = []struct {
	access
	want bool
}{
	// Jobs namespace: the Jobs, what to read about them, the job token Secrets.
	{access{"create", "batch", "jobs", "outpost-jobs", ""}, true},
	{access{"watch", "batch", "jobs", "outpost-jobs", ""}, true},
	{access{"patch", "batch", "jobs", "outpost-jobs", "deploy-1"}, true},
	{access{"delete", "batch", "jobs", "outpost-jobs", "deploy-1"}, true},
	{access{"update", "batch", "jobs", "outpost-jobs", "deploy-1"}, false},
	{access{"list", "", "pods", "outpost-jobs", ""}, true},
	{access{"delete", "", "pods", "outpost-jobs", "deploy-1-abcde"}, false},
	{access{"create", "", "pods", "outpost-jobs", ""}, false},
	{access{"get", "", "pods/log", "outpost-jobs", "deploy-1-abcde"}, true},
	{access{"create", "", "pods/exec", "outpost-jobs", "deploy-1-abcde"}, false},
	{access{"list", "", "events", "outpost-jobs", ""}, true},
	{access{"create", "", "secrets", "outpost-jobs", ""}, true},
	{access{"get", "", "secrets", "outpost-jobs", "deploy-1-token"}, true},
	{access{"delete", "", "secrets", "outpost-jobs", "deploy-1-token"}, true},
	{access{"patch", "", "secrets", "outpost-jobs", "deploy-1-token"}, false}, // the owner is set at create
	{access{"list", "", "secrets", "outpost-jobs", ""}, false},
	{access{"update", "", "secrets", "outpost-jobs", "deploy-1-token"}, false},
	{access{"create", "", "serviceaccounts/token", "outpost-jobs", "outpost-job"}, false},
	// State namespace: state Secrets and lock Leases, nothing else.
	{access{"get", "", "secrets", "outpost-state", "tfstate-prod"}, true},
	{access{"list", "", "secrets", "outpost-state", ""}, true},
	{access{"update", "", "secrets", "outpost-state", "tfstate-prod"}, true},
	{access{"delete", "", "secrets", "outpost-state", "tfstate-prod-1"}, true},
	{access{"deletecollection", "", "secrets", "outpost-state", ""}, true}, // garbage collection of old state generations
	{access{"create", "coordination.k8s.io", "leases", "outpost-state", ""}, true},
	{access{"delete", "coordination.k8s.io", "leases", "outpost-state", "lock-prod"}, true},
	{access{"create", "batch", "jobs", "outpost-state", ""}, false},
	{access{"list", "", "pods", "outpost-state", ""}, false},
	// Release namespace: its own leader Lease and events, and of the Secrets only its key, by
	// name (read and watched, so a rotated key reaches the running agent).
	{access{"create", "coordination.k8s.io", "leases", "outpost-system", ""}, true},
	{access{"get", "coordination.k8s.io", "leases", "outpost-system", "outpost-agent"}, true},
	{access{"update", "coordination.k8s.io", "leases", "outpost-system", "outpost-agent"}, true},
	{access{"update", "coordination.k8s.io", "leases", "outpost-system", "another-lease"}, false},
	{access{"delete", "coordination.k8s.io", "leases", "outpost-system", "outpost-agent"}, false},
	{access{"create", "", "events", "outpost-system", ""}, true},
	{access{"create", "events.k8s.io", "events", "outpost-system", ""}, true},
	{access{"get", "", "pods", "outpost-system", "outpost-agent-7d9f-abcde"}, true}, // standby finds the leader pod
	{access{"list", "", "pods", "outpost-system", ""}, false},
	{access{"get", "", "secrets", "outpost-system", "prod-eu-key"}, true},
	{access{"watch", "", "secrets", "outpost-system", "prod-eu-key"}, true},
	{access{"update", "", "secrets", "outpost-system", "prod-eu-key"}, false},
	{access{"get", "", "secrets", "outpost-system", "other-secret"}, false},
	{access{"list", "", "secrets", "outpost-system", ""}, false},
	{access{"create", "batch", "jobs", "outpost-system", ""}, false},
	// Anywhere else: nothing.
	{access{"get", "", "secrets", "kube-system", "bootstrap-token-abcdef"}, false},
	{access{"get", "", "secrets", "default", "db"}, false},
	{access{"create", "batch", "jobs", "default", ""}, false},
	{access{"list", "", "namespaces", "", ""}, false},
	{access{"list", "", "nodes", "", ""}, false},
}

// TestRBAC checks the agent's permissions request by request, the namespaces of its Roles, and that
// the jobs' ServiceAccount gets nothing.
func TestRBAC(t *testing.T) {
	r := render(t, "jobs: {namespace: outpost-jobs}\nstate: {namespace: outpost-state}")

	for _, tc := range agentAccess {
		if got := r.allowed(releaseNamespace, "outpost-agent", tc.access); got != tc.want {
			t.Errorf("agent: %s allowed = %v, want %v", tc.access, got, tc.want)
		}
	}
	for _, a := range []access{
		{"get", "", "secrets", "outpost-jobs", "deploy-1-token"},
		{"list", "", "secrets", "outpost-state", ""},
		{"get", "", "pods", "outpost-jobs", ""},
		{"create", "batch", "jobs", "outpost-jobs", ""},
		{"get", "coordination.k8s.io", "leases", "outpost-state", "lock-prod"},
	} {
		if r.allowed("outpost-jobs", "outpost-job", a) {
			t.Errorf("job ServiceAccount: %s allowed, want nothing for jobs without jobs.rbac.rules", a)
		}
	}

	// Where the Roles are, and that no rule is a wildcard.
	wantRoles := map[string]bool{
		"outpost-system/outpost-agent":                     true,
		"outpost-jobs/outpost-system-outpost-agent-jobs":   true,
		"outpost-state/outpost-system-outpost-agent-state": true,
	}
	for _, role := range all[rbacv1.Role](r) {
		key := role.Namespace + "/" + role.Name
		if !wantRoles[key] {
			t.Errorf("unexpected Role %s", key)
		}
		delete(wantRoles, key)
		for _, rule := range role.Rules {
			for _, list := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs} {
				if slices.Contains(list, "*") {
					t.Errorf("Role %s has a wildcard rule %+v", key, rule)
				}
			}
			keyOnly := slices.Equal(rule.ResourceNames, []string{"prod-eu-key"}) && !slices.ContainsFunc(rule.Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" })
			// The state backend's CA: made once (create cannot name the object), then read and
			// filled by name only.
			caOnly := role.Namespace == "outpost-system" && (slices.Equal(rule.Verbs, []string{"create"}) && len(rule.ResourceNames) == 0 ||
				slices.Equal(rule.ResourceNames, []string{"outpost-agent-state-tls"}) && slices.Equal(rule.Verbs, []string{"get", "update"}))
			if slices.Contains(rule.Resources, "secrets") && role.Namespace != "outpost-jobs" && role.Namespace != "outpost-state" && !keyOnly && !caOnly {
				t.Errorf("Role %s grants Secret access outside the jobs and state namespaces beyond reading the key Secret and keeping the state CA: %+v", key, rule)
			}
		}
	}
	if len(wantRoles) != 0 {
		t.Errorf("missing Roles %v", wantRoles)
	}
	for _, rb := range all[rbacv1.RoleBinding](r) {
		if !r.has("Role", rb.Namespace, rb.RoleRef.Name) || rb.RoleRef.Kind != "Role" {
			t.Errorf("RoleBinding %s/%s refers to %s %s, which the chart does not create there", rb.Namespace, rb.Name, rb.RoleRef.Kind, rb.RoleRef.Name)
		}
		for _, s := range rb.Subjects {
			if s.Kind != rbacv1.ServiceAccountKind || s.Namespace != releaseNamespace || s.Name != "outpost-agent" {
				t.Errorf("RoleBinding %s/%s binds %+v, want only the agent's ServiceAccount", rb.Namespace, rb.Name, s)
			}
		}
	}
}

// TestRBACVariants checks the other RBAC shapes: state off, everything in the release namespace,
// extra rules for the jobs, and RBAC left to the user.
func TestRBACVariants(t *testing.T) {
	t.Run("state disabled", func(t *testing.T) {
		r := render(t, "jobs: {namespace: outpost-jobs}\nstate: {enabled: false, namespace: outpost-state}")
		if r.allowed(releaseNamespace, "outpost-agent", access{"get", "", "secrets", "outpost-state", "tfstate-prod"}) {
			t.Error("state.enabled=false still grants Secrets in the state namespace")
		}
		if r.has("Role", "outpost-state", "outpost-system-outpost-agent-state") {
			t.Error("state.enabled=false still creates the state Role")
		}
		_, c := r.deployment(t)
		wantNoEnv(t, c, "OUTPOST_STATE_NAMESPACE")
	})

	t.Run("one namespace for everything", func(t *testing.T) {
		r := render(t, "jobs: {namespace: outpost-system}\nstate: {namespace: outpost-system}")
		for _, tc := range []struct {
			access
			want bool
		}{
			{access{"create", "batch", "jobs", releaseNamespace, ""}, true},
			{access{"update", "", "secrets", releaseNamespace, "tfstate-prod"}, true},
			{access{"delete", "coordination.k8s.io", "leases", releaseNamespace, "lock-prod"}, true},
			{access{"get", "", "secrets", "default", "db"}, false},
		} {
			if got := r.allowed(releaseNamespace, "outpost-agent", tc.access); got != tc.want {
				t.Errorf("agent: %s allowed = %v, want %v", tc.access, got, tc.want)
			}
		}
	})

	t.Run("jobs rules", func(t *testing.T) {
		r := render(t, `
jobs:
  namespace: outpost-jobs
  serviceAccount: {automountToken: true}
  rbac:
    rules:
      - apiGroups: [""]
        resources: [configmaps]
        verbs: [get, list, create, update, delete]
`)
		rb := get[rbacv1.RoleBinding](t, r, "RoleBinding", "outpost-jobs", "outpost-system-outpost-agent-job-rules")
		want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "outpost-job", Namespace: "outpost-jobs"}}
		if !slices.Equal(rb.Subjects, want) {
			t.Errorf("job Role bound to %+v, want %+v", rb.Subjects, want)
		}
		if !r.allowed("outpost-jobs", "outpost-job", access{"create", "", "configmaps", "outpost-jobs", ""}) {
			t.Error("the jobs cannot create ConfigMaps in their namespace")
		}
		if r.allowed("outpost-jobs", "outpost-job", access{"get", "", "secrets", "outpost-jobs", "deploy-1-token"}) {
			t.Error("the jobs can read Secrets")
		}
		sa := get[corev1.ServiceAccount](t, r, "ServiceAccount", "outpost-jobs", "outpost-job")
		if sa.AutomountServiceAccountToken == nil || !*sa.AutomountServiceAccountToken {
			t.Error("jobs.serviceAccount.automountToken=true did not reach the ServiceAccount")
		}
	})

	t.Run("rbac off", func(t *testing.T) {
		r := render(t, "rbac: {create: false}\njobs: {rbac: {rules: [{apiGroups: [''], resources: [configmaps], verbs: [get]}]}}")
		if n := len(all[rbacv1.Role](r)) + len(all[rbacv1.RoleBinding](r)); n != 0 {
			t.Errorf("rbac.create=false still renders %d Roles/RoleBindings", n)
		}
	})
}

// TestJobRulesNextToTheKeyOrTheStatesAreRefused: rules that give the jobs Secrets or workloads in a
// namespace that also holds the runner's key or the states fail the render with what to do; the
// same rules in a jobs namespace of its own pass with a warning.
func TestJobRulesNextToTheKeyOrTheStatesAreRefused(t *testing.T) {
	rules := map[string]string{
		"Secrets":   `[{apiGroups: [""], resources: [secrets], verbs: [get]}]`,
		"workloads": `[{apiGroups: [apps], resources: [deployments], verbs: [create]}]`,
		"pods/exec": `[{apiGroups: [""], resources: [pods/exec], verbs: [create]}]`,
		"wildcard":  `[{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]`,
	}
	for name, rule := range rules {
		for _, shared := range []struct{ values, holds string }{
			{"jobs: {namespace: outpost-system, rbac: {rules: %s}}", "private key"},
			{"jobs: {namespace: outpost-x, rbac: {rules: %s}}\nstate: {namespace: outpost-x}", "Terraform states"},
		} {
			_, err := renderChart(t, fmt.Sprintf(shared.values, rule), renderOptions{})
			if err == nil || !strings.Contains(err.Error(), "jobs.rbac.rules give the jobs access to") || !strings.Contains(err.Error(), shared.holds) {
				t.Errorf("%s next to the %s: render error %v", name, shared.holds, err)
			}
		}
		r := render(t, fmt.Sprintf("jobs: {rbac: {rules: %s}}", rule))
		if !strings.Contains(r.notes, "WARNING: jobs.rbac.rules give the jobs access to") {
			t.Errorf("%s in a jobs namespace of its own: no warning in NOTES.txt:\n%s", name, r.notes)
		}
	}
	// Reading ConfigMaps next to the key is no way to the key.
	if _, err := renderChart(t, `jobs: {namespace: outpost-system, rbac: {rules: [{apiGroups: [""], resources: [configmaps, pods], verbs: [get, list]}]}}`, renderOptions{}); err != nil {
		t.Errorf("harmless rules refused: %v", err)
	}
}

// TestJobPodPolicyValues: the chart hands the policy, the security defaults and a pinned template
// to the agent as it documents (README "Job pod policy").
func TestJobPodPolicyValues(t *testing.T) {
	c := render(t, `
jobs:
  serviceAccount: {automountToken: true}
  securityContext: {readOnlyRootFilesystem: true}
  podTemplate: {spec: {containers: [{name: main, resources: {limits: {memory: 2Gi}}}]}}
  policy:
    allowHostNamespaces: true
    allowedVolumeTypes: [hostPath]
    allowedSecrets: [cloud-credentials]
`).agentConfig(t)
	p := c.Jobs.Policy
	if !p.AllowHostNamespaces || !p.AllowServiceAccountToken || p.AllowPrivileged || !slices.Equal(p.AllowedVolumeTypes, []string{"hostPath"}) ||
		!slices.Equal(p.AllowedSecrets, []string{"cloud-credentials"}) {
		t.Errorf("jobs.policy = %+v", p)
	}
	sd := &c.Jobs.SecurityDefaults
	sc := sd.Container
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("jobs.securityContext = %+v, want the chart defaults with readOnlyRootFilesystem", sc)
	}
	if got := c.Jobs.PinnedTemplate; got != `{"spec":{"containers":[{"name":"main","resources":{"limits":{"memory":"2Gi"}}}]}}` {
		t.Errorf("jobs.podTemplate = %s", got)
	}
}
