package provider

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// The job pod policy of outpost_kubernetes_agent: what the cluster owner lets a runner's pod
// template ask for (chart values jobs.policy.*, jobs.serviceAccount.automountToken and
// jobs.podTemplate). The agent enforces it on every Job; the provider passes it on and labels the
// namespaces it creates for the Pod Security level the policy needs.

// jobPodPolicyModel maps the job_pod_policy block.
type jobPodPolicyModel struct {
	AllowHostNamespaces      types.Bool   `tfsdk:"allow_host_namespaces"`
	AllowPrivileged          types.Bool   `tfsdk:"allow_privileged"`
	AllowPrivilegeEscalation types.Bool   `tfsdk:"allow_privilege_escalation"`
	AllowRunAsRoot           types.Bool   `tfsdk:"allow_run_as_root"`
	AllowNodeName            types.Bool   `tfsdk:"allow_node_name"`
	AllowServiceAccountToken types.Bool   `tfsdk:"allow_service_account_token"`
	AllowedCapabilities      types.List   `tfsdk:"allowed_capabilities"` //< string
	AllowedVolumeTypes       types.List   `tfsdk:"allowed_volume_types"` //< string
	AllowedSecrets           types.List   `tfsdk:"allowed_secrets"`      //< string
	AllowedConfigMaps        types.List   `tfsdk:"allowed_config_maps"`  //< string
	PodSecurityLevel         types.String `tfsdk:"pod_security_level"`
	AllowedSysctls           types.List   `tfsdk:"allowed_sysctls"` //< string
	AllowClaimSources        types.Bool   `tfsdk:"allow_claim_sources"`
	AllowedClaims            types.List   `tfsdk:"allowed_claims"`           //< string
	AllowedPriorityClasses   types.List   `tfsdk:"allowed_priority_classes"` //< string
	AllowTolerateAll         types.Bool   `tfsdk:"allow_tolerate_all"`
	AllowedRuntimeClasses    types.List   `tfsdk:"allowed_runtime_classes"` //< string
	AllowAgentLabels         types.Bool   `tfsdk:"allow_agent_labels"`
	PodTemplate              types.String `tfsdk:"pod_template"`
}

func jobPodPolicyBlock() schema.SingleNestedBlock {
	flag := func(desc string) schema.BoolAttribute {
		return schema.BoolAttribute{MarkdownDescription: desc + " Defaults to `false`.", Optional: true}
	}
	list := func(desc string) schema.ListAttribute {
		return schema.ListAttribute{MarkdownDescription: desc, ElementType: types.StringType, Optional: true}
	}
	return schema.SingleNestedBlock{
		MarkdownDescription: "The job pod policy the agent enforces on the final pod of every Job, init containers included, " +
			"whatever pod template the orchestrator sends. By default it is Pod Security `restricted`: a claim whose pod asks for more " +
			"fails its deployment (reason `pod_policy`) with a message naming the field and the setting that would allow it, and " +
			"nothing is created. Namespaces this resource creates are labelled `pod-security.kubernetes.io/enforce` with the level " +
			"the policy needs (`restricted` unless something here is allowed).",
		Attributes: map[string]schema.Attribute{
			"allow_host_namespaces":       flag("Allow `hostPID`, `hostNetwork`, `hostIPC` and host ports."),
			"allow_privileged":            flag("Allow privileged containers, host processes, unmasked `/proc`, unconfined seccomp or AppArmor and custom SELinux options."),
			"allow_privilege_escalation":  flag("Allow `allowPrivilegeEscalation: true`."),
			"allow_run_as_root":           flag("Allow uid 0 and `runAsNonRoot: false`."),
			"allow_node_name":             flag("Allow `spec.nodeName`, which bypasses the scheduler."),
			"allow_service_account_token": flag("Mount a Kubernetes API token of the Jobs' service account into job pods (chart value `jobs.serviceAccount.automountToken`)."),
			"allowed_capabilities":        list("Capabilities containers may add, e.g. `[\"NET_BIND_SERVICE\"]`."),
			"allowed_volume_types":        list("Volume types allowed besides configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected and secret, e.g. `[\"hostPath\"]`."),
			"allowed_secrets":             list("Secrets of `job_namespace` job pods may read (volumes, env, envFrom), besides the agent's own."),
			"allowed_config_maps":         list("ConfigMaps of `job_namespace` job pods may read; `kube-root-ca.crt` is always allowed."),
			"pod_security_level": schema.StringAttribute{
				MarkdownDescription: "The Pod Security level (`restricted`, `baseline`, `privileged`) at which the agent checks every job pod with " +
					"Kubernetes' own Pod Security evaluator, on top of this policy's rules, and which namespaces this resource creates are labelled " +
					"with. Defaults to the level the relaxations here need: `restricted` when nothing is allowed.",
				Optional:   true,
				Validators: []validator.String{stringvalidator.OneOf(podSecurityRestricted, podSecurityBaseline, podSecurityPrivileged)},
			},
			"allowed_sysctls":          list("Sysctls job pods may set (`securityContext.sysctls`), e.g. `[\"net.ipv4.tcp_keepalive_time\"]`."),
			"allow_claim_sources":      flag("Allow ephemeral volume claim templates with `volumeName`, `dataSource` or `dataSourceRef`, which bind an existing volume or clone another claim or a snapshot."),
			"allowed_claims":           list("PersistentVolumeClaims of `job_namespace` job pods may mount by name."),
			"allowed_priority_classes": list("PriorityClasses job pods may name. By default none: job pods keep the default priority and preempt nothing."),
			"allow_tolerate_all":       flag("Allow a toleration without `key` and with `operator: Exists`, which tolerates every taint."),
			"allowed_runtime_classes":  list("RuntimeClasses job pods may name."),
			"allow_agent_labels":       flag("Allow job pod labels that match the agent Service's selector (the job pod would receive the state backend's traffic)."),
			"pod_template": schema.StringAttribute{
				MarkdownDescription: "Pins the pod template of every Job (a JSON Kubernetes PodTemplateSpec with a container named `main`; " +
					"use `jsonencode`): the runner's template from the orchestrator is then ignored.",
				Optional:   true,
				Validators: []validator.String{podTemplateValidator()},
			},
		},
	}
}

// chartValues are the chart values of the block: jobs.policy, and the service account token and
// pinned template beside it.
func (p *jobPodPolicyModel) chartValues(r *valuesReader) (policy map[string]any, automount, template any) {
	if p == nil {
		return nil, nil, nil
	}
	policy = nonEmpty(map[string]any{
		"allowHostNamespaces": r.boolean(p.AllowHostNamespaces), "allowPrivileged": r.boolean(p.AllowPrivileged),
		"allowPrivilegeEscalation": r.boolean(p.AllowPrivilegeEscalation), "allowRunAsRoot": r.boolean(p.AllowRunAsRoot),
		"allowNodeName": r.boolean(p.AllowNodeName), "allowedCapabilities": r.strList(p.AllowedCapabilities),
		"allowedVolumeTypes": r.strList(p.AllowedVolumeTypes), "allowedSecrets": r.strList(p.AllowedSecrets),
		"allowedConfigMaps": r.strList(p.AllowedConfigMaps), "podSecurityLevel": r.str(p.PodSecurityLevel),
		"allowedSysctls": r.strList(p.AllowedSysctls), "allowClaimSources": r.boolean(p.AllowClaimSources),
		"allowedClaims": r.strList(p.AllowedClaims), "allowedPriorityClasses": r.strList(p.AllowedPriorityClasses),
		"allowTolerateAll": r.boolean(p.AllowTolerateAll), "allowedRuntimeClasses": r.strList(p.AllowedRuntimeClasses),
		"allowAgentLabels": r.boolean(p.AllowAgentLabels),
	})
	if s, ok := r.str(p.PodTemplate).(string); ok {
		var tpl map[string]any
		if err := json.Unmarshal([]byte(s), &tpl); err != nil {
			r.err = fmt.Errorf("job_pod_policy.pod_template: %w", err)
		} else {
			template = tpl
		}
	}
	return policy, r.boolean(p.AllowServiceAccountToken), template
}

// strList turns a list of strings into chart values (nil when empty, so the chart's default
// applies).
func (r *valuesReader) strList(v types.List) any {
	if v.IsUnknown() {
		r.unknown = true
		return nil
	}
	var out []any
	for _, e := range v.Elements() {
		s, ok := e.(types.String)
		if !ok || s.IsUnknown() {
			r.unknown = true
			continue
		}
		out = append(out, s.ValueString())
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Pod Security Standards levels, as the namespace label takes them.
const (
	podSecurityRestricted = "restricted"
	podSecurityBaseline   = "baseline"
	podSecurityPrivileged = "privileged"
	labelPodSecurity      = "pod-security.kubernetes.io/enforce"
)

// jobsPodSecurityLevel is the Pod Security level the jobs namespace needs for what the final
// chart values' policy allows: the API server must admit what the agent's policy lets through.
// It is the level the agent checks job pods at (kubernetes.Policy.Level in the agent): the
// configured one, else the one the relaxations need.
func jobsPodSecurityLevel(vals map[string]any) string {
	jobs, _ := vals["jobs"].(map[string]any)
	p, _ := jobs["policy"].(map[string]any)
	on := func(k string) bool { b, _ := p[k].(bool); return b }
	listed := func(k string) []any { l, _ := p[k].([]any); return l }
	if level, _ := p["podSecurityLevel"].(string); level != "" {
		return level
	}
	switch {
	case on("allowHostNamespaces"), on("allowPrivileged"), len(listed("allowedCapabilities")) > 0, slices.Contains(listed("allowedVolumeTypes"), any("hostPath")),
		!safeSysctls(listed("allowedSysctls")):
		return podSecurityPrivileged
	case on("allowRunAsRoot"), on("allowPrivilegeEscalation"), len(listed("allowedVolumeTypes")) > 0:
		return podSecurityBaseline
	}
	return podSecurityRestricted
}

// policyFromValues is the block an imported release's values describe (nil when they set none).
func policyFromValues(v valuesView, diags *diag.Diagnostics) *jobPodPolicyModel {
	jobs := v.sub("jobs")
	p := jobs.sub("policy")
	automount, hasToken := jobs.sub("serviceAccount")["automountToken"].(bool)
	tpl := jobs.sub("podTemplate")
	if len(p) == 0 && !hasToken && len(tpl) == 0 {
		return nil
	}
	flag := func(k string) types.Bool {
		if b, ok := p[k].(bool); ok {
			return types.BoolValue(b)
		}
		return types.BoolNull()
	}
	list := func(k string) types.List { return stringListFromValues(p[k], diags) }
	m := &jobPodPolicyModel{
		AllowHostNamespaces: flag("allowHostNamespaces"), AllowPrivileged: flag("allowPrivileged"),
		AllowPrivilegeEscalation: flag("allowPrivilegeEscalation"), AllowRunAsRoot: flag("allowRunAsRoot"), AllowNodeName: flag("allowNodeName"),
		AllowServiceAccountToken: types.BoolNull(), AllowedCapabilities: list("allowedCapabilities"), AllowedVolumeTypes: list("allowedVolumeTypes"),
		AllowedSecrets: list("allowedSecrets"), AllowedConfigMaps: list("allowedConfigMaps"), PodTemplate: types.StringNull(),
		PodSecurityLevel: types.StringNull(), AllowedSysctls: list("allowedSysctls"), AllowClaimSources: flag("allowClaimSources"),
		AllowedClaims: list("allowedClaims"), AllowedPriorityClasses: list("allowedPriorityClasses"), AllowTolerateAll: flag("allowTolerateAll"),
		AllowedRuntimeClasses: list("allowedRuntimeClasses"), AllowAgentLabels: flag("allowAgentLabels"),
	}
	if level, ok := p["podSecurityLevel"].(string); ok && level != "" {
		m.PodSecurityLevel = types.StringValue(level)
	}
	if hasToken {
		m.AllowServiceAccountToken = types.BoolValue(automount)
	}
	if len(tpl) > 0 {
		if b, err := json.Marshal(tpl); err == nil {
			m.PodTemplate = types.StringValue(string(b))
		}
	}
	return m
}

// safeSysctls reports whether Pod Security baseline allows every listed sysctl, asking its own
// check, as the agent does.
func safeSysctls(listed []any) bool {
	if len(listed) == 0 {
		return true
	}
	spec := &corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{}}
	for _, v := range listed {
		s, _ := v.(string)
		spec.SecurityContext.Sysctls = append(spec.SecurityContext.Sysctls, corev1.Sysctl{Name: s})
	}
	e, err := policy.NewEvaluator([]policy.Check{policy.CheckSysctls()}, nil)
	if err != nil {
		return false
	}
	lv := psapi.LevelVersion{Level: psapi.LevelBaseline, Version: psapi.LatestVersion()}
	return policy.AggregateCheckResults(e.EvaluatePod(lv, &metav1.ObjectMeta{}, spec)).Allowed
}
