package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Ensure provider defined types fully satisfy framework interfaces.
var (
	_ resource.ResourceWithConfigure      = (*stateStorageResource)(nil)
	_ resource.ResourceWithImportState    = (*stateStorageResource)(nil)
	_ resource.ResourceWithValidateConfig = (*stateStorageResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*stateStorageResource)(nil)
)

// NewStateStorageResource returns the outpost_state_storage resource.
func NewStateStorageResource() resource.Resource {
	return &stateStorageResource{}
}

// stateStorageResource registers a state storage with the orchestrator.
type stateStorageResource struct {
	data *providerData
}

// stateStorageModel maps outpost_state_storage (resource and data source).
type stateStorageModel struct {
	ID          types.String          `tfsdk:"id"`
	Type        types.String          `tfsdk:"type"`
	Description types.String          `tfsdk:"description"`
	Kubernetes  *kubernetesStateModel `tfsdk:"kubernetes"`
	S3          *s3StateModel         `tfsdk:"s3"`
	GCS         *gcsStateModel        `tfsdk:"gcs"`
	AzureRM     *azurermStateModel    `tfsdk:"azurerm"`
}

type kubernetesStateModel struct {
	Namespace types.String `tfsdk:"namespace"`
}

type s3StateModel struct {
	Bucket     types.String `tfsdk:"bucket"`
	Region     types.String `tfsdk:"region"`
	PathPrefix types.String `tfsdk:"path_prefix"`
}

type gcsStateModel struct {
	Bucket     types.String `tfsdk:"bucket"`
	PathPrefix types.String `tfsdk:"path_prefix"`
}

type azurermStateModel struct {
	StorageAccountName types.String `tfsdk:"storage_account_name"`
	ContainerName      types.String `tfsdk:"container_name"`
	ResourceGroupName  types.String `tfsdk:"resource_group_name"`
	PathPrefix         types.String `tfsdk:"path_prefix"`
}

func (r *stateStorageResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_state_storage"
}

func (r *stateStorageResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	optionalText := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{
			MarkdownDescription: desc,
			Optional:            true,
			Validators:          []validator.String{stringvalidator.LengthAtLeast(1)},
		}
	}
	// Attributes a block needs are Optional plus blockRequires: the framework would report
	// Required attributes of an absent block as missing.
	required := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{MarkdownDescription: desc + " Required in the block.", Optional: true}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "A state storage registered with the Outpost orchestrator: where the deployments of the runners " +
			"that use it keep their Terraform/OpenTofu state. Set `type` and the one block that matches it.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "Id of the state storage, unique in the organisation (a DNS-1123 label). Changing it replaces the state storage.",
				Required:            true,
				Validators:          []validator.String{idValidator()},
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"type": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("Kind of storage, one of `%s`. The block of the same name holds its settings.",
					strings.Join(api.StateStorageTypes, "`, `")),
				Required:   true,
				Validators: []validator.String{stringvalidator.OneOf(api.StateStorageTypes...)},
			},
			"description": optionalText("Free-text description, at most 1024 characters."),
		},
		Blocks: map[string]schema.Block{
			"kubernetes": schema.SingleNestedBlock{
				Validators: []validator.Object{blockRequires("namespace")},
				MarkdownDescription: "State in Kubernetes Secrets, served to the deployments by the agent (for `type = \"kubernetes\"`). " +
					"The agent chart must be given the same namespace (`outpost_kubernetes_agent.state_namespace`).",
				Attributes: map[string]schema.Attribute{
					"namespace": required("Namespace whose Secrets hold the states."),
				},
			},
			"s3": schema.SingleNestedBlock{
				Validators:          []validator.Object{blockRequires("bucket", "region")},
				MarkdownDescription: "State in an S3 bucket, Terraform's `s3` backend (for `type = \"s3\"`).",
				Attributes: map[string]schema.Attribute{
					"bucket":      required("Name of the bucket."),
					"region":      required("Region of the bucket, e.g. `eu-central-1`."),
					"path_prefix": optionalText("Prefix of the state objects' keys."),
				},
			},
			"gcs": schema.SingleNestedBlock{
				Validators:          []validator.Object{blockRequires("bucket")},
				MarkdownDescription: "State in a Google Cloud Storage bucket, Terraform's `gcs` backend (for `type = \"gcs\"`).",
				Attributes: map[string]schema.Attribute{
					"bucket":      required("Name of the bucket."),
					"path_prefix": optionalText("Prefix of the state objects' names."),
				},
			},
			"azurerm": schema.SingleNestedBlock{
				Validators:          []validator.Object{blockRequires("storage_account_name", "container_name")},
				MarkdownDescription: "State in an Azure Storage container, Terraform's `azurerm` backend (for `type = \"azurerm\"`).",
				Attributes: map[string]schema.Attribute{
					"storage_account_name": required("Name of the storage account."),
					"container_name":       required("Name of the blob container."),
					"resource_group_name":  optionalText("Resource group of the storage account."),
					"path_prefix":          optionalText("Prefix of the state blobs' names."),
				},
			},
		},
	}
}

func (r *stateStorageResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	data, diags := providerDataFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	r.data = data
}

// ModifyPlan fails the plan when an orchestrator setting is missing: every change of a state
// storage calls the orchestrator.
func (r *stateStorageResource) ModifyPlan(_ context.Context, _ resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	resp.Diagnostics.Append(r.data.missingSettings()...)
}

// ValidateConfig checks that exactly the block matching type is set, then runs the
// orchestrator's own validation so bad bucket names or prefixes fail at plan time.
func (r *stateStorageResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m stateStorageModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Type.IsNull() || m.Type.IsUnknown() {
		return
	}
	t := m.Type.ValueString()
	set := map[string]bool{
		api.StateStorageKubernetes: m.Kubernetes != nil,
		api.StateStorageS3:         m.S3 != nil,
		api.StateStorageGCS:        m.GCS != nil,
		api.StateStorageAzureRM:    m.AzureRM != nil,
	}
	if _, ok := set[t]; !ok {
		return // reported by the type validator
	}
	for _, name := range api.StateStorageTypes {
		if set[name] && name != t {
			resp.Diagnostics.AddAttributeError(path.Root(name), "Conflicting State Storage Block",
				fmt.Sprintf("The %s block is set but type is %q. Remove the %s block, or set type = %q.", name, t, name, name))
		}
	}
	if !set[t] {
		resp.Diagnostics.AddAttributeError(path.Root("type"), "Missing State Storage Block",
			fmt.Sprintf("type is %q, so the %s block is required: add %s.", t, t, stateStorageBlockExample[t]))
	}
	if resp.Diagnostics.HasError() || !m.known() {
		return
	}
	in := m.toAPI()
	if err := in.Validate(); err != nil {
		var fe *api.FieldError
		if errors.As(err, &fe) {
			if fe.Field == "id" || fe.Field == "type" {
				return // reported by the attribute's own validator
			}
			resp.Diagnostics.AddAttributeError(apiFieldPath(fe.Field), "Invalid State Storage", fe.Message)
			return
		}
		resp.Diagnostics.AddError("Invalid State Storage", err.Error())
	}
}

var stateStorageBlockExample = map[string]string{
	api.StateStorageKubernetes: `kubernetes { namespace = "outpost-state" }`,
	api.StateStorageS3:         `s3 { bucket = "my-states", region = "eu-central-1" }`,
	api.StateStorageGCS:        `gcs { bucket = "my-states" }`,
	api.StateStorageAzureRM:    `azurerm { storage_account_name = "mystates", container_name = "tfstate" }`,
}

func (r *stateStorageResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan stateStorageModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	client, diags := r.data.adminClient()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	created, err := client.CreateStateStorage(ctx, plan.toAPI())
	if err != nil {
		addAPIError(&resp.Diagnostics, "Unable to Register State Storage",
			fmt.Sprintf("register state storage %q", plan.ID.ValueString()), err,
			fmt.Sprintf("A state storage with id %q already exists in organisation %q. Import it (terraform import <address> %s) or choose another id.",
				plan.ID.ValueString(), client.Org(), plan.ID.ValueString()))
		return
	}
	tflog.Debug(ctx, "registered state storage", map[string]any{"state_storage_id": created.ID, "type": created.Type})
	resp.Diagnostics.Append(resp.State.Set(ctx, stateStorageModelFromAPI(created))...)
}

func (r *stateStorageResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state stateStorageModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	client, diags := r.data.adminClient()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	got, err := client.GetStateStorage(ctx, state.ID.ValueString())
	if errors.Is(err, api.ErrNotFound) {
		tflog.Warn(ctx, "state storage is gone from the orchestrator; removing it from state", map[string]any{"state_storage_id": state.ID.ValueString()})
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Unable to Read State Storage", fmt.Sprintf("read state storage %q", state.ID.ValueString()), err, "")
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, stateStorageModelFromAPI(got))...)
}

func (r *stateStorageResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan stateStorageModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	client, diags := r.data.adminClient()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	updated, err := client.UpdateStateStorage(ctx, plan.toAPI())
	if err != nil {
		addAPIError(&resp.Diagnostics, "Unable to Update State Storage", fmt.Sprintf("update state storage %q", plan.ID.ValueString()), err, "")
		return
	}
	tflog.Debug(ctx, "updated state storage", map[string]any{"state_storage_id": updated.ID})
	resp.Diagnostics.Append(resp.State.Set(ctx, stateStorageModelFromAPI(updated))...)
}

func (r *stateStorageResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state stateStorageModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	client, diags := r.data.adminClient()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	err := client.DeleteStateStorage(ctx, state.ID.ValueString())
	if err != nil && !errors.Is(err, api.ErrNotFound) {
		addAPIError(&resp.Diagnostics, "Unable to Delete State Storage", fmt.Sprintf("delete state storage %q", state.ID.ValueString()), err,
			"Runners still use this state storage (the error names them). Delete those runners or point them at another state storage first.")
		return
	}
	tflog.Debug(ctx, "deleted state storage", map[string]any{"state_storage_id": state.ID.ValueString()})
}

func (r *stateStorageResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

// known reports whether every configured value is known, so the whole input can be validated.
func (m stateStorageModel) known() bool {
	vals := []types.String{m.ID, m.Type, m.Description}
	if m.Kubernetes != nil {
		vals = append(vals, m.Kubernetes.Namespace)
	}
	if m.S3 != nil {
		vals = append(vals, m.S3.Bucket, m.S3.Region, m.S3.PathPrefix)
	}
	if m.GCS != nil {
		vals = append(vals, m.GCS.Bucket, m.GCS.PathPrefix)
	}
	if m.AzureRM != nil {
		vals = append(vals, m.AzureRM.StorageAccountName, m.AzureRM.ContainerName, m.AzureRM.ResourceGroupName, m.AzureRM.PathPrefix)
	}
	for _, v := range vals {
		if v.IsUnknown() {
			return false
		}
	}
	return true
}

func (m stateStorageModel) toAPI() api.StateStorageInput {
	in := api.StateStorageInput{ID: m.ID.ValueString(), Type: m.Type.ValueString(), Description: m.Description.ValueString()}
	if k := m.Kubernetes; k != nil {
		in.Kubernetes = &api.KubernetesStateSpec{Namespace: k.Namespace.ValueString()}
	}
	if s := m.S3; s != nil {
		in.S3 = &api.S3StateSpec{Bucket: s.Bucket.ValueString(), Region: s.Region.ValueString(), PathPrefix: s.PathPrefix.ValueString()}
	}
	if g := m.GCS; g != nil {
		in.GCS = &api.GCSStateSpec{Bucket: g.Bucket.ValueString(), PathPrefix: g.PathPrefix.ValueString()}
	}
	if a := m.AzureRM; a != nil {
		in.AzureRM = &api.AzureRMStateSpec{
			StorageAccountName: a.StorageAccountName.ValueString(),
			ContainerName:      a.ContainerName.ValueString(),
			ResourceGroupName:  a.ResourceGroupName.ValueString(),
			PathPrefix:         a.PathPrefix.ValueString(),
		}
	}
	return in
}

func stateStorageModelFromAPI(s *api.StateStorage) stateStorageModel {
	m := stateStorageModel{ID: types.StringValue(s.ID), Type: types.StringValue(s.Type), Description: optionalString(s.Description)}
	if k := s.Kubernetes; k != nil {
		m.Kubernetes = &kubernetesStateModel{Namespace: types.StringValue(k.Namespace)}
	}
	if s3 := s.S3; s3 != nil {
		m.S3 = &s3StateModel{Bucket: types.StringValue(s3.Bucket), Region: types.StringValue(s3.Region), PathPrefix: optionalString(s3.PathPrefix)}
	}
	if g := s.GCS; g != nil {
		m.GCS = &gcsStateModel{Bucket: types.StringValue(g.Bucket), PathPrefix: optionalString(g.PathPrefix)}
	}
	if a := s.AzureRM; a != nil {
		m.AzureRM = &azurermStateModel{
			StorageAccountName: types.StringValue(a.StorageAccountName),
			ContainerName:      types.StringValue(a.ContainerName),
			ResourceGroupName:  optionalString(a.ResourceGroupName),
			PathPrefix:         optionalString(a.PathPrefix),
		}
	}
	return m
}

// optionalString maps the API's "absent" empty string to null, so an unset optional attribute
// reads back unchanged.
func optionalString(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// apiFieldPath turns an API field path ("s3.bucket") into the attribute path of the same name.
func apiFieldPath(field string) path.Path {
	parts := strings.Split(field, ".")
	p := path.Root(parts[0])
	for _, part := range parts[1:] {
		p = p.AtName(part)
	}
	return p
}
