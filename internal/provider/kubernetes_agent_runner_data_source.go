package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Ensure provider defined types fully satisfy framework interfaces.
var _ datasource.DataSourceWithConfigure = (*kubernetesAgentRunnerDataSource)(nil)

// NewKubernetesAgentRunnerDataSource returns the outpost_kubernetes_agent_runner data source.
func NewKubernetesAgentRunnerDataSource() datasource.DataSource {
	return &kubernetesAgentRunnerDataSource{}
}

// kubernetesAgentRunnerDataSource reads a registered runner by id.
type kubernetesAgentRunnerDataSource struct {
	data *providerData
}

func (d *kubernetesAgentRunnerDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_kubernetes_agent_runner"
}

func (d *kubernetesAgentRunnerDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	computed := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{MarkdownDescription: desc, Computed: true}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "Reads a runner of type `kubernetes-agent` registered with the Outpost orchestrator, including " +
			"whether its agent is connected.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "Id of the runner.",
				Required:            true,
				Validators:          []validator.String{idValidator()},
			},
			"org_id":      computed("Organisation the runner is registered in: the provider's `org_id`."),
			"description": computed("Free-text description."),
			"public_keys": schema.ListAttribute{
				MarkdownDescription: "The runner's ed25519 public keys in PEM form.",
				ElementType:         types.StringType,
				Computed:            true,
			},
			"job": schema.SingleNestedAttribute{
				MarkdownDescription: "Where and as whom the runner's deployments run, and the settings of their pods (see the " +
					"`outpost_kubernetes_agent_runner` resource).",
				Computed: true,
				Attributes: withComputedJobPodAttributes(map[string]schema.Attribute{
					"namespace":       computed("Namespace of the deployment Jobs."),
					"service_account": computed("Service account of the deployment Jobs."),
					"pod_template": schema.StringAttribute{
						MarkdownDescription: "Pod template of the Jobs as JSON; null when the agent's defaults apply.",
						CustomType:          podTemplateType{},
						Computed:            true,
					},
				}),
			},
			"state_storage_id": computed("Id of the runner's state storage."),
			"max_concurrency": schema.Int64Attribute{
				MarkdownDescription: "How many deployments the agent runs at once.",
				Computed:            true,
			},
			"require_approval": schema.BoolAttribute{
				MarkdownDescription: "Whether applies and destroys run on the runner only as the apply of an approved saved plan.",
				Computed:            true,
			},
			"job_timeout": schema.StringAttribute{
				MarkdownDescription: "Longest time one deployment may run, e.g. `1h`.",
				CustomType:          durationType{},
				Computed:            true,
			},
			"status":                computed("`connected` or `disconnected`."),
			"last_seen_at":          computed("Time (RFC 3339) of the agent's last authenticated request; null if it never connected."),
			"agent_version":         computed("Version the agent reported; null if it never connected."),
			"agent_key_fingerprint": computed("SHA-256 fingerprint of the key the agent last signed with; null if it never connected."),
		},
	}
}

func (d *kubernetesAgentRunnerDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	data, diags := providerDataFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	d.data = data
}

func (d *kubernetesAgentRunnerDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var config runnerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	client, diags := d.data.adminClient()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	id := config.ID.ValueString()
	got, err := client.GetRunner(ctx, id)
	if errors.Is(err, api.ErrNotFound) {
		addNotRegistered(&resp.Diagnostics, "Runner Not Found", "runner", "outpost_kubernetes_agent_runner", id, client.Org(), err)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Unable to Read Runner", fmt.Sprintf("read runner %q", id), err, "")
		return
	}
	tflog.Debug(ctx, "read runner", map[string]any{"runner_id": id})
	state, diags := runnerModelFromAPI(got, client.Org(), nil)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}
