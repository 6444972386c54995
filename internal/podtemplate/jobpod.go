package podtemplate

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Names the runner keeps for itself in job pods: its environment variables, its labels and
// annotations, its volumes and the paths it mounts them at. A job pod setting may not use them
// (the agent would re-assert its own over them anyway, so the setting could never take effect).
const (
	reservedEnvPrefix    = "OUTPOST_"
	reservedKeyPrefix    = "outpost.dev/"
	reservedVolumePrefix = "outpost-"
)

var reservedMountPaths = []string{"/outpost", "/var/run/outpost", "/etc/outpost"}

// ValidatePod checks a runner's job pod settings against the pod template they are applied to,
// and returns an *api.FieldError naming field plus the path of the offending setting (e.g.
// "job.pod.env[1].name"), so the orchestrator answers it with a 400 and the provider shows it at
// plan time in the same words. A nil p is valid.
func ValidatePod(field string, p *api.JobPod, template string) error {
	if p == nil {
		return nil
	}
	var templateVolumes []corev1.Volume
	if tpl, err := decode(template); err == nil {
		templateVolumes = tpl.Spec.Volumes
	}
	if err := checkPod(p, templateVolumes); err != nil {
		var pe *Error
		if errors.As(err, &pe) {
			return &api.FieldError{Field: field + "." + pe.Path, Message: pe.Message}
		}
		return &api.FieldError{Field: field, Message: err.Error()}
	}
	return nil
}

// checkPod checks the settings; mounts may name the template's volumes as well as their own.
func checkPod(p *api.JobPod, templateVolumes []corev1.Volume) error {
	if p.Resources != nil {
		if err := checkResources(p.Resources); err != nil {
			return err
		}
	}
	if err := checkLabels("node_selector", p.NodeSelector, false); err != nil {
		return err
	}
	for i, t := range p.Tolerations {
		if err := checkToleration(fmt.Sprintf("tolerations[%d]", i), t); err != nil {
			return err
		}
	}
	if _, err := decodeAffinity(p.Affinity); err != nil {
		return err
	}
	if err := checkEnv(p.Env); err != nil {
		return err
	}
	if err := checkLabels("labels", p.Labels, true); err != nil {
		return err
	}
	if err := checkAnnotations(p.Annotations); err != nil {
		return err
	}
	volumes, err := decodeVolumes(p.Volumes)
	if err != nil {
		return err
	}
	if err := checkMounts(p.VolumeMounts, append(volumes, templateVolumes...)); err != nil {
		return err
	}
	if p.PriorityClassName != "" {
		if errs := validation.IsDNS1123Subdomain(p.PriorityClassName); len(errs) > 0 {
			return &Error{Path: "priority_class_name", Message: fmt.Sprintf("%q is not a PriorityClass name: %s", p.PriorityClassName, strings.Join(errs, "; "))}
		}
	}
	return nil
}

func checkResources(r *api.JobResources) error {
	parsed := map[string]map[string]resource.Quantity{}
	for kind, list := range map[string]map[string]string{"requests": r.Requests, "limits": r.Limits} {
		parsed[kind] = map[string]resource.Quantity{}
		for _, name := range slices.Sorted(maps.Keys(list)) {
			at := "resources." + kind + "." + name
			if errs := validation.IsQualifiedName(name); len(errs) > 0 {
				return &Error{Path: at, Message: fmt.Sprintf("%q is not a resource name (cpu, memory, ephemeral-storage, ...): %s", name, strings.Join(errs, "; "))}
			}
			q, err := resource.ParseQuantity(list[name])
			if err != nil {
				return &Error{Path: at, Message: fmt.Sprintf("%q is not a Kubernetes quantity (e.g. 500m, 2, 512Mi, 4Gi)", list[name])}
			}
			if q.Sign() < 0 {
				return &Error{Path: at, Message: fmt.Sprintf("%q is negative", list[name])}
			}
			parsed[kind][name] = q
		}
	}
	for name, req := range parsed["requests"] {
		if lim, ok := parsed["limits"][name]; ok && req.Cmp(lim) > 0 {
			return &Error{Path: "resources.requests." + name, Message: fmt.Sprintf("the request %s is above the limit %s; Kubernetes refuses such a pod", req.String(), lim.String())}
		}
	}
	return nil
}

// checkLabels checks label-shaped keys and values (labels, node selectors); owned refuses keys
// under outpost.dev/, which the runner sets.
func checkLabels(field string, m map[string]string, owned bool) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		at := field + "." + k
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return &Error{Path: at, Message: fmt.Sprintf("%q is not a valid key: %s", k, strings.Join(errs, "; "))}
		}
		if errs := validation.IsValidLabelValue(m[k]); len(errs) > 0 {
			return &Error{Path: at, Message: fmt.Sprintf("%q is not a valid value: %s", m[k], strings.Join(errs, "; "))}
		}
		if owned && strings.HasPrefix(k, reservedKeyPrefix) {
			return &Error{Path: at, Message: "keys under outpost.dev/ are set by the runner; use another prefix"}
		}
	}
	return nil
}

func checkAnnotations(m map[string]string) error {
	size := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		at := "annotations." + k
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return &Error{Path: at, Message: fmt.Sprintf("%q is not a valid key: %s", k, strings.Join(errs, "; "))}
		}
		if strings.HasPrefix(k, reservedKeyPrefix) {
			return &Error{Path: at, Message: "keys under outpost.dev/ are set by the runner; use another prefix"}
		}
		size += len(k) + len(m[k])
	}
	if size > 256*1024 {
		return &Error{Path: "annotations", Message: "annotations may hold at most 256 KiB together"}
	}
	return nil
}

func checkToleration(at string, t api.JobToleration) error {
	switch t.Operator {
	case "", string(corev1.TolerationOpEqual):
		if t.Key == "" {
			return &Error{Path: at + ".key", Message: "a toleration without a key must use operator \"Exists\" (it then tolerates every taint)"}
		}
	case string(corev1.TolerationOpExists):
		if t.Value != "" {
			return &Error{Path: at + ".value", Message: "operator \"Exists\" takes no value; remove it or use \"Equal\""}
		}
	default:
		return &Error{Path: at + ".operator", Message: fmt.Sprintf("%q is not an operator; use \"Equal\" or \"Exists\"", t.Operator)}
	}
	if t.Key != "" {
		if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
			return &Error{Path: at + ".key", Message: fmt.Sprintf("%q is not a taint key: %s", t.Key, strings.Join(errs, "; "))}
		}
	}
	if t.Value != "" {
		if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
			return &Error{Path: at + ".value", Message: fmt.Sprintf("%q is not a taint value: %s", t.Value, strings.Join(errs, "; "))}
		}
	}
	switch corev1.TaintEffect(t.Effect) {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return &Error{Path: at + ".effect", Message: fmt.Sprintf("%q is not a taint effect; use NoSchedule, PreferNoSchedule or NoExecute (or leave it out for all)", t.Effect)}
	}
	if t.TolerationSeconds != nil && t.Effect != string(corev1.TaintEffectNoExecute) {
		return &Error{Path: at + ".toleration_seconds", Message: "applies only to effect \"NoExecute\"; remove it or set that effect"}
	}
	return nil
}

func checkEnv(env []api.JobEnvVar) error {
	seen := map[string]int{}
	for i, e := range env {
		at := fmt.Sprintf("env[%d]", i)
		if errs := validation.IsEnvVarName(e.Name); len(errs) > 0 {
			return &Error{Path: at + ".name", Message: fmt.Sprintf("%q is not an environment variable name: %s", e.Name, strings.Join(errs, "; "))}
		}
		if strings.HasPrefix(strings.ToUpper(e.Name), reservedEnvPrefix) {
			return &Error{Path: at + ".name", Message: "variables under OUTPOST_ are set by the runner; use another name"}
		}
		if j, dup := seen[e.Name]; dup {
			return &Error{Path: at + ".name", Message: fmt.Sprintf("%q is also the name of env[%d]; names must be unique", e.Name, j)}
		}
		seen[e.Name] = i
		sources := 0
		if e.Value != "" {
			sources++
		}
		for kind, ref := range map[string]*api.JobKeyRef{"secret_key_ref": e.SecretKeyRef, "config_map_key_ref": e.ConfigMapKeyRef} {
			if ref == nil {
				continue
			}
			sources++
			if errs := validation.IsDNS1123Subdomain(ref.Name); len(errs) > 0 {
				return &Error{Path: at + "." + kind + ".name", Message: fmt.Sprintf("%q is not an object name: %s", ref.Name, strings.Join(errs, "; "))}
			}
			if errs := validation.IsConfigMapKey(ref.Key); len(errs) > 0 {
				return &Error{Path: at + "." + kind + ".key", Message: fmt.Sprintf("%q is not a data key: %s", ref.Key, strings.Join(errs, "; "))}
			}
		}
		if sources > 1 {
			return &Error{Path: at, Message: "set exactly one of value, secret_key_ref and config_map_key_ref"}
		}
	}
	return nil
}

// decodeAffinity reads an affinity's JSON text as the API server would (strict field names).
func decodeAffinity(raw string) (*corev1.Affinity, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	var a corev1.Affinity
	if err := decodeStrict(raw, &a); err != nil {
		return nil, &Error{Path: "affinity", Message: "not a Kubernetes Affinity: " + err.Error() + "; in Terraform, build it with jsonencode({ nodeAffinity = {...} })"}
	}
	return &a, nil
}

// decodeVolumes reads a JSON list of volumes and checks their names.
func decodeVolumes(raw string) ([]corev1.Volume, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	var vs []corev1.Volume
	if err := decodeStrict(raw, &vs); err != nil {
		return nil, &Error{Path: "volumes", Message: "not a list of Kubernetes Volumes: " + err.Error() + "; in Terraform, build it with jsonencode([{ name = ..., configMap = {...} }])"}
	}
	seen := map[string]bool{}
	for i, v := range vs {
		at := fmt.Sprintf("volumes[%d].name", i)
		if errs := validation.IsDNS1123Label(v.Name); len(errs) > 0 {
			return nil, &Error{Path: at, Message: fmt.Sprintf("%q is not a volume name: %s", v.Name, strings.Join(errs, "; "))}
		}
		if strings.HasPrefix(v.Name, reservedVolumePrefix) {
			return nil, &Error{Path: at, Message: "volume names starting with outpost- are the runner's; use another name"}
		}
		if seen[v.Name] {
			return nil, &Error{Path: at, Message: fmt.Sprintf("%q is given twice; volume names must be unique", v.Name)}
		}
		seen[v.Name] = true
	}
	return vs, nil
}

func checkMounts(mounts []api.JobVolumeMount, volumes []corev1.Volume) error {
	known := map[string]bool{}
	for _, v := range volumes {
		known[v.Name] = true
	}
	paths := map[string]int{}
	for i, m := range mounts {
		at := fmt.Sprintf("volume_mounts[%d]", i)
		if !known[m.Name] {
			return &Error{Path: at + ".name", Message: fmt.Sprintf("no volume is named %q; add it to volumes (or to the pod template's spec.volumes)", m.Name)}
		}
		if !path.IsAbs(m.MountPath) {
			return &Error{Path: at + ".mount_path", Message: fmt.Sprintf("%q is not an absolute path", m.MountPath)}
		}
		clean := path.Clean(m.MountPath)
		for _, r := range reservedMountPaths {
			if clean == r || strings.HasPrefix(clean, r+"/") || strings.HasPrefix(r, clean+"/") || clean == "/" {
				return &Error{Path: at + ".mount_path", Message: fmt.Sprintf("%q would cover %s, where the runner mounts its own files; use another path", m.MountPath, r)}
			}
		}
		if j, dup := paths[clean]; dup {
			return &Error{Path: at + ".mount_path", Message: fmt.Sprintf("%q is also the path of volume_mounts[%d]", m.MountPath, j)}
		}
		paths[clean] = i
		if strings.HasPrefix(m.SubPath, "/") || slices.Contains(strings.Split(m.SubPath, "/"), "..") {
			return &Error{Path: at + ".sub_path", Message: fmt.Sprintf("%q must be a relative path without \"..\"", m.SubPath)}
		}
	}
	return nil
}

// decodeStrict decodes as the API server does with strict field validation.
func decodeStrict(raw string, v any) error {
	strict, err := kjson.UnmarshalStrict([]byte(raw), v)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return errors.New(strings.Join(msgs, "; ") + " (field names are case-sensitive)")
	}
	return nil
}
