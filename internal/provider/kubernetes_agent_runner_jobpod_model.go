package provider

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// jobPodModel holds the job pod settings of the job block (embedded in runnerJobModel). Lists
// and maps are never empty (the schema asks for at least one element), so nil is null both ways.
type jobPodModel struct {
	Resources         *jobResourcesModel   `tfsdk:"resources"`
	NodeSelector      map[string]string    `tfsdk:"node_selector"`
	Tolerations       []jobTolerationModel `tfsdk:"tolerations"`
	Affinity          jsonValue            `tfsdk:"affinity"`
	Env               []jobEnvModel        `tfsdk:"env"`
	Labels            map[string]string    `tfsdk:"labels"`
	Annotations       map[string]string    `tfsdk:"annotations"`
	Volumes           jsonValue            `tfsdk:"volumes"`
	VolumeMounts      []jobMountModel      `tfsdk:"volume_mounts"`
	PriorityClassName types.String         `tfsdk:"priority_class_name"`
}

type jobResourcesModel struct {
	Requests map[string]string `tfsdk:"requests"`
	Limits   map[string]string `tfsdk:"limits"`
}

type jobTolerationModel struct {
	Key               types.String `tfsdk:"key"`
	Operator          types.String `tfsdk:"operator"`
	Value             types.String `tfsdk:"value"`
	Effect            types.String `tfsdk:"effect"`
	TolerationSeconds types.Int64  `tfsdk:"toleration_seconds"`
}

type jobEnvModel struct {
	Name            types.String    `tfsdk:"name"`
	Value           types.String    `tfsdk:"value"`
	SecretKeyRef    *jobKeyRefModel `tfsdk:"secret_key_ref"`
	ConfigMapKeyRef *jobKeyRefModel `tfsdk:"config_map_key_ref"`
}

type jobKeyRefModel struct {
	Name     types.String `tfsdk:"name"`
	Key      types.String `tfsdk:"key"`
	Optional types.Bool   `tfsdk:"optional"`
}

type jobMountModel struct {
	Name      types.String `tfsdk:"name"`
	MountPath types.String `tfsdk:"mount_path"`
	SubPath   types.String `tfsdk:"sub_path"`
	ReadOnly  types.Bool   `tfsdk:"read_only"`
}

// toAPI returns the settings as the API carries them; nil when none is set.
func (m jobPodModel) toAPI() *api.JobPod {
	p := &api.JobPod{
		NodeSelector: m.NodeSelector, Labels: m.Labels, Annotations: m.Annotations,
		Affinity: m.Affinity.ValueString(), Volumes: m.Volumes.ValueString(), PriorityClassName: m.PriorityClassName.ValueString(),
	}
	if m.Resources != nil {
		p.Resources = &api.JobResources{Requests: m.Resources.Requests, Limits: m.Resources.Limits}
	}
	for _, t := range m.Tolerations {
		jt := api.JobToleration{Key: t.Key.ValueString(), Operator: t.Operator.ValueString(), Value: t.Value.ValueString(), Effect: t.Effect.ValueString()}
		if !t.TolerationSeconds.IsNull() && !t.TolerationSeconds.IsUnknown() {
			jt.TolerationSeconds = t.TolerationSeconds.ValueInt64Pointer()
		}
		p.Tolerations = append(p.Tolerations, jt)
	}
	for _, e := range m.Env {
		p.Env = append(p.Env, api.JobEnvVar{Name: e.Name.ValueString(), Value: e.Value.ValueString(),
			SecretKeyRef: e.SecretKeyRef.toAPI(), ConfigMapKeyRef: e.ConfigMapKeyRef.toAPI()})
	}
	for _, v := range m.VolumeMounts {
		p.VolumeMounts = append(p.VolumeMounts, api.JobVolumeMount{Name: v.Name.ValueString(), MountPath: v.MountPath.ValueString(),
			SubPath: v.SubPath.ValueString(), ReadOnly: v.ReadOnly.ValueBool()})
	}
	if pod, err := podtemplate.NormalizePod(p); err == nil {
		return pod
	}
	return p // JSON that does not parse: the orchestrator's answer names it
}

func (r *jobKeyRefModel) toAPI() *api.JobKeyRef {
	if r == nil {
		return nil
	}
	return &api.JobKeyRef{Name: r.Name.ValueString(), Key: r.Key.ValueString(), Optional: r.Optional.ValueBool()}
}

// jobPodModelFromAPI maps the settings the orchestrator returned onto the model.
func jobPodModelFromAPI(p *api.JobPod) jobPodModel {
	m := jobPodModel{Affinity: newJSONValue(""), Volumes: newJSONValue(""), PriorityClassName: types.StringNull()}
	if p == nil {
		return m
	}
	m.NodeSelector, m.Labels, m.Annotations = p.NodeSelector, p.Labels, p.Annotations
	m.Affinity, m.Volumes = newJSONValue(p.Affinity), newJSONValue(p.Volumes)
	m.PriorityClassName = optionalString(p.PriorityClassName)
	if p.Resources != nil {
		m.Resources = &jobResourcesModel{Requests: p.Resources.Requests, Limits: p.Resources.Limits}
	}
	for _, t := range p.Tolerations {
		m.Tolerations = append(m.Tolerations, jobTolerationModel{Key: optionalString(t.Key), Operator: optionalString(t.Operator),
			Value: optionalString(t.Value), Effect: optionalString(t.Effect), TolerationSeconds: types.Int64PointerValue(t.TolerationSeconds)})
	}
	for _, e := range p.Env {
		m.Env = append(m.Env, jobEnvModel{Name: types.StringValue(e.Name), Value: optionalString(e.Value),
			SecretKeyRef: keyRefFromAPI(e.SecretKeyRef), ConfigMapKeyRef: keyRefFromAPI(e.ConfigMapKeyRef)})
	}
	for _, v := range p.VolumeMounts {
		m.VolumeMounts = append(m.VolumeMounts, jobMountModel{Name: types.StringValue(v.Name), MountPath: types.StringValue(v.MountPath),
			SubPath: optionalString(v.SubPath), ReadOnly: types.BoolValue(v.ReadOnly)})
	}
	return m
}

func keyRefFromAPI(r *api.JobKeyRef) *jobKeyRefModel {
	if r == nil {
		return nil
	}
	return &jobKeyRefModel{Name: types.StringValue(r.Name), Key: types.StringValue(r.Key), Optional: types.BoolValue(r.Optional)}
}

// validateJobPod checks the job pod settings of a configuration with the orchestrator's own
// checks (podtemplate.ValidatePod), so a bad setting fails at plan time with the words the
// orchestrator would use. Attributes not yet known are left out; a mount is checked only when
// the volumes it may name are all known.
func validateJobPod(ctx context.Context, job types.Object) diag.Diagnostics {
	var diags diag.Diagnostics
	if job.IsNull() || job.IsUnknown() {
		return diags
	}
	known := map[string]attr.Value{}
	attrTypes := job.AttributeTypes(ctx)
	for name, v := range job.Attributes() {
		tv, err := v.ToTerraformValue(ctx)
		if err == nil && tv.IsFullyKnown() {
			known[name] = v
			continue
		}
		null, err := attrTypes[name].ValueFromTerraform(ctx, tftypes.NewValue(attrTypes[name].TerraformType(ctx), nil))
		if err != nil {
			diags.AddError("Unable to Validate Job Settings", "This is always a bug in the provider code and should be reported to the provider developers.\n\nOriginal error: "+err.Error())
			return diags
		}
		known[name] = null
	}
	volumesKnown := !job.Attributes()["volumes"].IsUnknown() && !job.Attributes()["pod_template"].IsUnknown()
	obj, d := basetypes.NewObjectValue(attrTypes, known)
	diags.Append(d...)
	if diags.HasError() {
		return diags
	}
	var m runnerJobModel
	diags.Append(obj.As(ctx, &m, basetypes.ObjectAsOptions{})...)
	if diags.HasError() {
		return diags
	}
	pod := m.jobPodModel
	if r := pod.Resources; r != nil && r.Requests == nil && r.Limits == nil && job.Attributes()["resources"].Equal(known["resources"]) {
		diags.AddAttributeError(path.Root("job").AtName("resources"), "Invalid Job Setting", "set requests, limits or both; or leave resources out")
		return diags
	}
	if !volumesKnown {
		pod.VolumeMounts = nil
	}
	err := podtemplate.ValidatePod("job.pod", pod.toAPI(), m.PodTemplate.ValueString())
	var fe *api.FieldError
	if errors.As(err, &fe) {
		diags.AddAttributeError(jobPodPath(fe.Field), "Invalid Job Setting", fe.Message)
	}
	return diags
}

var fieldStep = regexp.MustCompile(`^([a-z_]+)(?:\[(\d+)\])?`)

// jobPodPath turns an API field ("job.pod.env[1].name") into the attribute path of the job
// block it came from (job.env[1]); the message names the rest.
func jobPodPath(field string) path.Path {
	p := path.Root("job")
	rest := strings.TrimPrefix(field, "job.pod.")
	m := fieldStep.FindStringSubmatch(rest)
	if m == nil {
		return p
	}
	p = p.AtName(m[1])
	if m[2] != "" {
		if i, err := strconv.Atoi(m[2]); err == nil {
			p = p.AtListIndex(i)
		}
	}
	return p
}
