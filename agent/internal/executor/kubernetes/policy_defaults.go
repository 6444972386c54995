package kubernetes

import (
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Job pods run under Pod Security "restricted" unless their template says otherwise (and the
// policy lets it): the agent fills every security field the template leaves unset, so a template
// that only names an image gets a pod the jobs namespace's `enforce: restricted` label admits.

// RestrictedUID is the user and group job pods run as by default: the non-root user of the
// Outpost images.
const RestrictedUID = 65532

// SecurityDefaults are the security settings job pods get where the template leaves them unset:
// Pod for the pod, Container for every container and init container.
type SecurityDefaults struct {
	Pod       corev1.PodSecurityContext `json:"podSecurityContext"`
	Container corev1.SecurityContext    `json:"securityContext"`
}

// RestrictedDefaults are Pod Security "restricted": non-root (uid and gid 65532, fsGroup too so
// volumes are writable), RuntimeDefault seccomp, no privilege escalation, every capability
// dropped.
func RestrictedDefaults() SecurityDefaults {
	return SecurityDefaults{
		Pod: corev1.PodSecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](RestrictedUID), RunAsGroup: ptr.To[int64](RestrictedUID),
			FSGroup: ptr.To[int64](RestrictedUID), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Container: corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

// WithRestricted returns d with every field it leaves unset taken from RestrictedDefaults, so a
// configuration can change a default but never drop one.
func (d SecurityDefaults) WithRestricted() SecurityDefaults {
	r := RestrictedDefaults()
	out := SecurityDefaults{Pod: *d.Pod.DeepCopy(), Container: *d.Container.DeepCopy()}
	fillUnset(&out.Pod, &r.Pod)
	fillUnset(&out.Container, &r.Container)
	return out
}

// Apply fills the unset security fields of spec from d. Every container drops every capability
// (a template adds back what the policy allows), and unless the policy allows a Kubernetes API
// token, a pod that does not say otherwise gets none mounted.
func (d *SecurityDefaults) Apply(spec *corev1.PodSpec, p *Policy) {
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	fillUnset(spec.SecurityContext, d.Pod.DeepCopy())
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			c := &list[i]
			if c.SecurityContext == nil {
				c.SecurityContext = &corev1.SecurityContext{}
			}
			fillUnset(c.SecurityContext, d.Container.DeepCopy())
			if c.SecurityContext.Capabilities == nil {
				c.SecurityContext.Capabilities = &corev1.Capabilities{}
			}
			if caps := c.SecurityContext.Capabilities; !slices.Contains(caps.Drop, "ALL") {
				caps.Drop = append(caps.Drop, "ALL")
			}
		}
	}
	if spec.AutomountServiceAccountToken == nil && !p.AllowServiceAccountToken {
		spec.AutomountServiceAccountToken = ptr.To(false)
	}
}

// fillUnset sets every field of *dst that is nil or empty to the field of *src (both pointers to
// the same struct type). src must not be shared afterwards: its pointers move into dst.
func fillUnset[T any](dst, src *T) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	for i := range d.NumField() {
		if f := d.Field(i); f.CanSet() && f.IsZero() {
			f.Set(s.Field(i))
		}
	}
}
