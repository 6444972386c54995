package kubernetes

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	psapi "k8s.io/pod-security-admission/api"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
)

// The job pod policy is the cluster owner's say over what the agent creates, whatever the
// orchestrator sends: the runner's pod template arrives from outside the cluster, so a template
// that asks for the node (its namespaces, its filesystem, root, added capabilities) or for
// Secrets the agent did not put there is refused before anything is created. The defaults match
// Kubernetes Pod Security "restricted"; each relaxation is a chart value (jobs.policy.*), and
// every refusal names the field and that value.

// Policy is what job pods may ask for beyond Pod Security "restricted". The zero value refuses
// everything this file checks. The JSON names are the chart's jobs.policy values.
type Policy struct {
	// AllowHostNamespaces allows hostPID, hostNetwork, hostIPC and host ports.
	AllowHostNamespaces bool `json:"allowHostNamespaces,omitempty"`
	// AllowPrivileged allows privileged containers and every other way out of the container's
	// confinement: Windows host processes, unmasked /proc, unconfined seccomp or AppArmor,
	// custom SELinux users, roles and types.
	AllowPrivileged bool `json:"allowPrivileged,omitempty"`
	// AllowPrivilegeEscalation allows allowPrivilegeEscalation: true.
	AllowPrivilegeEscalation bool `json:"allowPrivilegeEscalation,omitempty"`
	// AllowRunAsRoot allows uid 0 and runAsNonRoot: false.
	AllowRunAsRoot bool `json:"allowRunAsRoot,omitempty"`
	// AllowNodeName allows pinning a pod to a node by name (spec.nodeName), which bypasses the
	// scheduler and with it taints and node restrictions.
	AllowNodeName bool `json:"allowNodeName,omitempty"`
	// AllowServiceAccountToken allows a Kubernetes API token in job pods
	// (automountServiceAccountToken: true, projected serviceAccountToken or podCertificate
	// sources). The chart sets it from jobs.serviceAccount.automountToken.
	AllowServiceAccountToken bool `json:"allowServiceAccountToken,omitempty"`
	// AllowedCapabilities may be added to containers (names without CAP_, e.g. NET_BIND_SERVICE).
	AllowedCapabilities []string `json:"allowedCapabilities,omitempty"`
	// AllowedVolumeTypes are volume types allowed besides those of Pod Security "restricted"
	// (configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected,
	// secret), e.g. hostPath or nfs.
	AllowedVolumeTypes []string `json:"allowedVolumeTypes,omitempty"`
	// AllowedSecrets are the Secrets of the jobs namespace job pods may read (volumes, projected
	// sources, env, envFrom), besides the ones the agent mounts itself.
	AllowedSecrets []string `json:"allowedSecrets,omitempty"`
	// AllowedConfigMaps are the ConfigMaps job pods may read; kube-root-ca.crt is always allowed.
	AllowedConfigMaps []string `json:"allowedConfigMaps,omitempty"`
	// PodSecurityLevel is the Pod Security Standards level (restricted, baseline, privileged)
	// Kubernetes' own evaluator checks every job pod against, on top of this policy's own rules,
	// so the two cannot drift apart. Empty: the level the relaxations above need (Level).
	PodSecurityLevel string `json:"podSecurityLevel,omitempty"`
	// AllowedSysctls are the sysctls job pods may set (spec.securityContext.sysctls).
	AllowedSysctls []string `json:"allowedSysctls,omitempty"`
	// AllowClaimSources allows ephemeral volume claim templates that bind an existing volume
	// (volumeName) or fill the new claim from another claim or snapshot (dataSource,
	// dataSourceRef): both reach data outside the pod.
	AllowClaimSources bool `json:"allowClaimSources,omitempty"`
	// AllowedClaims are the PersistentVolumeClaims of the jobs namespace job pods may mount by
	// name.
	AllowedClaims []string `json:"allowedClaims,omitempty"`
	// AllowedPriorityClasses are the PriorityClasses job pods may name. None by default: a job
	// pod keeps the cluster's default priority and preempts nothing (system-node-critical would
	// evict any other pod to make room).
	AllowedPriorityClasses []string `json:"allowedPriorityClasses,omitempty"`
	// AllowTolerateAll allows a toleration without a key and operator Exists, which tolerates
	// every taint: control-plane nodes, nodes being drained, nodes reserved for other workloads.
	AllowTolerateAll bool `json:"allowTolerateAll,omitempty"`
	// AllowedRuntimeClasses are the RuntimeClasses job pods may name (a runtime class picks the
	// container runtime handler, which may be less confined than the default).
	AllowedRuntimeClasses []string `json:"allowedRuntimeClasses,omitempty"`
	// AllowAgentLabels allows job pod labels that match the agent Service's selector: such a pod
	// becomes an endpoint of the state backend's Service (other jobs' state requests, with their
	// credentials, would reach it) and a peer the agent's NetworkPolicy admits.
	AllowAgentLabels bool `json:"allowAgentLabels,omitempty"`
	// AgentSelector is the agent Service's selector. The chart sets it; it is not a value.
	AgentSelector map[string]string `json:"agentSelector,omitempty"`
}

// Chart values that relax the policy, named in refusals.
const (
	valueHostNamespaces      = "jobs.policy.allowHostNamespaces"
	valuePrivileged          = "jobs.policy.allowPrivileged"
	valuePrivilegeEscalation = "jobs.policy.allowPrivilegeEscalation"
	valueRunAsRoot           = "jobs.policy.allowRunAsRoot"
	valueNodeName            = "jobs.policy.allowNodeName"
	valueServiceAccountToken = "jobs.serviceAccount.automountToken"
	valueCapabilities        = "jobs.policy.allowedCapabilities"
	valueVolumeTypes         = "jobs.policy.allowedVolumeTypes"
	valueSecrets             = "jobs.policy.allowedSecrets"
	valueConfigMaps          = "jobs.policy.allowedConfigMaps"
	valuePodSecurityLevel    = "jobs.policy.podSecurityLevel"
	valueSysctls             = "jobs.policy.allowedSysctls"
	valueClaimSources        = "jobs.policy.allowClaimSources"
	valueClaims              = "jobs.policy.allowedClaims"
	valuePriorityClasses     = "jobs.policy.allowedPriorityClasses"
	valueTolerateAll         = "jobs.policy.allowTolerateAll"
	valueRuntimeClasses      = "jobs.policy.allowedRuntimeClasses"
	valueAgentLabels         = "jobs.policy.allowAgentLabels"
)

// restrictedVolumeTypes are the volume types Pod Security "restricted" allows: none of them
// reaches into the node.
var restrictedVolumeTypes = []string{"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}

// publicConfigMap is published into every namespace by Kubernetes (the cluster's CA bundle).
const publicConfigMap = "kube-root-ca.crt"

// allowedSELinuxTypes are the SELinux types Pod Security "baseline" allows.
var allowedSELinuxTypes = []string{"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}

// Violation is one field of a job pod that the policy refuses.
type Violation struct {
	// Field is the path in the pod template, containers named by name:
	// spec.containers[main].securityContext.privileged.
	Field string
	// Problem says what is refused.
	Problem string
	// Value is the chart value that would allow it.
	Value string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s (the cluster owner can allow it with the chart value %s)", v.Field, v.Problem, v.Value)
}

// PolicyError is a job pod the policy refuses, with every violation found.
type PolicyError struct{ Violations []Violation }

func (e *PolicyError) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.String()
	}
	return "the job pod policy of this cluster refuses the pod template, so no Job was created: " + strings.Join(parts, "; ")
}

// Is makes a refusal both executor.ErrPolicy and executor.ErrInvalidJob: no retry can fix it.
func (e *PolicyError) Is(target error) bool {
	return target == executor.ErrPolicy || target == executor.ErrInvalidJob
}

// Owned is what the agent itself puts into a job pod, by the cluster owner's configuration: it
// needs no listing in the policy.
type Owned struct {
	// Secrets are the attempt's token Secret, the CA bundle and the chart's image pull Secrets.
	Secrets []string
	// Claims are the PersistentVolumeClaims of the chart's volumes (jobs.pluginCache).
	Claims []string
}

// Check returns a *PolicyError listing every field of tpl the policy refuses, or nil. It reads
// the final pod, after the agent's overlay and security defaults, init containers included, so
// it judges exactly what would be created; what the agent itself put there (own) needs no
// listing. Then Kubernetes' own Pod Security evaluator checks the pod at the policy's level
// (podsecurity.go).
func (p *Policy) Check(tpl *corev1.PodTemplateSpec, own Owned) error {
	c := policyCheck{p: p, own: own}
	spec := &tpl.Spec
	c.hostNamespaces(spec)
	c.beyondThePod(tpl)
	if spec.NodeName != "" && !p.AllowNodeName {
		c.refuse("spec.nodeName", fmt.Sprintf("is %q: job pods are placed by the scheduler, not pinned to a node", spec.NodeName), valueNodeName)
	}
	if t := spec.AutomountServiceAccountToken; t != nil && *t && !p.AllowServiceAccountToken {
		c.refuse("spec.automountServiceAccountToken", "is true: job pods get no Kubernetes API token", valueServiceAccountToken)
	}
	c.podSecurity(spec.SecurityContext)
	for _, kind := range []struct {
		field      string
		containers []corev1.Container
	}{{"spec.initContainers", spec.InitContainers}, {"spec.containers", spec.Containers}} {
		for i := range kind.containers {
			ctr := &kind.containers[i]
			c.container(fmt.Sprintf("%s[%s]", kind.field, ctr.Name), ctr, spec.SecurityContext)
		}
	}
	for i := range spec.Volumes {
		c.volume(&spec.Volumes[i])
	}
	for k, v := range tpl.Annotations {
		if strings.HasPrefix(k, "container.apparmor.security.beta.kubernetes.io/") && v == "unconfined" && !p.AllowPrivileged {
			c.refuse("metadata.annotations."+k, "is unconfined: job pods keep the runtime's AppArmor profile", valuePrivileged)
		}
	}
	c.podSecurityStandard(tpl)
	if len(c.out) == 0 {
		return nil
	}
	return &PolicyError{Violations: c.out}
}

// policyCheck collects the violations of one pod.
type policyCheck struct {
	p   *Policy
	own Owned
	out []Violation
}

func (c *policyCheck) refuse(field, problem, value string) {
	c.out = append(c.out, Violation{Field: field, Problem: problem, Value: value})
}

func (c *policyCheck) hostNamespaces(spec *corev1.PodSpec) {
	if c.p.AllowHostNamespaces {
		return
	}
	for _, ns := range []struct {
		on   bool
		name string
	}{{spec.HostPID, "hostPID"}, {spec.HostNetwork, "hostNetwork"}, {spec.HostIPC, "hostIPC"}} {
		if ns.on {
			c.refuse("spec."+ns.name, "is true: job pods may not share the node's namespaces", valueHostNamespaces)
		}
	}
}

func (c *policyCheck) podSecurity(sc *corev1.PodSecurityContext) {
	if sc == nil {
		return
	}
	const at = "spec.securityContext"
	if !c.p.AllowRunAsRoot {
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			c.refuse(at+".runAsUser", "is 0: job pods may not run as root", valueRunAsRoot)
		}
		if sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot {
			c.refuse(at+".runAsNonRoot", "is false: job pods must run as a non-root user", valueRunAsRoot)
		}
	}
	for _, sysctl := range sc.Sysctls {
		if !slices.Contains(c.p.AllowedSysctls, sysctl.Name) {
			c.refuse(fmt.Sprintf("%s.sysctls[%s]", at, sysctl.Name), "is set: job pods change no kernel parameter the cluster owner did not list", valueSysctls)
		}
	}
	if c.p.AllowPrivileged {
		return
	}
	c.confinement(at, sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions, sc.WindowsOptions, nil)
}

// confinement refuses every way out of the container's confinement short of privileged.
func (c *policyCheck) confinement(at string, seccomp *corev1.SeccompProfile, apparmor *corev1.AppArmorProfile,
	selinux *corev1.SELinuxOptions, windows *corev1.WindowsSecurityContextOptions, procMount *corev1.ProcMountType) {
	if seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeUnconfined {
		c.refuse(at+".seccompProfile.type", "is Unconfined: job pods keep a seccomp profile", valuePrivileged)
	}
	if apparmor != nil && apparmor.Type == corev1.AppArmorProfileTypeUnconfined {
		c.refuse(at+".appArmorProfile.type", "is Unconfined: job pods keep an AppArmor profile", valuePrivileged)
	}
	if selinux != nil && (selinux.User != "" || selinux.Role != "" || !slices.Contains(allowedSELinuxTypes, selinux.Type)) {
		c.refuse(at+".seLinuxOptions", "sets a custom SELinux user, role or type", valuePrivileged)
	}
	if windows != nil && windows.HostProcess != nil && *windows.HostProcess {
		c.refuse(at+".windowsOptions.hostProcess", "is true: job pods may not run as host processes", valuePrivileged)
	}
	if procMount != nil && *procMount == corev1.UnmaskedProcMount {
		c.refuse(at+".procMount", "is Unmasked: job pods keep /proc masked", valuePrivileged)
	}
}

func (c *policyCheck) container(at string, ctr *corev1.Container, pod *corev1.PodSecurityContext) {
	for j, port := range ctr.Ports {
		if port.HostPort != 0 && !c.p.AllowHostNamespaces {
			c.refuse(fmt.Sprintf("%s.ports[%d].hostPort", at, j), fmt.Sprintf("is %d: job pods may not bind ports of the node", port.HostPort), valueHostNamespaces)
		}
	}
	c.envRefs(at, ctr)
	c.handlerHosts(at, ctr)
	sc := ctr.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	sat := at + ".securityContext"
	if sc.Privileged != nil && *sc.Privileged && !c.p.AllowPrivileged {
		c.refuse(sat+".privileged", "is true: job pods may not run privileged containers", valuePrivileged)
	}
	if !c.p.AllowPrivileged {
		c.confinement(sat, sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions, sc.WindowsOptions, sc.ProcMount)
	}
	if (sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation) && !c.p.AllowPrivilegeEscalation {
		c.refuse(sat+".allowPrivilegeEscalation", "is not false: job pods may not gain privileges (setuid binaries, file capabilities)", valuePrivilegeEscalation)
	}
	if sc.Capabilities != nil {
		for _, cp := range sc.Capabilities.Add {
			if !slices.Contains(c.p.AllowedCapabilities, capabilityName(cp)) {
				c.refuse(sat+".capabilities.add", fmt.Sprintf("adds %s: job pods get no capabilities beyond the listed ones", cp), valueCapabilities)
			}
		}
	}
	if c.p.AllowRunAsRoot {
		return
	}
	// What the container inherits from the pod was judged with the pod.
	switch {
	case sc.RunAsUser != nil && *sc.RunAsUser == 0:
		c.refuse(sat+".runAsUser", "is 0: job pods may not run as root", valueRunAsRoot)
	case sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot:
		c.refuse(sat+".runAsNonRoot", "is false: job pods must run as a non-root user", valueRunAsRoot)
	case sc.RunAsNonRoot == nil && (pod == nil || pod.RunAsNonRoot == nil):
		c.refuse(sat+".runAsNonRoot", "is not set: job pods must run as a non-root user", valueRunAsRoot)
	}
}

// capabilityName is a capability as Kubernetes names it: upper case, without CAP_.
func capabilityName(c corev1.Capability) string {
	return strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_")
}

// ValidatePolicy checks the policy's lists, so a typo in a chart value fails the agent's start
// instead of silently allowing nothing.
func ValidatePolicy(p *Policy) error {
	var errs []error
	known := map[string]bool{}
	t := reflect.TypeFor[corev1.VolumeSource]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		known[name] = true
	}
	for _, v := range p.AllowedVolumeTypes {
		if !known[v] {
			errs = append(errs, fmt.Errorf("allowedVolumeTypes: %q is not a Kubernetes volume type (hostPath, nfs, iscsi, ...)", v))
		}
	}
	if p.PodSecurityLevel != "" {
		if _, err := psapi.ParseLevel(p.PodSecurityLevel); err != nil {
			errs = append(errs, fmt.Errorf("podSecurityLevel: %q %w", p.PodSecurityLevel, err))
		}
	}
	for _, c := range p.AllowedCapabilities {
		if c != capabilityName(corev1.Capability(c)) || c == "" {
			errs = append(errs, fmt.Errorf("allowedCapabilities: write %q as %q (upper case, without CAP_)", c, capabilityName(corev1.Capability(c))))
		}
	}
	return errors.Join(errs...)
}
