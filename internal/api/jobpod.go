package api

// JobPod is a runner's job pod settings: what the users of the closed agents set on job pods
// every day, as fields rather than a hand-written pod template. The agent applies them over the
// runner's pod template (a setting wins over the template's value of the same key), fills in the
// cluster owner's defaults where neither says anything, and re-asserts the fields it owns last
// (package podtemplate, Apply). Every field is optional; Kubernetes objects that have no short
// form (affinity, volumes) travel as JSON text, as the pod template does.
type JobPod struct {
	// Resources of the "main" container, by resource name ("cpu", "memory", ...).
	Resources *JobResources `json:"resources,omitempty"`
	// NodeSelector is merged key by key over the template's.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Tolerations are added to the template's.
	Tolerations []JobToleration `json:"tolerations,omitempty"`
	// Affinity is a Kubernetes Affinity as JSON; it replaces the template's.
	Affinity string `json:"affinity,omitempty"`
	// Env are variables of "main", replacing the template's of the same name.
	Env []JobEnvVar `json:"env,omitempty"`
	// Labels and Annotations of the pod, merged key by key over the template's.
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Volumes is a JSON list of Kubernetes Volumes, replacing the template's of the same name.
	Volumes string `json:"volumes,omitempty"`
	// VolumeMounts of "main", replacing the template's of the same name or path.
	VolumeMounts []JobVolumeMount `json:"volume_mounts,omitempty"`
	// PriorityClassName replaces the template's.
	PriorityClassName string `json:"priority_class_name,omitempty"`
}

// JobResources are the requests and limits of the "main" container, as Kubernetes quantities.
type JobResources struct {
	Requests map[string]string `json:"requests,omitempty"`
	Limits   map[string]string `json:"limits,omitempty"`
}

// JobToleration is a Kubernetes toleration.
type JobToleration struct {
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty"`
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect,omitempty"`
	// TolerationSeconds applies to NoExecute only; nil tolerates for ever.
	TolerationSeconds *int64 `json:"toleration_seconds,omitempty"`
}

// JobEnvVar is a variable of "main": a literal Value, or a key of a Secret or ConfigMap in the
// job namespace (exactly one of the three).
type JobEnvVar struct {
	Name            string     `json:"name"`
	Value           string     `json:"value,omitempty"`
	SecretKeyRef    *JobKeyRef `json:"secret_key_ref,omitempty"`
	ConfigMapKeyRef *JobKeyRef `json:"config_map_key_ref,omitempty"`
}

// JobKeyRef names a key of a Secret or ConfigMap in the job namespace.
type JobKeyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	// Optional lets the pod start when the object or key is missing.
	Optional bool `json:"optional,omitempty"`
}

// JobVolumeMount mounts one of the pod's volumes into "main".
type JobVolumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mount_path"`
	SubPath   string `json:"sub_path,omitempty"`
	ReadOnly  bool   `json:"read_only,omitempty"`
}
