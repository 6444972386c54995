package kubernetes

// What a job pod may read beyond its own files: the volumes it mounts, and the Secrets,
// ConfigMaps and claims it names there or in its environment. The job pod policy allows only
// volumes that do not reach into the node, and the Secrets, ConfigMaps and claims that are the
// attempt's own or that the cluster owner lists (policy.go has the fields and values).

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// envRefs checks the Secrets and ConfigMaps a container reads through its environment.
func (c *policyCheck) envRefs(at string, ctr *corev1.Container) {
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			continue
		}
		field := fmt.Sprintf("%s.env[%s].valueFrom", at, e.Name)
		if r := e.ValueFrom.SecretKeyRef; r != nil {
			c.secret(field+".secretKeyRef.name", r.Name)
		}
		if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
			c.configMap(field+".configMapKeyRef.name", r.Name)
		}
	}
	for j, e := range ctr.EnvFrom {
		field := fmt.Sprintf("%s.envFrom[%d]", at, j)
		if e.SecretRef != nil {
			c.secret(field+".secretRef.name", e.SecretRef.Name)
		}
		if e.ConfigMapRef != nil {
			c.configMap(field+".configMapRef.name", e.ConfigMapRef.Name)
		}
	}
}

func (c *policyCheck) volume(v *corev1.Volume) {
	at := fmt.Sprintf("spec.volumes[%s]", v.Name)
	typ := volumeType(&v.VolumeSource)
	if !slices.Contains(restrictedVolumeTypes, typ) && !slices.Contains(c.p.AllowedVolumeTypes, typ) {
		c.refuse(at+"."+typ, fmt.Sprintf("is a %s volume: job pods may only use volumes that do not reach into the node (%s)", typ, strings.Join(restrictedVolumeTypes, ", ")), valueVolumeTypes)
		return
	}
	switch src := v.VolumeSource; {
	case src.PersistentVolumeClaim != nil:
		if name := src.PersistentVolumeClaim.ClaimName; !slices.Contains(c.own.Claims, name) && !slices.Contains(c.p.AllowedClaims, name) {
			c.refuse(at+".persistentVolumeClaim.claimName", fmt.Sprintf("mounts claim %q: job pods may only mount the claims the cluster owner lists", name), valueClaims)
		}
	case src.Ephemeral != nil && src.Ephemeral.VolumeClaimTemplate != nil && !c.p.AllowClaimSources:
		cs := &src.Ephemeral.VolumeClaimTemplate.Spec
		field := at + ".ephemeral.volumeClaimTemplate.spec"
		if cs.VolumeName != "" {
			c.refuse(field+".volumeName", fmt.Sprintf("is %q: a job pod's claim gets a new volume, never an existing one", cs.VolumeName), valueClaimSources)
		}
		if cs.DataSource != nil {
			c.refuse(field+".dataSource", fmt.Sprintf("names %s %q: a job pod's claim starts empty, never as a copy of other data", cs.DataSource.Kind, cs.DataSource.Name), valueClaimSources)
		}
		if cs.DataSourceRef != nil {
			c.refuse(field+".dataSourceRef", fmt.Sprintf("names %s %q: a job pod's claim starts empty, never as a copy of other data", cs.DataSourceRef.Kind, cs.DataSourceRef.Name), valueClaimSources)
		}
	case src.Secret != nil:
		c.secret(at+".secret.secretName", src.Secret.SecretName)
	case src.ConfigMap != nil:
		c.configMap(at+".configMap.name", src.ConfigMap.Name)
	case src.CSI != nil && src.CSI.NodePublishSecretRef != nil:
		c.secret(at+".csi.nodePublishSecretRef.name", src.CSI.NodePublishSecretRef.Name)
	case src.Projected != nil:
		for j, s := range src.Projected.Sources {
			field := fmt.Sprintf("%s.projected.sources[%d]", at, j)
			switch {
			case s.Secret != nil:
				c.secret(field+".secret.name", s.Secret.Name)
			case s.ConfigMap != nil:
				c.configMap(field+".configMap.name", s.ConfigMap.Name)
			case s.ServiceAccountToken != nil && !c.p.AllowServiceAccountToken:
				c.refuse(field+".serviceAccountToken", "projects a Kubernetes API token: job pods get none", valueServiceAccountToken)
			case s.PodCertificate != nil && !c.p.AllowServiceAccountToken:
				c.refuse(field+".podCertificate", "projects a credential of the pod's identity: job pods get none", valueServiceAccountToken)
			}
		}
	}
}

func (c *policyCheck) secret(field, name string) {
	if !slices.Contains(c.own.Secrets, name) && !slices.Contains(c.p.AllowedSecrets, name) {
		c.refuse(field, fmt.Sprintf("reads Secret %q: job pods may only read the Secrets the cluster owner lists", name), valueSecrets)
	}
}

func (c *policyCheck) configMap(field, name string) {
	if name != publicConfigMap && !slices.Contains(c.p.AllowedConfigMaps, name) {
		c.refuse(field, fmt.Sprintf("reads ConfigMap %q: job pods may only read the ConfigMaps the cluster owner lists", name), valueConfigMaps)
	}
}

// volumeType is the JSON name of the volume's source (hostPath, emptyDir, ...).
func volumeType(src *corev1.VolumeSource) string {
	v := reflect.ValueOf(src).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	// No source at all: Kubernetes defaults it to emptyDir.
	return "emptyDir"
}
