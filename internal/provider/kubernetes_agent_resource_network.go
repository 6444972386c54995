package provider

import (
	"encoding/json"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// The network_policy block of outpost_kubernetes_agent: the chart's NetworkPolicies (values
// networkPolicy.*), which keep job pods from the cloud metadata service and let only job pods
// reach the agent's state port and only what the cluster owner lists reach its metrics port.

// networkPolicyModel maps the network_policy block.
type networkPolicyModel struct {
	Enabled      types.Bool   `tfsdk:"enabled"`
	BlockedCIDRs types.List   `tfsdk:"blocked_cidrs"` //< string
	MetricsFrom  types.String `tfsdk:"metrics_from"`
	ExtraEgress  types.String `tfsdk:"extra_egress"`
}

func networkPolicyBlock() schema.SingleNestedBlock {
	jsonList := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{MarkdownDescription: desc, Optional: true, Validators: []validator.String{jsonListValidator()}}
	}
	return schema.SingleNestedBlock{
		MarkdownDescription: "The chart's NetworkPolicies (they need a CNI that enforces NetworkPolicies). In `job_namespace`, job pods may " +
			"reach anything but `blocked_cidrs` (the cloud metadata service, so a Terraform run cannot borrow the node's cloud identity); " +
			"in `namespace`, the agent's state port takes only this runner's job pods (and the other replica), its metrics port only " +
			"`metrics_from`. Unset attributes keep the chart's defaults (all on).",
		Attributes: map[string]schema.Attribute{
			"enabled": schema.BoolAttribute{
				MarkdownDescription: "Create the NetworkPolicies. Defaults to `true`.",
				Optional:            true,
			},
			"blocked_cidrs": schema.ListAttribute{
				MarkdownDescription: "Destinations job pods may not reach. Defaults to the cloud metadata addresses `[\"169.254.169.254/32\", \"fd00:ec2::254/128\"]`; " +
					"setting it replaces them.",
				ElementType: types.StringType,
				Optional:    true,
			},
			"metrics_from": jsonList("Who may reach the agent's metrics port (9090), as a JSON list of Kubernetes NetworkPolicyPeer objects " +
				"(use `jsonencode`), e.g. `jsonencode([{ namespaceSelector = { matchLabels = { \"kubernetes.io/metadata.name\" = \"monitoring\" } } }])`. " +
				"Unset: nobody but the node (the kubelet's probes)."),
			"extra_egress": jsonList("Extra egress rules for the job pods, as a JSON list of Kubernetes NetworkPolicyEgressRule objects " +
				"(use `jsonencode`), e.g. to let them reach the GKE metadata server under Workload Identity."),
		},
	}
}

// chartValues are the networkPolicy chart values of the block.
func (n *networkPolicyModel) chartValues(r *valuesReader) map[string]any {
	if n == nil {
		return nil
	}
	return nonEmpty(map[string]any{
		"enabled":      r.boolean(n.Enabled),
		"blockedCIDRs": r.strList(n.BlockedCIDRs),
		"metricsFrom":  r.namedJSONList("network_policy.metrics_from", n.MetricsFrom),
		"extraEgress":  r.namedJSONList("network_policy.extra_egress", n.ExtraEgress),
	})
}

// namedJSONList reads a JSON list attribute into chart values (nil when unset or empty).
func (r *valuesReader) namedJSONList(name string, v types.String) any {
	s, ok := r.str(v).(string)
	if !ok {
		return nil
	}
	var list []any
	if err := json.Unmarshal([]byte(s), &list); err != nil {
		r.err = fmt.Errorf("%s: %w", name, err)
		return nil
	}
	if len(list) == 0 {
		return nil
	}
	return list
}

// networkPolicyFromValues is the block an imported release's values describe (nil when they set
// none).
func networkPolicyFromValues(v valuesView, diags *diag.Diagnostics) *networkPolicyModel {
	np := v.sub("networkPolicy")
	if len(np) == 0 {
		return nil
	}
	m := &networkPolicyModel{Enabled: types.BoolNull(), BlockedCIDRs: types.ListNull(types.StringType),
		MetricsFrom: types.StringNull(), ExtraEgress: types.StringNull()}
	if b, ok := np["enabled"].(bool); ok {
		m.Enabled = types.BoolValue(b)
	}
	m.BlockedCIDRs = stringListFromValues(np["blockedCIDRs"], diags)
	asJSON := func(k string) types.String {
		if l, ok := np[k].([]any); ok && len(l) > 0 {
			if b, err := json.Marshal(l); err == nil {
				return types.StringValue(string(b))
			}
		}
		return types.StringNull()
	}
	m.MetricsFrom, m.ExtraEgress = asJSON("metricsFrom"), asJSON("extraEgress")
	return m
}

// stringListFromValues reads a chart values list of strings back into a list attribute (null
// when absent or empty).
func stringListFromValues(v any, diags *diag.Diagnostics) types.List {
	l, _ := v.([]any)
	if len(l) == 0 {
		return types.ListNull(types.StringType)
	}
	els := make([]attr.Value, 0, len(l))
	for _, e := range l {
		if s, ok := e.(string); ok {
			els = append(els, types.StringValue(s))
		}
	}
	out, d := types.ListValue(types.StringType, els)
	diags.Append(d...)
	return out
}
