package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Humanitec's `hctl create runner` takes a runner file of its own shape:
//
//	runner_configuration:
//	  type: kubernetes-agent
//	  key: |            # or job.key, as their extended example writes it
//	    -----BEGIN PUBLIC KEY-----
//	  job: {namespace, service_account, pod_template}   # pod_template a YAML mapping
//	state_storage_configuration: {type: kubernetes, namespace: …}
//
// Outpost's runner has the same settings in the API's shape, and its state storage is an object
// of its own that the runner names by id. A runner file whose top level holds
// runner_configuration or state_storage_configuration is translated here, so a file pasted from
// Humanitec's documentation (or their --set values) works as it is; what was translated is said
// on stderr.

// Top-level keys of the hctl runner shape.
const (
	hctlRunnerKey  = "runner_configuration"
	hctlStorageKey = "state_storage_configuration"
)

// hctlKeys are the top-level keys --set may address although the API has no such field.
var hctlKeys = []string{hctlRunnerKey, hctlStorageKey}

// translation is what adapting a file did beyond dropping read-only keys: notes for the user,
// and the state storage the runner needs (created or reused before the runner is registered).
type translation struct {
	notes   []string
	storage *api.StateStorageInput
}

func (t *translation) note(format string, args ...any) {
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

// adaptRunner turns a runner document into the API's shape: Humanitec's runner_configuration
// and state_storage_configuration are translated, a pod_template given as a mapping becomes
// the JSON string the API carries, and the read-only fields `get -o yaml` prints are dropped.
func adaptRunner(doc map[string]any) (*translation, error) {
	if t, ok := doc["type"]; ok && t != api.RunnerTypeKubernetesAgent {
		return nil, fmt.Errorf("type %v: the only runner type is %s", t, api.RunnerTypeKubernetesAgent)
	}
	dropKeys(doc, "type", "status", "created_at", "updated_at")
	tr := &translation{}
	if rc, ok := doc[hctlRunnerKey]; ok {
		if err := translateRunnerConfiguration(doc, rc, tr); err != nil {
			return nil, fmt.Errorf("%s: %w", hctlRunnerKey, err)
		}
	}
	if sc, ok := doc[hctlStorageKey]; ok {
		if err := translateStorageConfiguration(doc, sc, tr); err != nil {
			return nil, fmt.Errorf("%s: %w", hctlStorageKey, err)
		}
	}
	if job, ok := doc["job"].(map[string]any); ok {
		if err := podTemplateString(job, "job.pod_template", tr); err != nil {
			return nil, err
		}
	}
	return tr, nil
}

// translateRunnerConfiguration moves runner_configuration's settings to the API's fields.
func translateRunnerConfiguration(doc map[string]any, raw any, tr *translation) error {
	rc, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("a %s where a mapping (type, key, job) is expected", jsonKind(raw))
	}
	delete(doc, hctlRunnerKey)
	for _, k := range []string{"public_keys", "job"} {
		if _, ok := doc[k]; ok {
			return fmt.Errorf("the file also sets %s: give the runner either in Humanitec's shape (runner_configuration) or in Outpost's (public_keys, job), not both", k)
		}
	}
	if t, ok := rc["type"]; ok && t != api.RunnerTypeKubernetesAgent {
		return fmt.Errorf("type %v: Outpost runs kubernetes-agent runners only", t)
	}
	job := map[string]any{}
	if j, ok := rc["job"]; ok {
		if job, ok = j.(map[string]any); !ok {
			return fmt.Errorf("job: a %s where a mapping (namespace, service_account, pod_template) is expected", jsonKind(j))
		}
	}
	// The key: runner_configuration.key in their short example, job.key in their extended one.
	key, keyAt := rc["key"], hctlRunnerKey+".key"
	if k, ok := job["key"]; ok {
		if key != nil {
			return errors.New("both key and job.key are set: keep one")
		}
		key, keyAt = k, hctlRunnerKey+".job.key"
		delete(job, "key")
	}
	for k := range rc {
		if k != "type" && k != "key" && k != "job" {
			return fmt.Errorf("unknown field %q; the fields are type, key and job", k)
		}
	}
	for k := range job {
		if k != "namespace" && k != "service_account" && k != "pod_template" {
			return fmt.Errorf("job: unknown field %q; the fields are namespace, service_account, pod_template and key", k)
		}
	}
	if key != nil {
		pem, ok := key.(string)
		if !ok {
			return fmt.Errorf("key: a %s where a PEM public key (key: |) is expected", jsonKind(key))
		}
		doc["public_keys"] = []any{pem}
		tr.note("%s → public_keys[0]", keyAt)
	}
	doc["job"] = job
	for _, k := range []string{"namespace", "service_account"} {
		if _, ok := job[k]; ok {
			tr.note("%s.job.%s → job.%s", hctlRunnerKey, k, k)
		}
	}
	if _, ok := job["pod_template"]; ok {
		tr.note("%s.job.pod_template → job.pod_template", hctlRunnerKey)
	}
	return nil
}

// translateStorageConfiguration reads state_storage_configuration, in hctl's flat shape
// ({type: kubernetes, namespace: …}) or the Terraform provider's nested one
// ({type, kubernetes_configuration: {namespace}}), into the state storage the runner will use.
func translateStorageConfiguration(doc map[string]any, raw any, tr *translation) error {
	sc, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("a %s where a mapping (type and its settings) is expected", jsonKind(raw))
	}
	delete(doc, hctlStorageKey)
	if _, ok := doc["state_storage_id"]; ok {
		return errors.New("the file also sets state_storage_id: give one of them")
	}
	typ, _ := sc["type"].(string)
	if !slices.Contains(api.StateStorageTypes, typ) {
		return fmt.Errorf("type %v: the state storage types are %s", sc["type"], strings.Join(api.StateStorageTypes, ", "))
	}
	settings := map[string]any{}
	for k, v := range sc {
		switch k {
		case "type":
		case typ + "_configuration":
			m, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("%s: a %s where a mapping is expected", k, jsonKind(v))
			}
			for kk, vv := range m {
				settings[kk] = vv
			}
		default:
			settings[k] = v
		}
	}
	in := api.StateStorageInput{Type: typ}
	spec, err := json.Marshal(settings)
	if err != nil {
		return err
	}
	var target any
	switch typ {
	case api.StateStorageKubernetes:
		in.Kubernetes = &api.KubernetesStateSpec{}
		target = in.Kubernetes
	case api.StateStorageS3:
		in.S3 = &api.S3StateSpec{}
		target = in.S3
	case api.StateStorageGCS:
		in.GCS = &api.GCSStateSpec{}
		target = in.GCS
	case api.StateStorageAzureRM:
		in.AzureRM = &api.AzureRMStateSpec{}
		target = in.AzureRM
	}
	if err := strictDecode(spec, target); err != nil {
		return fmt.Errorf("%s settings: %s", typ, decodeProblem(err, reflect.TypeOf(target).Elem()))
	}
	tr.storage = &in
	return nil
}

// podTemplateString turns a pod_template given as a mapping into the JSON string the API
// carries, and refuses other shapes with the ones it takes.
func podTemplateString(job map[string]any, field string, tr *translation) error {
	v, ok := job["pod_template"]
	if !ok || v == nil {
		return nil
	}
	switch t := v.(type) {
	case string:
		return nil
	case map[string]any:
		b, err := json.Marshal(t)
		if err != nil {
			return err
		}
		job["pod_template"] = string(b)
		tr.note("%s: the mapping → a JSON string", field)
		return nil
	}
	return fmt.Errorf("%s: a %s is not a pod template; give a Kubernetes PodTemplateSpec as a YAML/JSON mapping (metadata:, spec:) or as a JSON string", field, jsonKind(v))
}

// normalizePodTemplate turns a pod template given as YAML text (e.g. --set
// job.pod_template=@template.yaml) into the JSON the API carries. JSON, or text that is no
// mapping, is left for the orchestrator to judge.
func normalizePodTemplate(in *api.RunnerInput, tr *translation) {
	s := strings.TrimSpace(in.Job.PodTemplate)
	if s == "" || json.Valid([]byte(s)) {
		return
	}
	js, err := yaml.YAMLToJSON([]byte(s))
	var m map[string]any
	if err != nil || json.Unmarshal(js, &m) != nil || m == nil {
		return
	}
	in.Job.PodTemplate = string(js)
	tr.note("job.pod_template: YAML → a JSON string")
}

// ensureStorage finds or registers the state storage a translated file asked for and names it in
// the runner: a state storage of the same type and settings is reused, else one is created as
// <runner id>-states.
func ensureStorage(ctx context.Context, s *session, tr *translation, in *api.RunnerInput) error {
	want := tr.storage
	if want == nil {
		return nil
	}
	have, err := s.ListStateStorages(ctx)
	if err != nil && !errors.Is(err, api.ErrOrgNotFound) { // a new organisation has none to reuse
		return err
	}
	for i := range have {
		if sameStorage(&have[i].StateStorageInput, want) {
			in.StateStorageID = have[i].ID
			tr.note("%s → state_storage_id %s (the existing %s state storage %s)", hctlStorageKey, have[i].ID, want.Type, location(&have[i]))
			return nil
		}
	}
	want.ID = storageIDFor(in.ID)
	want.Description = "State of runner " + in.ID + " (from " + hctlStorageKey + ")"
	if _, err := s.CreateStateStorage(ctx, *want); err != nil {
		if errors.Is(err, api.ErrConflict) {
			return fmt.Errorf("%s: state storage %s exists with other settings; name the one to use with state_storage_id, or change %s", hctlStorageKey, want.ID, want.ID)
		}
		return fmt.Errorf("%s: the orchestrator refused the state storage %s: %w", hctlStorageKey, want.ID, err)
	}
	in.StateStorageID = want.ID
	tr.note("%s → state storage %s, created (%s)", hctlStorageKey, want.ID, location(&api.StateStorage{StateStorageInput: *want}))
	return nil
}

// sameStorage reports whether two state storages keep states in the same place.
func sameStorage(a, b *api.StateStorageInput) bool {
	if a.Type != b.Type {
		return false
	}
	return reflect.DeepEqual(a.Kubernetes, b.Kubernetes) && reflect.DeepEqual(a.S3, b.S3) &&
		reflect.DeepEqual(a.GCS, b.GCS) && reflect.DeepEqual(a.AzureRM, b.AzureRM)
}

// storageIDFor is the id of a runner's own state storage: <runner id>-states, cut to 63
// characters with 8 hex digits of the runner id's SHA-256 when longer (the installer module's
// names submodule derives the same).
func storageIDFor(runnerID string) string {
	const suffix, limit = "-states", 63
	if len(runnerID)+len(suffix) <= limit {
		return runnerID + suffix
	}
	sum := sha256.Sum256([]byte(runnerID))
	return runnerID[:limit-len(suffix)-9] + "-" + hex.EncodeToString(sum[:])[:8] + suffix
}

// printNotes says on stderr what a translation did, so a user sees how their file was read.
func (a *app) printNotes(file string, tr *translation) {
	if tr == nil || len(tr.notes) == 0 {
		return
	}
	fmt.Fprintf(a.env.Stderr, "%s: translated to Outpost's runner shape:\n", source(file))
	for _, n := range tr.notes {
		fmt.Fprintf(a.env.Stderr, "  %s\n", n)
	}
}

// strictDecode decodes JSON into v, refusing unknown fields.
func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// jsonKind names the JSON kind of a decoded value for messages.
func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "list"
	case map[string]any:
		return "mapping"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
