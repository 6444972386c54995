package kubernetes

import (
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// Besides its own rules, the job pod policy checks every final pod with Kubernetes' own Pod
// Security evaluator (k8s.io/pod-security-admission/policy, what the API server's admission
// runs), at the policy's level. The own rules name fields and relaxations precisely; the
// evaluator makes sure they never fall behind Pod Security: a field a new Kubernetes release
// adds to a standard, or one the own rules miss, is refused all the same (probe hosts and
// sysctls once were), with the relaxation the check corresponds to.

// Pod Security Standards levels, as jobs.policy.podSecurityLevel and the namespace label take them.
const (
	LevelRestricted = string(psapi.LevelRestricted)
	LevelBaseline   = string(psapi.LevelBaseline)
	LevelPrivileged = string(psapi.LevelPrivileged)
)

// Level is the Pod Security level job pods are checked at: PodSecurityLevel when set, else the
// level the policy's relaxations need, restricted when nothing is relaxed. The provider labels
// the jobs namespaces it creates with the same level (jobsPodSecurityLevel there).
func (p *Policy) Level() string {
	if p.PodSecurityLevel != "" {
		return p.PodSecurityLevel
	}
	switch {
	case p.AllowHostNamespaces, p.AllowPrivileged, len(p.AllowedCapabilities) > 0,
		slices.Contains(p.AllowedVolumeTypes, "hostPath"), !safeSysctls(p.AllowedSysctls):
		return LevelPrivileged
	case p.AllowRunAsRoot, p.AllowPrivilegeEscalation, len(p.AllowedVolumeTypes) > 0:
		return LevelBaseline
	}
	return LevelRestricted
}

// podSecurityCheck is one check of the Pod Security Standards with the relaxation of this policy
// that corresponds to it.
type podSecurityCheck struct {
	id        policy.CheckID
	evaluator policy.Evaluator
	value     string
}

// checkValues maps the Pod Security checks to the chart value of the policy's rule that covers
// the same fields; a check missing here is named with jobs.policy.podSecurityLevel.
var checkValues = map[policy.CheckID]string{
	"allowPrivilegeEscalation":   valuePrivilegeEscalation,
	"appArmorProfile":            valuePrivileged,
	"capabilities_baseline":      valueCapabilities,
	"capabilities_restricted":    valueCapabilities,
	"hostNamespaces":             valueHostNamespaces,
	"hostPathVolumes":            valueVolumeTypes,
	"hostPorts":                  valueHostNamespaces,
	"hostProbesAndHostLifecycle": valueHostNamespaces,
	"privileged":                 valuePrivileged,
	"procMount":                  valuePrivileged,
	"procMount_restricted":       valuePrivileged,
	"restrictedVolumes":          valueVolumeTypes,
	"runAsNonRoot":               valueRunAsRoot,
	"runAsUser":                  valueRunAsRoot,
	"seLinuxOptions":             valuePrivileged,
	"seccompProfile_baseline":    valuePrivileged,
	"seccompProfile_restricted":  valuePrivileged,
	"sysctls":                    valueSysctls,
	"windowsHostProcess":         valuePrivileged,
}

// podSecurityChecks are the default checks of Pod Security, each in an evaluator of its own, so a
// refusal says which check refused.
var podSecurityChecks = sync.OnceValues(func() ([]podSecurityCheck, error) {
	var out []podSecurityCheck
	for _, c := range policy.DefaultChecks() {
		e, err := policy.NewEvaluator([]policy.Check{c}, nil)
		if err != nil {
			return nil, fmt.Errorf("pod security check %s: %w", c.ID, err)
		}
		out = append(out, podSecurityCheck{id: c.ID, evaluator: e, value: checkValues[c.ID]})
	}
	return out, nil
})

// podSecurityStandard runs Pod Security's own checks on the pod at the policy's level and
// refuses what they refuse. A refusal whose field the policy's own rules already refused is not
// repeated.
func (c *policyCheck) podSecurityStandard(tpl *corev1.PodTemplateSpec) {
	level, err := psapi.ParseLevel(c.p.Level())
	if err != nil {
		c.refuse(valuePodSecurityLevel, fmt.Sprintf("is %q: %v", c.p.Level(), err), valuePodSecurityLevel)
		return
	}
	checks, err := podSecurityChecks()
	if err != nil {
		c.refuse("spec", "could not be checked with Pod Security: "+err.Error(), valuePodSecurityLevel)
		return
	}
	already := map[string]bool{}
	for _, v := range c.out {
		already[v.Value] = true
	}
	lv := psapi.LevelVersion{Level: level, Version: psapi.LatestVersion()}
	meta := &metav1.ObjectMeta{Labels: tpl.Labels, Annotations: tpl.Annotations}
	for _, chk := range checks {
		for _, r := range chk.evaluator.EvaluatePod(lv, meta, &tpl.Spec) {
			if r.Allowed {
				continue
			}
			value := chk.value
			if value == "" || c.relaxed(value) {
				// The policy allows what the check refuses: only a lower level allows it.
				value = valuePodSecurityLevel
			} else if already[value] {
				continue
			}
			problem := r.ForbiddenReason
			if r.ForbiddenDetail != "" {
				problem += " (" + r.ForbiddenDetail + ")"
			}
			c.refuse(fmt.Sprintf("spec (Pod Security %s, check %s)", level, chk.id), "is refused: "+problem, value)
			already[value] = true
		}
	}
}

// relaxed reports whether the policy relaxes the rule behind the chart value.
func (c *policyCheck) relaxed(value string) bool {
	p := c.p
	switch value {
	case valueHostNamespaces:
		return p.AllowHostNamespaces
	case valuePrivileged:
		return p.AllowPrivileged
	case valuePrivilegeEscalation:
		return p.AllowPrivilegeEscalation
	case valueRunAsRoot:
		return p.AllowRunAsRoot
	case valueCapabilities:
		return len(p.AllowedCapabilities) > 0
	case valueVolumeTypes:
		return len(p.AllowedVolumeTypes) > 0
	case valueSysctls:
		return len(p.AllowedSysctls) > 0
	}
	return false
}

// safeSysctls reports whether Pod Security baseline allows every one of the sysctls, asking its
// own check, so the policy's level follows the standard's list of safe sysctls.
func safeSysctls(names []string) bool {
	if len(names) == 0 {
		return true
	}
	spec := &corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{}}
	for _, n := range names {
		spec.SecurityContext.Sysctls = append(spec.SecurityContext.Sysctls, corev1.Sysctl{Name: n})
	}
	e, err := policy.NewEvaluator([]policy.Check{policy.CheckSysctls()}, nil)
	if err != nil {
		return false
	}
	lv := psapi.LevelVersion{Level: psapi.LevelBaseline, Version: psapi.LatestVersion()}
	return policy.AggregateCheckResults(e.EvaluatePod(lv, &metav1.ObjectMeta{}, spec)).Allowed
}
