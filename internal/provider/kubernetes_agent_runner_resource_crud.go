package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

var pathJobTimeout = path.Root("job_timeout")

func (r *kubernetesAgentRunnerResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan runnerModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	client, diags := r.data.adminClient()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	in, diags := plan.toAPI(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	created, err := client.CreateRunner(ctx, in)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Unable to Register Runner", fmt.Sprintf("register runner %q", in.ID), err,
			fmt.Sprintf("A runner with id %q already exists in organisation %q. Import it (terraform import <address> %s) or choose another id.",
				in.ID, client.Org(), in.ID))
		return
	}
	tflog.Debug(ctx, "registered runner", map[string]any{"runner_id": created.ID, "public_keys": len(created.PublicKeys)})
	state, diags := runnerModelFromAPI(created, client.Org(), &plan)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *kubernetesAgentRunnerResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var prior runnerModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	client, diags := r.data.adminClient()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	got, err := client.GetRunner(ctx, prior.ID.ValueString())
	if errors.Is(err, api.ErrNotFound) {
		tflog.Warn(ctx, "runner is gone from the orchestrator; removing it from state", map[string]any{"runner_id": prior.ID.ValueString()})
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Unable to Read Runner", fmt.Sprintf("read runner %q", prior.ID.ValueString()), err, "")
		return
	}
	state, diags := runnerModelFromAPI(got, client.Org(), &prior)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *kubernetesAgentRunnerResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan runnerModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	client, diags := r.data.adminClient()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	in, diags := plan.toAPI(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	updated, err := client.UpdateRunner(ctx, in)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Unable to Update Runner", fmt.Sprintf("update runner %q", in.ID), err, "")
		return
	}
	tflog.Debug(ctx, "updated runner", map[string]any{"runner_id": updated.ID, "public_keys": len(updated.PublicKeys)})
	state, diags := runnerModelFromAPI(updated, client.Org(), &plan)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *kubernetesAgentRunnerResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state runnerModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	client, diags := r.data.adminClient()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	id := state.ID.ValueString()
	if err := client.DeleteRunner(ctx, id); err != nil && !errors.Is(err, api.ErrNotFound) {
		addAPIError(&resp.Diagnostics, "Unable to Delete Runner", fmt.Sprintf("delete runner %q", id), err, "")
		return
	}
	tflog.Debug(ctx, "deleted runner", map[string]any{"runner_id": id})
}
