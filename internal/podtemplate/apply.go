package podtemplate

import (
	"errors"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Apply puts a runner's job pod settings on a parsed template (see Parse), so that a template and
// the settings combine the same way wherever a Job is built. A setting wins over the template's
// value of the same key: env, volumes and mounts by name (a mount also by path), labels,
// annotations, node selector and resources by key; tolerations are added; affinity and the
// priority class replace the template's. What neither says is left for the cluster owner's
// defaults, and the fields the runner owns are re-asserted over all of it when the Job is built.
// Settings that break the contract return an *Error with the setting's path.
func Apply(tpl *corev1.PodTemplateSpec, p *api.JobPod) error {
	if p == nil {
		return nil
	}
	if err := checkPod(p, tpl.Spec.Volumes); err != nil {
		var pe *Error
		if errors.As(err, &pe) {
			return &Error{Path: "job.pod." + pe.Path, Message: pe.Message}
		}
		return err
	}
	affinity, err := decodeAffinity(p.Affinity)
	if err != nil {
		return err
	}
	volumes, err := decodeVolumes(p.Volumes)
	if err != nil {
		return err
	}
	spec := &tpl.Spec
	tpl.Labels = mergeMap(tpl.Labels, p.Labels)
	tpl.Annotations = mergeMap(tpl.Annotations, p.Annotations)
	spec.NodeSelector = mergeMap(spec.NodeSelector, p.NodeSelector)
	for _, t := range p.Tolerations {
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{
			Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value,
			Effect: corev1.TaintEffect(t.Effect), TolerationSeconds: t.TolerationSeconds,
		})
	}
	if affinity != nil {
		spec.Affinity = affinity
	}
	if p.PriorityClassName != "" {
		spec.PriorityClassName = p.PriorityClassName
		// The admission plugin derives the priority from the class; a value the template
		// copied from another class would make it refuse the pod.
		spec.Priority = nil
	}
	spec.Volumes = ReplaceByKey(spec.Volumes, volumes, func(v corev1.Volume) []string { return []string{v.Name} })
	main := Main(tpl)
	if p.Resources != nil {
		main.Resources.Requests = mergeQuantities(main.Resources.Requests, p.Resources.Requests)
		main.Resources.Limits = mergeQuantities(main.Resources.Limits, p.Resources.Limits)
	}
	env := make([]corev1.EnvVar, 0, len(p.Env))
	for _, e := range p.Env {
		env = append(env, envVar(e))
	}
	main.Env = ReplaceByKey(main.Env, env, func(e corev1.EnvVar) []string { return []string{e.Name} })
	mounts := make([]corev1.VolumeMount, 0, len(p.VolumeMounts))
	for _, m := range p.VolumeMounts {
		mounts = append(mounts, corev1.VolumeMount{Name: m.Name, MountPath: m.MountPath, SubPath: m.SubPath, ReadOnly: m.ReadOnly})
	}
	main.VolumeMounts = ReplaceByKey(main.VolumeMounts, mounts, func(m corev1.VolumeMount) []string { return []string{"name:" + m.Name, "path:" + m.MountPath} })
	return nil
}

func envVar(e api.JobEnvVar) corev1.EnvVar {
	out := corev1.EnvVar{Name: e.Name, Value: e.Value}
	switch {
	case e.SecretKeyRef != nil:
		out.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: e.SecretKeyRef.Name}, Key: e.SecretKeyRef.Key, Optional: optional(e.SecretKeyRef.Optional),
		}}
	case e.ConfigMapKeyRef != nil:
		out.ValueFrom = &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: e.ConfigMapKeyRef.Name}, Key: e.ConfigMapKeyRef.Key, Optional: optional(e.ConfigMapKeyRef.Optional),
		}}
	}
	return out
}

func optional(b bool) *bool {
	if !b {
		return nil
	}
	return &b
}

func mergeMap(base, over map[string]string) map[string]string {
	if len(over) == 0 {
		return base
	}
	out := maps.Clone(base)
	if out == nil {
		out = make(map[string]string, len(over))
	}
	maps.Copy(out, over)
	return out
}

// mergeQuantities sets the quantities of over (already validated) on base.
func mergeQuantities(base corev1.ResourceList, over map[string]string) corev1.ResourceList {
	if len(over) == 0 {
		return base
	}
	out := base.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	for name, q := range over {
		out[corev1.ResourceName(name)] = resource.MustParse(q)
	}
	return out
}

// ReplaceByKey drops from have every item sharing a key with an item of want, then appends want:
// how a setting replaces the template's env var, mount or volume of the same name (or mount
// path), and how the agent's own replace both.
func ReplaceByKey[T any](have, want []T, keys func(T) []string) []T {
	taken := map[string]bool{}
	for _, w := range want {
		for _, k := range keys(w) {
			taken[k] = true
		}
	}
	out := make([]T, 0, len(have)+len(want))
	for _, h := range have {
		if !slices.ContainsFunc(keys(h), func(k string) bool { return taken[k] }) {
			out = append(out, h)
		}
	}
	return append(out, want...)
}

// NormalizePod returns the settings in the form the orchestrator stores: the JSON of affinity
// and volumes in normal form (see Normalize), empty maps and lists dropped, and nil when nothing
// is set, so that equal settings compare equal however they were written.
func NormalizePod(p *api.JobPod) (*api.JobPod, error) {
	if p == nil {
		return nil, nil
	}
	out := *p
	var err error
	if out.Affinity, err = Normalize(p.Affinity); err != nil {
		return nil, err
	}
	if out.Volumes, err = Normalize(p.Volumes); err != nil {
		return nil, err
	}
	if out.Volumes == "[]" {
		out.Volumes = ""
	}
	if out.Affinity == "{}" {
		out.Affinity = ""
	}
	if out.Resources != nil && len(out.Resources.Requests) == 0 && len(out.Resources.Limits) == 0 {
		out.Resources = nil
	}
	for _, m := range []*map[string]string{&out.NodeSelector, &out.Labels, &out.Annotations} {
		if len(*m) == 0 {
			*m = nil
		}
	}
	if len(out.Tolerations) == 0 {
		out.Tolerations = nil
	}
	if len(out.Env) == 0 {
		out.Env = nil
	}
	if len(out.VolumeMounts) == 0 {
		out.VolumeMounts = nil
	}
	if isZeroPod(&out) {
		return nil, nil
	}
	return &out, nil
}

func isZeroPod(p *api.JobPod) bool {
	return p.Resources == nil && p.NodeSelector == nil && p.Tolerations == nil && p.Affinity == "" && p.Env == nil &&
		p.Labels == nil && p.Annotations == nil && p.Volumes == "" && p.VolumeMounts == nil && p.PriorityClassName == ""
}
