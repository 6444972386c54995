package kubernetes

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
)

// hostileTemplates are pod templates that each ask for one thing the default policy refuses,
// with the field and the chart value the refusal must name.
var hostileTemplates = []struct {
	name, template, field, value string
}{
	{"hostPID", `{"spec":{"hostPID":true,"containers":[{"name":"main"}]}}`, "spec.hostPID", valueHostNamespaces},
	{"hostNetwork", `{"spec":{"hostNetwork":true,"containers":[{"name":"main"}]}}`, "spec.hostNetwork", valueHostNamespaces},
	{"hostIPC", `{"spec":{"hostIPC":true,"containers":[{"name":"main"}]}}`, "spec.hostIPC", valueHostNamespaces},
	{"hostPort", `{"spec":{"containers":[{"name":"main","ports":[{"containerPort":80,"hostPort":80}]}]}}`, "spec.containers[main].ports[0].hostPort", valueHostNamespaces},
	{"hostPath", `{"spec":{"containers":[{"name":"main"}],"volumes":[{"name":"root","hostPath":{"path":"/"}}]}}`, "spec.volumes[root].hostPath", valueVolumeTypes},
	{"nfs", `{"spec":{"containers":[{"name":"main"}],"volumes":[{"name":"n","nfs":{"server":"nfs","path":"/"}}]}}`, "spec.volumes[n].nfs", valueVolumeTypes},
	{"privileged", `{"spec":{"containers":[{"name":"main","securityContext":{"privileged":true}}]}}`, "spec.containers[main].securityContext.privileged", valuePrivileged},
	{"privileged init container", `{"spec":{"initContainers":[{"name":"setup","image":"x","securityContext":{"privileged":true}}],"containers":[{"name":"main"}]}}`, "spec.initContainers[setup].securityContext.privileged", valuePrivileged},
	{"privileged sidecar", `{"spec":{"containers":[{"name":"main"},{"name":"side","image":"x","securityContext":{"privileged":true}}]}}`, "spec.containers[side].securityContext.privileged", valuePrivileged},
	{"unconfined seccomp", `{"spec":{"securityContext":{"seccompProfile":{"type":"Unconfined"}},"containers":[{"name":"main"}]}}`, "spec.securityContext.seccompProfile.type", valuePrivileged},
	{"unmasked proc", `{"spec":{"containers":[{"name":"main","securityContext":{"procMount":"Unmasked"}}]}}`, "spec.containers[main].securityContext.procMount", valuePrivileged},
	{"allowPrivilegeEscalation", `{"spec":{"containers":[{"name":"main","securityContext":{"allowPrivilegeEscalation":true}}]}}`, "spec.containers[main].securityContext.allowPrivilegeEscalation", valuePrivilegeEscalation},
	{"added capability", `{"spec":{"containers":[{"name":"main","securityContext":{"capabilities":{"add":["SYS_ADMIN"]}}}]}}`, "spec.containers[main].securityContext.capabilities.add", valueCapabilities},
	{"pod runs as uid 0", `{"spec":{"securityContext":{"runAsUser":0},"containers":[{"name":"main"}]}}`, "spec.securityContext.runAsUser", valueRunAsRoot},
	{"container runs as uid 0", `{"spec":{"containers":[{"name":"main","securityContext":{"runAsUser":0}}]}}`, "spec.containers[main].securityContext.runAsUser", valueRunAsRoot},
	{"runAsNonRoot false", `{"spec":{"securityContext":{"runAsNonRoot":false},"containers":[{"name":"main"}]}}`, "spec.securityContext.runAsNonRoot", valueRunAsRoot},
	{"nodeName", `{"spec":{"nodeName":"control-plane-1","containers":[{"name":"main"}]}}`, "spec.nodeName", valueNodeName},
	{"automountServiceAccountToken", `{"spec":{"automountServiceAccountToken":true,"containers":[{"name":"main"}]}}`, "spec.automountServiceAccountToken", valueServiceAccountToken},
	{"projected token", `{"spec":{"containers":[{"name":"main"}],"volumes":[{"name":"t","projected":{"sources":[{"serviceAccountToken":{"path":"t"}}]}}]}}`, "spec.volumes[t].projected.sources[0].serviceAccountToken", valueServiceAccountToken},
	{"secret volume", `{"spec":{"containers":[{"name":"main"}],"volumes":[{"name":"k","secret":{"secretName":"runner-key"}}]}}`, "spec.volumes[k].secret.secretName", valueSecrets},
	{"another attempt's token", `{"spec":{"containers":[{"name":"main"}],"volumes":[{"name":"k","secret":{"secretName":"outpost-dep-other-1-token"}}]}}`, "spec.volumes[k].secret.secretName", valueSecrets},
	{"projected secret", `{"spec":{"containers":[{"name":"main"}],"volumes":[{"name":"p","projected":{"sources":[{"secret":{"name":"db"}}]}}]}}`, "spec.volumes[p].projected.sources[0].secret.name", valueSecrets},
	{"secret env", `{"spec":{"containers":[{"name":"main","env":[{"name":"PW","valueFrom":{"secretKeyRef":{"name":"db","key":"pw"}}}]}]}}`, "spec.containers[main].env[PW].valueFrom.secretKeyRef.name", valueSecrets},
	{"secret envFrom", `{"spec":{"containers":[{"name":"main","envFrom":[{"secretRef":{"name":"db"}}]}]}}`, "spec.containers[main].envFrom[0].secretRef.name", valueSecrets},
	{"configMap volume", `{"spec":{"containers":[{"name":"main"}],"volumes":[{"name":"c","configMap":{"name":"settings"}}]}}`, "spec.volumes[c].configMap.name", valueConfigMaps},
	// N2: what Pod Security baseline refuses and the policy once let through.
	{"liveness probe httpGet host", `{"spec":{"containers":[{"name":"main","livenessProbe":{"httpGet":{"host":"169.254.169.254","port":80}}}]}}`, "spec.containers[main].livenessProbe.httpGet.host", valueHostNamespaces},
	{"readiness probe tcpSocket host", `{"spec":{"containers":[{"name":"main","readinessProbe":{"tcpSocket":{"host":"10.0.0.1","port":5432}}}]}}`, "spec.containers[main].readinessProbe.tcpSocket.host", valueHostNamespaces},
	{"startup probe of a sidecar", `{"spec":{"containers":[{"name":"main"},{"name":"side","image":"x","startupProbe":{"httpGet":{"host":"kubernetes.default","port":443}}}]}}`, "spec.containers[side].startupProbe.httpGet.host", valueHostNamespaces},
	{"postStart hook httpGet host", `{"spec":{"containers":[{"name":"main","lifecycle":{"postStart":{"httpGet":{"host":"169.254.169.254","port":80}}}}]}}`, "spec.containers[main].lifecycle.postStart.httpGet.host", valueHostNamespaces},
	{"preStop hook tcpSocket host of an init container", `{"spec":{"initContainers":[{"name":"setup","image":"x","lifecycle":{"preStop":{"tcpSocket":{"host":"10.0.0.1","port":22}}}}],"containers":[{"name":"main"}]}}`, "spec.initContainers[setup].lifecycle.preStop.tcpSocket.host", valueHostNamespaces},
	{"unsafe sysctl", `{"spec":{"securityContext":{"sysctls":[{"name":"kernel.msgmax","value":"65536"}]},"containers":[{"name":"main"}]}}`, "spec.securityContext.sysctls[kernel.msgmax]", valueSysctls},
	{"safe sysctl", `{"spec":{"securityContext":{"sysctls":[{"name":"net.ipv4.tcp_syncookies","value":"1"}]},"containers":[{"name":"main"}]}}`, "spec.securityContext.sysctls[net.ipv4.tcp_syncookies]", valueSysctls},
	// N4: fields beyond Pod Security that reach beyond the pod.
	{"ephemeral claim binding a volume", `{"spec":{"containers":[{"name":"main"}],"volumes":[{"name":"e","ephemeral":{"volumeClaimTemplate":{"spec":{"accessModes":["ReadWriteOnce"],"volumeName":"pv-prod-db","resources":{"requests":{"storage":"1Gi"}}}}}}]}}`, "spec.volumes[e].ephemeral.volumeClaimTemplate.spec.volumeName", valueClaimSources},
	{"ephemeral claim cloning a claim", `{"spec":{"containers":[{"name":"main"}],"volumes":[{"name":"e","ephemeral":{"volumeClaimTemplate":{"spec":{"accessModes":["ReadWriteOnce"],"dataSource":{"kind":"PersistentVolumeClaim","name":"prod-db"},"resources":{"requests":{"storage":"1Gi"}}}}}}]}}`, "spec.volumes[e].ephemeral.volumeClaimTemplate.spec.dataSource", valueClaimSources},
	{"ephemeral claim from a snapshot", `{"spec":{"containers":[{"name":"main"}],"volumes":[{"name":"e","ephemeral":{"volumeClaimTemplate":{"spec":{"accessModes":["ReadWriteOnce"],"dataSourceRef":{"apiGroup":"snapshot.storage.k8s.io","kind":"VolumeSnapshot","name":"prod-db-nightly"},"resources":{"requests":{"storage":"1Gi"}}}}}}]}}`, "spec.volumes[e].ephemeral.volumeClaimTemplate.spec.dataSourceRef", valueClaimSources},
	{"claim by name", `{"spec":{"containers":[{"name":"main"}],"volumes":[{"name":"d","persistentVolumeClaim":{"claimName":"prod-db"}}]}}`, "spec.volumes[d].persistentVolumeClaim.claimName", valueClaims},
	{"system priority class", `{"spec":{"priorityClassName":"system-node-critical","containers":[{"name":"main"}]}}`, "spec.priorityClassName", valuePriorityClasses},
	{"any other priority class", `{"spec":{"priorityClassName":"batch-high","containers":[{"name":"main"}]}}`, "spec.priorityClassName", valuePriorityClasses},
	{"tolerate every taint", `{"spec":{"tolerations":[{"operator":"Exists"}],"containers":[{"name":"main"}]}}`, "spec.tolerations[0]", valueTolerateAll},
	{"runtime class", `{"spec":{"runtimeClassName":"runc-unconfined","containers":[{"name":"main"}]}}`, "spec.runtimeClassName", valueRuntimeClasses},
	{"another Secret as image pull secret", `{"spec":{"imagePullSecrets":[{"name":"prod-registry-admin"}],"containers":[{"name":"main"}]}}`, "spec.imagePullSecrets[1].name", valueSecrets},
	{"the agent Service's labels", `{"metadata":{"labels":{"app.kubernetes.io/name":"outpost-agent","app.kubernetes.io/instance":"outpost","app.kubernetes.io/component":"agent"}},"spec":{"containers":[{"name":"main"}]}}`, "metadata.labels", valueAgentLabels},
}

// testAgentSelector stands for the agent Service's selector, which the chart puts into the
// policy.
var testAgentSelector = map[string]string{"app.kubernetes.io/name": "outpost-agent", "app.kubernetes.io/instance": "outpost", "app.kubernetes.io/component": "agent"}

// build runs the executor's build (pinned template, defaults, policy) with a fake-free executor:
// build touches no API.
func buildWith(t *testing.T, p Policy, tpl string) error {
	t.Helper()
	if p.AgentSelector == nil {
		p.AgentSelector = testAgentSelector
	}
	e := New(Options{Policy: p, PodOptions: opts})
	_, _, err := e.build(claim(tpl), "opst_test")
	return err
}

func TestPolicyRefusesEachHostileField(t *testing.T) {
	for _, tc := range hostileTemplates {
		t.Run(tc.name, func(t *testing.T) {
			err := buildWith(t, Policy{}, tc.template)
			var pe *PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("build = %v, want a *PolicyError", err)
			}
			if !errors.Is(err, executor.ErrInvalidJob) || !errors.Is(err, executor.ErrPolicy) {
				t.Errorf("a refusal must be ErrInvalidJob and ErrPolicy: %v", err)
			}
			if len(pe.Violations) != 1 || pe.Violations[0].Field != tc.field || pe.Violations[0].Value != tc.value {
				t.Fatalf("violations %+v, want one at %s naming %s", pe.Violations, tc.field, tc.value)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.field) || !strings.Contains(msg, "chart value "+tc.value) || !strings.Contains(msg, "no Job was created") {
				t.Errorf("message %q must name the field %s and the chart value %s", msg, tc.field, tc.value)
			}
		})
	}
}

// TestPolicyRelaxations: each chart value lets exactly its field through.
func TestPolicyRelaxations(t *testing.T) {
	allow := map[string]Policy{
		valueHostNamespaces:      {AllowHostNamespaces: true},
		valuePrivileged:          {AllowPrivileged: true},
		valuePrivilegeEscalation: {AllowPrivilegeEscalation: true},
		valueRunAsRoot:           {AllowRunAsRoot: true},
		valueNodeName:            {AllowNodeName: true},
		valueServiceAccountToken: {AllowServiceAccountToken: true},
		valueCapabilities:        {AllowedCapabilities: []string{"SYS_ADMIN"}},
		valueVolumeTypes:         {AllowedVolumeTypes: []string{"hostPath", "nfs"}},
		valueConfigMaps:          {AllowedConfigMaps: []string{"settings"}},
		valueSysctls:             {AllowedSysctls: []string{"kernel.msgmax", "net.ipv4.tcp_syncookies"}},
		valueClaimSources:        {AllowClaimSources: true},
		valueClaims:              {AllowedClaims: []string{"prod-db"}},
		valuePriorityClasses:     {AllowedPriorityClasses: []string{"system-node-critical", "batch-high"}},
		valueTolerateAll:         {AllowTolerateAll: true},
		valueRuntimeClasses:      {AllowedRuntimeClasses: []string{"runc-unconfined"}},
		valueSecrets:             {AllowedSecrets: []string{"runner-key", "outpost-dep-other-1-token", "db", "prod-registry-admin"}},
		valueAgentLabels:         {AllowAgentLabels: true},
	}
	for _, tc := range hostileTemplates {
		t.Run(tc.name, func(t *testing.T) {
			if err := buildWith(t, allow[tc.value], tc.template); err != nil {
				t.Fatalf("with %s set the template must pass: %v", tc.value, err)
			}
		})
	}
}

func TestRestrictedDefaultsFillTheUnsetFields(t *testing.T) {
	e := New(Options{PodOptions: opts})
	tpl := `{"spec":{"securityContext":{"runAsUser":1000},"initContainers":[{"name":"setup","image":"x"}],
	  "containers":[{"name":"main","securityContext":{"capabilities":{"add":["NET_BIND_SERVICE"],"drop":["NET_RAW"]}}},{"name":"side","image":"x"}]}}`
	e.o.Policy.AllowedCapabilities = []string{"NET_BIND_SERVICE"}
	job, _, err := e.build(claim(tpl), "opst_test")
	if err != nil {
		t.Fatal(err)
	}
	spec := job.Spec.Template.Spec
	psc := spec.SecurityContext
	if *psc.RunAsUser != 1000 || !*psc.RunAsNonRoot || *psc.RunAsGroup != RestrictedUID || *psc.FSGroup != RestrictedUID || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %s: the template's runAsUser stays, the rest is restricted", asJSON(psc))
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken = %v, want false", spec.AutomountServiceAccountToken)
	}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("container %s security context %s: want no privilege escalation and drop ALL", c.Name, asJSON(sc))
		}
	}
	if main := spec.Containers[0]; len(main.SecurityContext.Capabilities.Add) != 1 || !slices.Contains(main.SecurityContext.Capabilities.Drop, "NET_RAW") {
		t.Errorf("main keeps its own capabilities: %s", asJSON(main.SecurityContext))
	}
}

func TestConfiguredDefaultsCannotDropRestricted(t *testing.T) {
	d := SecurityDefaults{Container: corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)}}.WithRestricted()
	if !*d.Container.ReadOnlyRootFilesystem || d.Container.AllowPrivilegeEscalation == nil || *d.Pod.RunAsUser != RestrictedUID {
		t.Errorf("configured defaults %s must keep their own fields and gain the restricted ones", asJSON(d))
	}
}

func TestPinnedTemplateReplacesTheRunners(t *testing.T) {
	pinned := `{"metadata":{"labels":{"pinned":"yes"}},"spec":{"containers":[{"name":"main","resources":{"limits":{"memory":"2Gi"}}}]}}`
	e := New(Options{PodOptions: opts, PinnedTemplate: pinned})
	job, _, err := e.build(claim(`{"spec":{"hostPID":true,"containers":[{"name":"main"}]}}`), "opst_test")
	if err != nil {
		t.Fatalf("the runner's hostile template must be ignored under a pinned one: %v", err)
	}
	if job.Spec.Template.Labels["pinned"] != "yes" || job.Spec.Template.Spec.HostPID {
		t.Errorf("the Job does not follow the pinned template: labels %v hostPID %v", job.Spec.Template.Labels, job.Spec.Template.Spec.HostPID)
	}
}

func TestValidatePolicy(t *testing.T) {
	if err := ValidatePolicy(&Policy{AllowedVolumeTypes: []string{"hostPath"}, AllowedCapabilities: []string{"NET_ADMIN"}}); err != nil {
		t.Errorf("valid policy refused: %v", err)
	}
	err := ValidatePolicy(&Policy{AllowedVolumeTypes: []string{"hostpath"}, AllowedCapabilities: []string{"cap_net_admin"}})
	if err == nil || !strings.Contains(err.Error(), `"hostpath" is not a Kubernetes volume type`) || !strings.Contains(err.Error(), `"NET_ADMIN"`) {
		t.Errorf("ValidatePolicy = %v", err)
	}
}

func asJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestPodSecurityEvaluatorBacksThePolicy: Kubernetes' own Pod Security evaluator, run alone on
// each template the policy refuses, refuses every one that breaks a Pod Security Standard, at
// the level the relaxations need, naming the same relaxation; so a field the policy's own rules
// missed (as probe hosts and sysctls once were) is refused all the same.
func TestPodSecurityEvaluatorBacksThePolicy(t *testing.T) {
	pss := map[string]bool{ // the templates that break restricted, by Pod Security's own checks
		"hostPID": true, "hostNetwork": true, "hostIPC": true, "hostPort": true, "hostPath": true, "nfs": true,
		"privileged": true, "privileged init container": true, "privileged sidecar": true, "unconfined seccomp": true,
		"unmasked proc": true, "allowPrivilegeEscalation": true, "added capability": true, "pod runs as uid 0": true,
		"container runs as uid 0": true, "runAsNonRoot false": true, "liveness probe httpGet host": true,
		"readiness probe tcpSocket host": true, "startup probe of a sidecar": true, "postStart hook httpGet host": true,
		"preStop hook tcpSocket host of an init container": true, "unsafe sysctl": true,
	}
	for _, tc := range hostileTemplates {
		t.Run(tc.name, func(t *testing.T) {
			job, _, err := BuildJob(claim(tc.template), "opst_test", opts, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			tpl := &job.Spec.Template
			d := RestrictedDefaults()
			d.Apply(&tpl.Spec, &Policy{})
			c := policyCheck{p: &Policy{}}
			c.podSecurityStandard(tpl)
			if !pss[tc.name] {
				if len(c.out) != 0 {
					t.Fatalf("Pod Security refuses a template that breaks no standard: %+v", c.out)
				}
				return
			}
			if len(c.out) == 0 {
				t.Fatal("Pod Security restricted lets the template through")
			}
			for _, v := range c.out {
				if !strings.Contains(v.Field, "Pod Security restricted, check ") {
					t.Errorf("violation %s does not name the Pod Security check", v)
				}
			}
			if c.out[0].Value != tc.value {
				t.Errorf("Pod Security's refusal names %s, want %s as the policy's own rule does: %s", c.out[0].Value, tc.value, c.out[0])
			}
		})
	}
}

// TestPodSecurityLevel: the level the evaluator checks at is the configured one, else the one
// the relaxations need; a relaxation the configured level does not allow is refused by Pod
// Security, naming jobs.policy.podSecurityLevel.
func TestPodSecurityLevel(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		want string
	}{
		{Policy{}, LevelRestricted},
		{Policy{AllowRunAsRoot: true}, LevelBaseline},
		{Policy{AllowedVolumeTypes: []string{"nfs"}}, LevelBaseline},
		{Policy{AllowedSysctls: []string{"net.ipv4.tcp_syncookies"}}, LevelRestricted},
		{Policy{AllowedSysctls: []string{"kernel.msgmax"}}, LevelPrivileged},
		{Policy{AllowHostNamespaces: true}, LevelPrivileged},
		{Policy{AllowedCapabilities: []string{"NET_ADMIN"}}, LevelPrivileged},
		{Policy{AllowRunAsRoot: true, PodSecurityLevel: LevelRestricted}, LevelRestricted},
	} {
		if got := tc.p.Level(); got != tc.want {
			t.Errorf("%s: Level() = %s, want %s", asJSON(tc.p), got, tc.want)
		}
	}
	err := buildWith(t, Policy{AllowRunAsRoot: true, PodSecurityLevel: LevelRestricted}, `{"spec":{"securityContext":{"runAsUser":0},"containers":[{"name":"main"}]}}`)
	var pe *PolicyError
	if !errors.As(err, &pe) || len(pe.Violations) != 1 || pe.Violations[0].Value != valuePodSecurityLevel ||
		!strings.Contains(pe.Violations[0].Field, "check runAsUser") {
		t.Fatalf("uid 0 allowed by the policy but not by the configured level restricted: %v", err)
	}
	if err := buildWith(t, Policy{AllowRunAsRoot: true}, `{"spec":{"securityContext":{"runAsUser":0},"containers":[{"name":"main"}]}}`); err != nil {
		t.Errorf("uid 0 with allowRunAsRoot (level baseline) must pass: %v", err)
	}
	if err := ValidatePolicy(&Policy{PodSecurityLevel: "strict"}); err == nil || !strings.Contains(err.Error(), "podSecurityLevel") {
		t.Errorf("ValidatePolicy of level strict = %v", err)
	}
}
