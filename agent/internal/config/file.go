package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Decode reads a configuration document (YAML; the chart's ConfigMap holds one) over c. Keys
// the document does not hold keep c's values; an unknown key or a value of the wrong type is an
// error naming the key and the chart value it comes from. jobs.resources given as null or {}
// means no resources, not the defaults.
func (c *Config) Decode(data []byte) error {
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("not a YAML map of settings: %w", err)
	}
	if jobs, ok := doc["jobs"].(map[string]any); ok {
		if _, ok := jobs["resources"]; ok {
			// Decoding merges into maps; the file's resources replace the defaults.
			c.Jobs.Resources = corev1.ResourceRequirements{}
		}
	}
	if err := decodeStrict(data, c); err != nil {
		if key, kerr := locate(doc, nil); key != "" {
			return &FieldError{Key: key, Err: kerr}
		}
		return errors.New(decodeMessage(err))
	}
	return nil
}

// locate finds the deepest key of doc whose value alone does not decode, and why: the key an
// error message names. Empty when every key decodes on its own.
func locate(doc map[string]any, prefix []string) (string, error) {
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		path := append(slices.Clone(prefix), k)
		v := doc[k]
		for i := len(path) - 1; i >= 0; i-- {
			v = map[string]any{path[i]: v}
		}
		data, err := json.Marshal(v)
		if err != nil {
			return strings.Join(path, "."), err
		}
		if err := decodeStrict(data, Defaults()); err != nil {
			if m, ok := doc[k].(map[string]any); ok {
				if key, kerr := locate(m, path); key != "" {
					return key, kerr
				}
			}
			return strings.Join(path, "."), errors.New(decodeMessage(err))
		}
	}
	return "", nil
}

// decodeStrict decodes a YAML (or JSON) document into v the way Kubernetes decodes objects:
// keys match field names exactly (apiURL is not apiUrl), and unknown or repeated keys are
// errors.
func decodeStrict(data []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, v, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// decodeMessage drops the layers sigs.k8s.io/yaml and encoding/json put in front of a decoding
// error's reason.
func decodeMessage(err error) string {
	msg := err.Error()
	for _, p := range []string{"error unmarshaling JSON: ", "while decoding JSON: ", "json: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

// FieldError is a bad setting: its key in the configuration file and what is wrong with it.
// Its message also names the chart value the key comes from and the flag that sets it.
type FieldError struct {
	Key string
	Err error
}

func (e *FieldError) Error() string { return Describe(e.Key) + ": " + e.Err.Error() }

func (e *FieldError) Unwrap() error { return e.Err }

// Describe names a setting by its key in the configuration file, then where else it comes
// from: the chart value (the chart renders the file from its values) and the flag and
// environment variable. For example "jobs.resources.limits.cpu (chart value jobs.resources)"
// or "apiUrl (chart value apiUrl; --api-url, OUTPOST_API_URL)".
func Describe(key string) string {
	var from []string
	if v := ChartValue(key); v != "" {
		from = append(from, "chart value "+v)
	}
	if f, ok := flagOfKey[key]; ok {
		from = append(from, "--"+f+", "+EnvName(f))
	}
	if len(from) == 0 {
		return key
	}
	return key + " (" + strings.Join(from, "; ") + ")"
}

// ChartValue is the chart value a key of the configuration file is rendered from (see
// agent/chart/templates/_config.tpl), or "" for the keys the chart does not set. Most keys are
// named like their value; chartValues lists the others.
func ChartValue(key string) string {
	for k := key; k != ""; k = parent(k) {
		if v, ok := chartValues[k]; ok {
			switch v {
			case "":
				return k
			case "-":
				return ""
			}
			return v
		}
	}
	return ""
}

func parent(key string) string {
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[:i]
	}
	return ""
}

// chartValues maps the keys of the file the chart renders to their chart values; "" is a value
// of the same name, "-" a setting the chart makes without a value. A key below one listed here
// comes from the same value.
var chartValues = map[string]string{
	"apiUrl": "", "insecureAllowHttp": "", "orgId": "", "runnerId": "", "cli": "", "logLevel": "", "logFormat": "",
	"privateKey.existingSecret": "", "privateKey.secretKey": "",
	"kubeClient.qps": "", "kubeClient.burst": "", "leaderElection.enabled": "",
	"leaderElection.leaseName": "fullnameOverride (the Lease is named like the release's objects)",
	"caBundleFile":             "caBundle.existingSecret or caBundle.pem",
	"state.url":                "state.tls.enabled (the URL is the agent Service's)",
	"state.listen":             "state.tls.plainHTTP",
	"state.tls":                "state.tls.enabled",
	"state.namespace":          "", "state.limits": "",
	"state.encryptionKeyFile": "state.encryption.existingSecret",
	"jobs.namespace":          "", "jobs.startupTimeout": "", "jobs.podLabels": "", "jobs.resources": "",
	"jobs.pluginCache": "", "jobs.providerInstallation": "", "jobs.history": "", "jobs.forwardEnv": "",
	"jobs.podTemplate": "", "jobs.policy": "", "jobs.podSecurityContext": "", "jobs.securityContext": "",
	"jobs.policy.allowServiceAccountToken": "jobs.serviceAccount.automountToken",
	"jobs.policy.agentSelector":            "-",
	"jobs.serviceAccount":                  "jobs.serviceAccount.name",
	"jobs.image":                           "jobs.image.*",
	"jobs.agentImage":                      "image.*",
	"jobs.imagePullSecrets":                "imagePullSecrets",
	"jobs.caSecret":                        "caBundle.existingSecret or caBundle.pem",
	"jobs.caSecretKey":                     "caBundle.secretKey",
}
