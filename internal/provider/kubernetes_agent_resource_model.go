package provider

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/outpost-dev/terraform-provider-outpost/internal/helm"
)

// kubernetesAgentModel maps outpost_kubernetes_agent.
type kubernetesAgentModel struct {
	ID                           types.String           `tfsdk:"id"`
	Namespace                    types.String           `tfsdk:"namespace"`
	ReleaseName                  types.String           `tfsdk:"release_name"`
	RunnerID                     types.String           `tfsdk:"runner_id"`
	APIURL                       types.String           `tfsdk:"api_url"`
	OrgID                        types.String           `tfsdk:"org_id"`
	CreateNamespaces             types.Bool             `tfsdk:"create_namespaces"`
	JobNamespace                 types.String           `tfsdk:"job_namespace"`
	JobServiceAccount            types.String           `tfsdk:"job_service_account"`
	JobServiceAccountAnnotations types.Map              `tfsdk:"job_service_account_annotations"` //< string
	JobPodLabels                 types.Map              `tfsdk:"job_pod_labels"`                  //< string
	ServiceAccountAnnotations    types.Map              `tfsdk:"service_account_annotations"`     //< string
	ServeState                   types.Bool             `tfsdk:"serve_state"`
	StateNamespace               types.String           `tfsdk:"state_namespace"`
	CLI                          types.String           `tfsdk:"cli"`
	LogLevel                     types.String           `tfsdk:"log_level"`
	Replicas                     types.Int64            `tfsdk:"replicas"`
	ImageRegistry                types.String           `tfsdk:"image_registry"`
	NodeSelector                 types.Map              `tfsdk:"node_selector"` //< string
	Values                       types.String           `tfsdk:"values"`
	WaitForConnection            types.Bool             `tfsdk:"wait_for_connection"`
	PrivateKeySecret             *privateKeySecretModel `tfsdk:"private_key_secret"`
	JobPodPolicy                 *jobPodPolicyModel     `tfsdk:"job_pod_policy"`
	NetworkPolicy                *networkPolicyModel    `tfsdk:"network_policy"`
	Image                        *agentImageModel       `tfsdk:"image"`
	JobImage                     *jobImageModel         `tfsdk:"job_image"`
	ImagePullSecret              *imagePullSecretModel  `tfsdk:"image_pull_secret"`
	Timeouts                     timeouts.Value         `tfsdk:"timeouts"`
	// The settings of the Jobs and the network, and the agent pods' tolerations, environment
	// and resources (kubernetes_agent_resource_jobs.go).
	agentJobsModel

	// Computed attributes
	ChartVersion  types.String `tfsdk:"chart_version"`
	AppVersion    types.String `tfsdk:"app_version"`
	Status        types.String `tfsdk:"status"`
	Revision      types.Int64  `tfsdk:"revision"`
	ValuesSHA256  types.String `tfsdk:"values_sha256"`
	DriftDetected types.Bool   `tfsdk:"drift_detected"`
}

type privateKeySecretModel struct {
	Name types.String `tfsdk:"name"`
	Key  types.String `tfsdk:"key"`
}

type agentImageModel struct {
	Registry   types.String `tfsdk:"registry"`
	Repository types.String `tfsdk:"repository"`
	Tag        types.String `tfsdk:"tag"`
	Digest     types.String `tfsdk:"digest"`
	PullPolicy types.String `tfsdk:"pull_policy"`
}

type jobImageModel struct {
	Registry   types.String `tfsdk:"registry"`
	Repository types.String `tfsdk:"repository"`
	Tag        types.String `tfsdk:"tag"`
	Digest     types.String `tfsdk:"digest"`
}

type resourcesModel struct {
	Requests types.Map `tfsdk:"requests"` //< string
	Limits   types.Map `tfsdk:"limits"`   //< string
}

// errUnknownValues means a chart value depends on something not known yet (at plan time).
var errUnknownValues = errors.New("some chart values are not known yet")

// chartValues builds the chart values from the model and the user's `values`: the attributes
// win over `values`, except those that have a default (api_url, org_id, job_namespace,
// state_namespace, job_service_account, serve_state, log_level, replicas and
// private_key_secret.key), over which `values` wins, so a value set there is never undone by
// a default. It returns errUnknownValues while any input is unknown. Defaults the plan fills in
// (namespaces, api_url, org_id) must be set before.
func (m kubernetesAgentModel) chartValues() (map[string]any, error) {
	r := &valuesReader{}
	policy, automount, template := m.JobPodPolicy.chartValues(r)
	jobs := map[string]any{
		"namespace": r.str(m.JobNamespace),
		"serviceAccount": nonEmpty(map[string]any{
			"name":           r.str(m.JobServiceAccount),
			"annotations":    r.strMap(m.JobServiceAccountAnnotations),
			"automountToken": automount,
		}),
		"podLabels":   r.strMap(m.JobPodLabels),
		"policy":      policy,
		"podTemplate": template,
	}
	if img := m.JobImage; img != nil {
		jobs["image"] = nonEmpty(map[string]any{
			"registry": r.str(img.Registry), "repository": r.str(img.Repository), "tag": r.str(img.Tag), "digest": r.str(img.Digest),
		})
	}
	v := map[string]any{
		"apiUrl":       r.str(m.APIURL),
		"orgId":        r.str(m.OrgID),
		"runnerId":     r.str(m.RunnerID),
		"cli":          r.str(m.CLI),
		"logLevel":     r.str(m.LogLevel),
		"replicaCount": r.int(m.Replicas),
		"jobs":         jobs,
		"state": nonEmpty(map[string]any{
			"enabled":   r.boolean(m.ServeState),
			"namespace": r.str(m.StateNamespace),
		}),
		"serviceAccount": nonEmpty(map[string]any{"annotations": r.strMap(m.ServiceAccountAnnotations)}),
		"global":         nonEmpty(map[string]any{"imageRegistry": r.str(m.ImageRegistry)}),
		"nodeSelector":   r.strMap(m.NodeSelector),
		"networkPolicy":  m.NetworkPolicy.chartValues(r),
		// The agent hands the chart's imagePullSecrets on to the job pods.
		"imagePullSecrets": m.ImagePullSecret.chartValues(r),
	}
	m.agentJobsModel.chartValues(r, v, jobs)
	v["jobs"] = nonEmpty(jobs)
	if s := m.PrivateKeySecret; s != nil {
		v["privateKey"] = nonEmpty(map[string]any{"existingSecret": r.str(s.Name), "secretKey": r.str(s.Key)})
	}
	if img := m.Image; img != nil {
		v["image"] = nonEmpty(map[string]any{
			"registry": r.str(img.Registry), "repository": r.str(img.Repository), "tag": r.str(img.Tag),
			"digest": r.str(img.Digest), "pullPolicy": r.str(img.PullPolicy),
		})
	}
	v = nonEmpty(v)
	if r.unknown {
		return nil, errUnknownValues
	}
	if r.err != nil {
		return nil, r.err
	}
	if m.Values.IsUnknown() {
		return nil, errUnknownValues
	}
	extra, err := helm.ParseValues(m.Values.ValueString())
	if err != nil {
		return nil, err
	}
	defaults := splitDefaulted(v)
	return helm.MergeValues(helm.MergeValues(defaults, extra), v), nil
}

// defaultedValues are the chart values of the attributes that have a default, by path.
var defaultedValues = [][]string{
	{"apiUrl"}, {"orgId"}, {"logLevel"}, {"replicaCount"}, {"jobs", "namespace"}, {"jobs", "serviceAccount", "name"},
	{"state", "enabled"}, {"state", "namespace"}, {"privateKey", "secretKey"},
}

// splitDefaulted moves the values of defaultedValues out of v into the map it returns, dropping
// maps of v they leave empty.
func splitDefaulted(v map[string]any) map[string]any {
	out := map[string]any{}
	for _, p := range defaultedValues {
		src, dst := v, out
		var parents []map[string]any
		for _, k := range p[:len(p)-1] {
			next, ok := src[k].(map[string]any)
			if !ok {
				src = nil
				break
			}
			parents = append(parents, src)
			src = next
			d, ok := dst[k].(map[string]any)
			if !ok {
				d = map[string]any{}
				dst[k] = d
			}
			dst = d
		}
		last := p[len(p)-1]
		if src == nil {
			continue
		}
		if val, ok := src[last]; ok {
			dst[last] = val
			delete(src, last)
		}
		// Drop the maps the move emptied, innermost first.
		for i := len(parents) - 1; i >= 0; i-- {
			if m, ok := parents[i][p[i]].(map[string]any); ok && len(m) == 0 {
				delete(parents[i], p[i])
			}
		}
	}
	return nonEmptyDeep(out)
}

// nonEmptyDeep drops empty maps at any depth (nil when nothing is left).
func nonEmptyDeep(m map[string]any) map[string]any {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			if sub = nonEmptyDeep(sub); sub == nil {
				delete(m, k)
			} else {
				m[k] = sub
			}
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// valuesReader turns framework values into chart values, remembering whether any was unknown.
// Null and empty values become nil, which nonEmpty drops, so the chart's defaults apply.
type valuesReader struct {
	unknown bool
	err     error
}

func (r *valuesReader) str(v types.String) any {
	if v.IsUnknown() {
		r.unknown = true
		return nil
	}
	if v.IsNull() || v.ValueString() == "" {
		return nil
	}
	return v.ValueString()
}

func (r *valuesReader) int(v types.Int64) any {
	if v.IsUnknown() {
		r.unknown = true
		return nil
	}
	if v.IsNull() {
		return nil
	}
	return v.ValueInt64()
}

func (r *valuesReader) boolean(v types.Bool) any {
	if v.IsUnknown() {
		r.unknown = true
		return nil
	}
	if v.IsNull() {
		return nil
	}
	return v.ValueBool()
}

func (r *valuesReader) elements(v types.Map) map[string]string {
	if v.IsUnknown() {
		r.unknown = true
		return nil
	}
	out := map[string]string{}
	for k, e := range v.Elements() {
		s, ok := e.(types.String)
		if !ok || s.IsUnknown() {
			r.unknown = true
			continue
		}
		out[k] = s.ValueString()
	}
	return out
}

// strMap returns a map[string]any (Helm merges only maps of that type with the chart defaults).
func (r *valuesReader) strMap(v types.Map) any {
	els := r.elements(v)
	if len(els) == 0 {
		return nil
	}
	out := make(map[string]any, len(els))
	for k, s := range els {
		out[k] = s
	}
	return out
}

// nonEmpty drops nil values and empty maps, so unset attributes leave the chart's defaults alone.
func nonEmpty(m map[string]any) map[string]any {
	for k, v := range m {
		switch t := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			if len(t) == 0 {
				delete(m, k)
			}
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// jsonListValidator checks that a string is a JSON list.
func jsonListValidator() validator.String {
	return stringCheck{
		summary:     "Invalid JSON List",
		description: "must be a JSON list; build it with jsonencode([...])",
		check: func(s string) error {
			var list []any
			if err := json.Unmarshal([]byte(s), &list); err != nil {
				return fmt.Errorf("not a JSON list; build it with jsonencode([...]): %w", err)
			}
			return nil
		},
	}
}

// valuesValidator checks that a string is a YAML or JSON map of chart values.
func valuesValidator() validator.String {
	return stringCheck{
		summary:     "Invalid Chart Values",
		description: "must be a YAML or JSON map of chart values",
		check: func(s string) error {
			_, err := helm.ParseValues(s)
			return err
		},
	}
}

// stringMapValue converts a Go map into a framework map of strings (null when empty).
func stringMapValue(m map[string]string) (types.Map, diag.Diagnostics) {
	if len(m) == 0 {
		return types.MapNull(types.StringType), nil
	}
	els := make(map[string]attr.Value, len(m))
	for k, v := range m {
		els[k] = types.StringValue(v)
	}
	return types.MapValue(types.StringType, els)
}
