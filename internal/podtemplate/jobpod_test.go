package podtemplate

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

func TestValidatePodRefusesEachBadSetting(t *testing.T) {
	secs := int64(30)
	cases := []struct {
		name, field string
		pod         api.JobPod
	}{
		{"bad quantity", "job.pod.resources.requests.memory", api.JobPod{Resources: &api.JobResources{Requests: map[string]string{"memory": "lots"}}}},
		{"request above limit", "job.pod.resources.requests.cpu", api.JobPod{Resources: &api.JobResources{Requests: map[string]string{"cpu": "2"}, Limits: map[string]string{"cpu": "1"}}}},
		{"bad resource name", "job.pod.resources.limits.no such", api.JobPod{Resources: &api.JobResources{Limits: map[string]string{"no such": "1"}}}},
		{"node selector key", "job.pod.node_selector.-bad", api.JobPod{NodeSelector: map[string]string{"-bad": "x"}}},
		{"node selector value", "job.pod.node_selector.pool", api.JobPod{NodeSelector: map[string]string{"pool": "has space"}}},
		{"toleration operator", "job.pod.tolerations[0].operator", api.JobPod{Tolerations: []api.JobToleration{{Key: "k", Operator: "In"}}}},
		{"toleration exists with value", "job.pod.tolerations[0].value", api.JobPod{Tolerations: []api.JobToleration{{Key: "k", Operator: "Exists", Value: "v"}}}},
		{"toleration without key", "job.pod.tolerations[0].key", api.JobPod{Tolerations: []api.JobToleration{{Operator: "Equal", Value: "v"}}}},
		{"toleration effect", "job.pod.tolerations[0].effect", api.JobPod{Tolerations: []api.JobToleration{{Key: "k", Effect: "NoRun"}}}},
		{"toleration seconds", "job.pod.tolerations[0].toleration_seconds", api.JobPod{Tolerations: []api.JobToleration{{Key: "k", Effect: "NoSchedule", TolerationSeconds: &secs}}}},
		{"affinity not JSON", "job.pod.affinity", api.JobPod{Affinity: `{nodeAffinity`}},
		{"affinity wrong field", "job.pod.affinity", api.JobPod{Affinity: `{"NodeAffinity":{}}`}},
		{"env name", "job.pod.env[0].name", api.JobPod{Env: []api.JobEnvVar{{Name: "A=B", Value: "x"}}}},
		{"env owned", "job.pod.env[0].name", api.JobPod{Env: []api.JobEnvVar{{Name: "OUTPOST_API_URL", Value: "http://evil"}}}},
		{"env twice", "job.pod.env[1].name", api.JobPod{Env: []api.JobEnvVar{{Name: "A", Value: "1"}, {Name: "A", Value: "2"}}}},
		{"env two sources", "job.pod.env[0]", api.JobPod{Env: []api.JobEnvVar{{Name: "A", Value: "1", SecretKeyRef: &api.JobKeyRef{Name: "s", Key: "k"}}}}},
		{"env secret name", "job.pod.env[0].secret_key_ref.name", api.JobPod{Env: []api.JobEnvVar{{Name: "A", SecretKeyRef: &api.JobKeyRef{Name: "Bad_Name", Key: "k"}}}}},
		{"env config map key", "job.pod.env[0].config_map_key_ref.key", api.JobPod{Env: []api.JobEnvVar{{Name: "A", ConfigMapKeyRef: &api.JobKeyRef{Name: "c", Key: "a/b"}}}}},
		{"label owned", "job.pod.labels.outpost.dev/runner", api.JobPod{Labels: map[string]string{"outpost.dev/runner": "x"}}},
		{"label value", "job.pod.labels.team", api.JobPod{Labels: map[string]string{"team": "a b"}}},
		{"annotation owned", "job.pod.annotations.outpost.dev/seal", api.JobPod{Annotations: map[string]string{"outpost.dev/seal": "x"}}},
		{"volumes not a list", "job.pod.volumes", api.JobPod{Volumes: `{"name":"a"}`}},
		{"volume field case", "job.pod.volumes", api.JobPod{Volumes: `[{"name":"a","EmptyDir":{}}]`}},
		{"volume name", "job.pod.volumes[0].name", api.JobPod{Volumes: `[{"name":"A_b","emptyDir":{}}]`}},
		{"volume owned", "job.pod.volumes[0].name", api.JobPod{Volumes: `[{"name":"outpost-runner","emptyDir":{}}]`}},
		{"volume twice", "job.pod.volumes[1].name", api.JobPod{Volumes: `[{"name":"a","emptyDir":{}},{"name":"a","emptyDir":{}}]`}},
		{"mount unknown volume", "job.pod.volume_mounts[0].name", api.JobPod{VolumeMounts: []api.JobVolumeMount{{Name: "nope", MountPath: "/x"}}}},
		{"mount relative", "job.pod.volume_mounts[0].mount_path", api.JobPod{Volumes: `[{"name":"a","emptyDir":{}}]`, VolumeMounts: []api.JobVolumeMount{{Name: "a", MountPath: "x"}}}},
		{"mount over runner", "job.pod.volume_mounts[0].mount_path", api.JobPod{Volumes: `[{"name":"a","emptyDir":{}}]`, VolumeMounts: []api.JobVolumeMount{{Name: "a", MountPath: "/var/run/outpost/job"}}}},
		{"mount above runner", "job.pod.volume_mounts[0].mount_path", api.JobPod{Volumes: `[{"name":"a","emptyDir":{}}]`, VolumeMounts: []api.JobVolumeMount{{Name: "a", MountPath: "/var/run"}}}},
		{"mount sub path", "job.pod.volume_mounts[0].sub_path", api.JobPod{Volumes: `[{"name":"a","emptyDir":{}}]`, VolumeMounts: []api.JobVolumeMount{{Name: "a", MountPath: "/a", SubPath: "../etc"}}}},
		{"priority class", "job.pod.priority_class_name", api.JobPod{PriorityClassName: "High!"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidatePod("job.pod", &tc.pod, "")
			var fe *api.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("ValidatePod = %v, want an *api.FieldError", err)
			}
			if fe.Field != tc.field {
				t.Errorf("field %q, want %q (%s)", fe.Field, tc.field, fe.Message)
			}
		})
	}
}

func TestValidatePodAcceptsMountsOfTemplateVolumes(t *testing.T) {
	tpl := `{"spec":{"volumes":[{"name":"cache","emptyDir":{}}]}}`
	p := &api.JobPod{VolumeMounts: []api.JobVolumeMount{{Name: "cache", MountPath: "/cache"}}}
	if err := ValidatePod("job.pod", p, tpl); err != nil {
		t.Fatal(err)
	}
	if err := ValidatePod("job.pod", p, ""); err == nil {
		t.Fatal("a mount of a volume nobody defines must be refused")
	}
}

// TestApplyPrecedence: a setting wins over the template's value of the same key, the template
// keeps everything the settings do not name.
func TestApplyPrecedence(t *testing.T) {
	tpl, err := Parse(`{"metadata":{"labels":{"team":"infra","tier":"t"},"annotations":{"a":"tpl"}},
	  "spec":{"nodeSelector":{"pool":"tpl","zone":"z1"},"tolerations":[{"key":"tpl","operator":"Exists"}],
	   "affinity":{"podAntiAffinity":{}},"priorityClassName":"low","priority":5,
	   "volumes":[{"name":"cache","emptyDir":{}},{"name":"data","emptyDir":{}}],
	   "containers":[{"name":"main","image":"i","env":[{"name":"A","value":"tpl"},{"name":"B","value":"tpl"}],
	     "resources":{"requests":{"cpu":"1","memory":"1Gi"}},
	     "volumeMounts":[{"name":"cache","mountPath":"/cache"},{"name":"data","mountPath":"/data"}]}]}}`)
	if err != nil {
		t.Fatal(err)
	}
	p := &api.JobPod{
		Resources:         &api.JobResources{Requests: map[string]string{"memory": "2Gi"}, Limits: map[string]string{"memory": "4Gi"}},
		NodeSelector:      map[string]string{"pool": "attr"},
		Tolerations:       []api.JobToleration{{Key: "attr", Operator: "Equal", Value: "v", Effect: "NoSchedule"}},
		Affinity:          `{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"k","operator":"In","values":["v"]}]}]}}}`,
		Env:               []api.JobEnvVar{{Name: "A", Value: "attr"}, {Name: "S", SecretKeyRef: &api.JobKeyRef{Name: "db", Key: "pw", Optional: true}}, {Name: "C", ConfigMapKeyRef: &api.JobKeyRef{Name: "cfg", Key: "k"}}},
		Labels:            map[string]string{"team": "attr"},
		Annotations:       map[string]string{"b": "attr"},
		Volumes:           `[{"name":"cache","configMap":{"name":"cache-cm"}}]`,
		VolumeMounts:      []api.JobVolumeMount{{Name: "cache", MountPath: "/data", ReadOnly: true}},
		PriorityClassName: "high",
	}
	if err := Apply(tpl, p); err != nil {
		t.Fatal(err)
	}
	if tpl.Labels["team"] != "attr" || tpl.Labels["tier"] != "t" || tpl.Annotations["a"] != "tpl" || tpl.Annotations["b"] != "attr" {
		t.Errorf("labels %v annotations %v", tpl.Labels, tpl.Annotations)
	}
	s := tpl.Spec
	if s.NodeSelector["pool"] != "attr" || s.NodeSelector["zone"] != "z1" {
		t.Errorf("node selector %v", s.NodeSelector)
	}
	if len(s.Tolerations) != 2 || s.Tolerations[0].Key != "tpl" || s.Tolerations[1].Key != "attr" || s.Tolerations[1].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("tolerations %+v", s.Tolerations)
	}
	if s.Affinity.NodeAffinity == nil || s.Affinity.PodAntiAffinity != nil {
		t.Errorf("affinity %+v: the setting replaces the template's", s.Affinity)
	}
	if s.PriorityClassName != "high" || s.Priority != nil {
		t.Errorf("priority class %q priority %v", s.PriorityClassName, s.Priority)
	}
	if len(s.Volumes) != 2 || s.Volumes[0].Name != "data" || s.Volumes[1].ConfigMap == nil {
		t.Errorf("volumes %+v", s.Volumes)
	}
	main := Main(tpl)
	if got := main.Resources.Requests[corev1.ResourceCPU]; got.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("cpu request %s: the template's stays where the setting names none", got.String())
	}
	if got := main.Resources.Requests[corev1.ResourceMemory]; got.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("memory request %s", got.String())
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range main.Env {
		env[e.Name] = e
	}
	if len(main.Env) != 4 || env["A"].Value != "attr" || env["B"].Value != "tpl" ||
		env["S"].ValueFrom.SecretKeyRef.Name != "db" || !*env["S"].ValueFrom.SecretKeyRef.Optional || env["C"].ValueFrom.ConfigMapKeyRef.Key != "k" {
		t.Errorf("env %+v", main.Env)
	}
	// The mount at /data replaces the template's at that path; the cache mount named like it goes too.
	if len(main.VolumeMounts) != 1 || main.VolumeMounts[0].Name != "cache" || main.VolumeMounts[0].MountPath != "/data" || !main.VolumeMounts[0].ReadOnly {
		t.Errorf("mounts %+v", main.VolumeMounts)
	}
}

func TestApplyAddsMainToMetadataOnlyTemplate(t *testing.T) {
	tpl, err := Parse(`{"metadata":{"labels":{"a":"b"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(tpl, &api.JobPod{Env: []api.JobEnvVar{{Name: "X", Value: "1"}}}); err != nil {
		t.Fatal(err)
	}
	if len(tpl.Spec.Containers) != 1 || tpl.Spec.Containers[0].Name != MainContainer || tpl.Spec.Containers[0].Env[0].Name != "X" {
		t.Errorf("containers %+v", tpl.Spec.Containers)
	}
}

func TestApplyRefusesBadSettingsWithTheirPath(t *testing.T) {
	tpl, _ := Parse("")
	err := Apply(tpl, &api.JobPod{Env: []api.JobEnvVar{{Name: "OUTPOST_TOKEN_FILE", Value: "/x"}}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "job.pod.env[0].name") {
		t.Fatalf("Apply = %v, want ErrInvalid naming job.pod.env[0].name", err)
	}
}

func TestNormalizePod(t *testing.T) {
	got, err := NormalizePod(&api.JobPod{Labels: map[string]string{}, Volumes: "[]", Affinity: " {} ", Resources: &api.JobResources{}})
	if err != nil || got != nil {
		t.Fatalf("empty settings normalize to %+v, %v; want nil", got, err)
	}
	got, err = NormalizePod(&api.JobPod{Volumes: `[ {"name":"a", "emptyDir": {} } ]`, Affinity: `{"nodeAffinity": {}}`})
	if err != nil {
		t.Fatal(err)
	}
	if got.Volumes != `[{"emptyDir":{},"name":"a"}]` || got.Affinity != `{"nodeAffinity":{}}` {
		t.Errorf("normal form %q %q", got.Volumes, got.Affinity)
	}
	if _, err := NormalizePod(&api.JobPod{Volumes: `[`}); err == nil {
		t.Error("JSON that does not parse must be refused")
	}
}
