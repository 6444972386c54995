package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Ensure provider defined types fully satisfy framework interfaces.
var _ datasource.DataSourceWithConfigure = (*stateStorageDataSource)(nil)

// NewStateStorageDataSource returns the outpost_state_storage data source.
func NewStateStorageDataSource() datasource.DataSource {
	return &stateStorageDataSource{}
}

// stateStorageDataSource reads a registered state storage by id.
type stateStorageDataSource struct {
	data *providerData
}

func (d *stateStorageDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_state_storage"
}

func (d *stateStorageDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	computed := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{MarkdownDescription: desc, Computed: true}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "Reads a state storage registered with the Outpost orchestrator, for example one managed in another configuration.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "Id of the state storage.",
				Required:            true,
				Validators:          []validator.String{idValidator()},
			},
			"type":        computed("Kind of storage: `kubernetes`, `s3`, `gcs` or `azurerm`."),
			"description": computed("Free-text description."),
			"kubernetes": schema.SingleNestedAttribute{
				MarkdownDescription: "Settings of a `kubernetes` storage; null for other types.",
				Computed:            true,
				Attributes: map[string]schema.Attribute{
					"namespace": computed("Namespace whose Secrets hold the states."),
				},
			},
			"s3": schema.SingleNestedAttribute{
				MarkdownDescription: "Settings of an `s3` storage; null for other types.",
				Computed:            true,
				Attributes: map[string]schema.Attribute{
					"bucket":      computed("Name of the bucket."),
					"region":      computed("Region of the bucket."),
					"path_prefix": computed("Prefix of the state objects' keys."),
				},
			},
			"gcs": schema.SingleNestedAttribute{
				MarkdownDescription: "Settings of a `gcs` storage; null for other types.",
				Computed:            true,
				Attributes: map[string]schema.Attribute{
					"bucket":      computed("Name of the bucket."),
					"path_prefix": computed("Prefix of the state objects' names."),
				},
			},
			"azurerm": schema.SingleNestedAttribute{
				MarkdownDescription: "Settings of an `azurerm` storage; null for other types.",
				Computed:            true,
				Attributes: map[string]schema.Attribute{
					"storage_account_name": computed("Name of the storage account."),
					"container_name":       computed("Name of the blob container."),
					"resource_group_name":  computed("Resource group of the storage account."),
					"path_prefix":          computed("Prefix of the state blobs' names."),
				},
			},
		},
	}
}

func (d *stateStorageDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	data, diags := providerDataFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	d.data = data
}

func (d *stateStorageDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var config stateStorageModel
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
	got, err := client.GetStateStorage(ctx, id)
	if errors.Is(err, api.ErrNotFound) {
		addNotRegistered(&resp.Diagnostics, "State Storage Not Found", "state storage", "outpost_state_storage", id, client.Org(), err)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Unable to Read State Storage", fmt.Sprintf("read state storage %q", id), err, "")
		return
	}
	tflog.Debug(ctx, "read state storage", map[string]any{"state_storage_id": id})
	resp.Diagnostics.Append(resp.State.Set(ctx, stateStorageModelFromAPI(got))...)
}
