package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Ensure provider defined types fully satisfy framework interfaces.
var (
	_ resource.ResourceWithConfigure   = (*kubernetesAgentRunnerResource)(nil)
	_ resource.ResourceWithImportState = (*kubernetesAgentRunnerResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*kubernetesAgentRunnerResource)(nil)

	_ resource.ResourceWithValidateConfig = (*kubernetesAgentRunnerResource)(nil)
)

// NewKubernetesAgentRunnerResource returns the outpost_kubernetes_agent_runner resource.
func NewKubernetesAgentRunnerResource() resource.Resource {
	return &kubernetesAgentRunnerResource{}
}

// kubernetesAgentRunnerResource registers a runner of type kubernetes-agent with the
// orchestrator. Schema in kubernetes_agent_runner_resource_schema.go, model and API mapping in
// _model.go, CRUD in _crud.go.
type kubernetesAgentRunnerResource struct {
	data *providerData
}

func (r *kubernetesAgentRunnerResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_kubernetes_agent_runner"
}

func (r *kubernetesAgentRunnerResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	data, diags := providerDataFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	r.data = data
}

// ImportState imports a runner by its id; Read fills in the rest.
func (r *kubernetesAgentRunnerResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

// ValidateConfig checks the job pod settings together (a mount names a volume of the settings or
// of the pod template) with the orchestrator's own checks; the schema validators check each
// attribute alone.
func (r *kubernetesAgentRunnerResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var job types.Object
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("job"), &job)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(validateJobPod(ctx, job)...)
}

// ModifyPlan keeps the state as the plan when no input changed (every attribute the schema lets a
// configuration set; sameInputs derives the list from the schema). The framework marks the computed
// attributes (status, last_seen_at, ...) unknown as soon as the configuration differs from the
// state, even when the attribute plan modifiers then find the difference to be mere spelling (a
// reformatted pod template); without this, such a configuration would plan an empty update.
//
// Every change of a runner calls the orchestrator, so a missing orchestrator setting fails here.
func (r *kubernetesAgentRunnerResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	resp.Diagnostics.Append(r.data.missingSettings()...)
	if resp.Diagnostics.HasError() || req.Plan.Raw.IsNull() {
		return
	}
	if req.State.Raw.IsNull() {
		// A new runner is registered in the provider's organisation.
		if r.data != nil {
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("org_id"), providerSetting(r.data, "org_id", r.data.orgID))...)
		}
		return
	}
	same, err := sameInputs(ctx, req.Plan, req.State)
	if err != nil {
		resp.Diagnostics.AddError("Unable to Compare Plan and State",
			"This is always a bug in the provider code and should be reported to the provider developers.\n\nOriginal error: "+err.Error())
		return
	}
	if same {
		resp.Plan.Raw = req.State.Raw.Copy()
	}
}
