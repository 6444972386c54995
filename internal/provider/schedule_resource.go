package provider

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

var (
	_ resource.ResourceWithConfigure      = (*scheduleResource)(nil)
	_ resource.ResourceWithImportState    = (*scheduleResource)(nil)
	_ resource.ResourceWithValidateConfig = (*scheduleResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*scheduleResource)(nil)
)

// NewScheduleResource returns the outpost_schedule resource.
func NewScheduleResource() resource.Resource { return &scheduleResource{} }

// scheduleResource keeps a schedule of drift checks in the orchestrator.
type scheduleResource struct {
	data *providerData
}

// scheduleModel maps outpost_schedule.
type scheduleModel struct {
	ID             types.String `tfsdk:"id"`
	RunnerID       types.String `tfsdk:"runner_id"`
	StateKey       types.String `tfsdk:"state_key"`
	Cron           types.String `tfsdk:"cron"`
	OnDrift        types.String `tfsdk:"on_drift"`
	Enabled        types.Bool   `tfsdk:"enabled"`
	Variables      types.Map    `tfsdk:"variables"` //< string
	InlineArchive  types.String `tfsdk:"inline_archive_base64"`
	Git            *gitModel    `tfsdk:"git"`
	StateStorageID types.String `tfsdk:"state_storage_id"`
	NextFireAt     types.String `tfsdk:"next_fire_at"`
	Drifted        types.Bool   `tfsdk:"drifted"`
	LastCheckedAt  types.String `tfsdk:"last_checked_at"`
}

type gitModel struct {
	URL  types.String `tfsdk:"url"`
	Ref  types.String `tfsdk:"ref"`
	Path types.String `tfsdk:"path"`
}

func (r *scheduleResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_schedule"
}

func (r *scheduleResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	computed := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{MarkdownDescription: desc, Computed: true}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "A schedule of drift checks: at each `cron` time (UTC) the orchestrator queues a plan with " +
			"`-detailed-exitcode` of the source and variables against `state_key` on the runner. A plan that finds changes " +
			"(infrastructure changed outside Terraform/OpenTofu, or a configuration that differs from the state) marks the " +
			"state key drifted with a summary of what differs, by resource address and attribute name only; a later check " +
			"without changes clears the mark. Each period queues one check across every orchestrator replica; a period whose " +
			"previous check has not ended queues none. Set exactly one of `git` and `inline_archive_base64`.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "Id of the schedule, unique in the organisation (a DNS-1123 label). Changing it replaces the schedule.",
				Required:            true,
				Validators:          []validator.String{idValidator()},
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"runner_id": schema.StringAttribute{
				MarkdownDescription: "Runner the checks run on; its state storage holds `state_key`.",
				Required:            true,
				Validators:          []validator.String{idValidator()},
			},
			"state_key": schema.StringAttribute{
				MarkdownDescription: "The state the checks plan against, e.g. `apps/web`: the state key of the deployments that apply this configuration.",
				Required:            true,
			},
			"cron": schema.StringAttribute{
				MarkdownDescription: "When the checks run, in UTC: five fields (`minute hour day-of-month month day-of-week`, e.g. `0 3 * * *`), " +
					"six with seconds first, or a descriptor (`@hourly`, `@daily`, `@every 30m`). A time zone prefix (`TZ=`) is refused. " +
					"The orchestrator fires a schedule within one sweep (3 s by default) of its time.",
				Required: true,
			},
			"on_drift": schema.StringAttribute{
				MarkdownDescription: "What a check that finds drift does besides marking the state key: `none` (default), or `queue_apply`, " +
					"which makes each check a saved plan (the runner needs a `kubernetes` state storage): a check that finds drift keeps its plan " +
					"in the cluster for review and the schedule's last message names it; approved, its apply applies exactly that plan. " +
					"A check that finds nothing discards its plan.",
				Optional:   true,
				Computed:   true,
				Default:    stringdefault.StaticString(string(api.OnDriftNone)),
				Validators: []validator.String{stringvalidator.OneOf(string(api.OnDriftNone), string(api.OnDriftQueueApply))},
			},
			"enabled": schema.BoolAttribute{
				MarkdownDescription: "Whether the schedule fires (default `true`). A disabled schedule keeps its last check.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(true),
			},
			"variables": schema.MapAttribute{
				MarkdownDescription: "Terraform/OpenTofu input variables of the checks, as strings (like `-var`). Sensitive: the values " +
					"are stored in the orchestrator with the schedule and never shown in plans.",
				ElementType: types.StringType,
				Optional:    true,
				Sensitive:   true,
			},
			"inline_archive_base64": schema.StringAttribute{
				MarkdownDescription: "The configuration as a base64 gzip-compressed tar, e.g. `filebase64(\"infra.tar.gz\")` " +
					"(at most 12 MiB compressed). Conflicts with `git`.",
				Optional:   true,
				Validators: []validator.String{stringvalidator.ConflictsWith(path.MatchRoot("git"))},
			},
			"state_storage_id": computed("The runner's state storage, where `state_key` is."),
			"next_fire_at":     computed("When the next check is due (RFC 3339, UTC), as the orchestrator last said."),
			"drifted": schema.BoolAttribute{
				MarkdownDescription: "Whether the last check found drift, as the orchestrator last said (`outpost schedule get` shows what differs).",
				Computed:            true,
			},
			"last_checked_at": computed("When the last check reported (RFC 3339), or null before the first."),
		},
		Blocks: map[string]schema.Block{
			"git": schema.SingleNestedBlock{
				MarkdownDescription: "The configuration in a git repository, fetched by each check's job. Conflicts with `inline_archive_base64`.",
				Validators:          []validator.Object{blockRequires("url")},
				Attributes: map[string]schema.Attribute{
					"url":  schema.StringAttribute{MarkdownDescription: "Repository URL (https://, ssh://, git@host:path or file://). Required in the block.", Optional: true},
					"ref":  schema.StringAttribute{MarkdownDescription: "Branch, tag or commit (default: the remote's default branch).", Optional: true},
					"path": schema.StringAttribute{MarkdownDescription: "Directory of the configuration inside the repository.", Optional: true},
				},
			},
		},
	}
}

func (r *scheduleResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	data, diags := providerDataFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	r.data = data
}

// ModifyPlan fails the plan when an orchestrator setting is missing.
func (r *scheduleResource) ModifyPlan(_ context.Context, _ resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	resp.Diagnostics.Append(r.data.missingSettings()...)
}

// ValidateConfig runs the orchestrator's checks of a schedule at plan time: the cron
// expression, the source, the variable names and the state key.
func (r *scheduleResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m scheduleModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !m.InlineArchive.IsUnknown() && m.InlineArchive.IsNull() && m.Git == nil {
		resp.Diagnostics.AddError("Missing Schedule Source", "Set the configuration to check: a git block (git { url = \"https://…\" }) or inline_archive_base64 = filebase64(\"infra.tar.gz\").")
		return
	}
	for _, v := range []types.String{m.ID, m.RunnerID, m.StateKey, m.Cron, m.OnDrift, m.InlineArchive} {
		if v.IsUnknown() {
			return
		}
	}
	if m.Git != nil && (m.Git.URL.IsUnknown() || m.Git.Ref.IsUnknown() || m.Git.Path.IsUnknown()) || m.Variables.IsUnknown() {
		return
	}
	in, diags := m.toAPI(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := in.Validate(); err != nil {
		var fe *api.FieldError
		if errors.As(err, &fe) {
			if fe.Field == "id" || fe.Field == "runner_id" {
				return // reported by the attribute's own validator
			}
			p := apiFieldPath(fe.Field)
			switch {
			case fe.Field == "source.inline.archive_tar_gz":
				p = path.Root("inline_archive_base64")
			case len(fe.Field) > len("source.git.") && fe.Field[:len("source.git.")] == "source.git.":
				p = path.Root("git").AtName(fe.Field[len("source.git."):])
			case len(fe.Field) > len("variables.") && fe.Field[:len("variables.")] == "variables.":
				p = path.Root("variables")
			}
			resp.Diagnostics.AddAttributeError(p, "Invalid Schedule", fe.Message)
			return
		}
		resp.Diagnostics.AddError("Invalid Schedule", err.Error())
	}
}

func (r *scheduleResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan scheduleModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	in, diags := plan.toAPI(ctx)
	resp.Diagnostics.Append(diags...)
	client, cdiags := r.data.adminClient()
	resp.Diagnostics.Append(cdiags...)
	if resp.Diagnostics.HasError() {
		return
	}
	created, err := client.CreateSchedule(ctx, in)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Unable to Create Schedule", fmt.Sprintf("create schedule %q", in.ID), err,
			fmt.Sprintf("A schedule with id %q already exists in organisation %q. Import it (terraform import <address> %s) or choose another id.", in.ID, client.Org(), in.ID))
		return
	}
	tflog.Debug(ctx, "created schedule", map[string]any{"schedule_id": created.ID, "next_fire_at": created.NextFireAt})
	resp.Diagnostics.Append(resp.State.Set(ctx, plan.withAPI(created))...)
}

func (r *scheduleResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state scheduleModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	client, diags := r.data.adminClient()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	got, err := client.GetSchedule(ctx, state.ID.ValueString())
	if errors.Is(err, api.ErrNotFound) {
		tflog.Warn(ctx, "schedule is gone from the orchestrator; removing it from state", map[string]any{"schedule_id": state.ID.ValueString()})
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Unable to Read Schedule", fmt.Sprintf("read schedule %q", state.ID.ValueString()), err, "")
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, scheduleModelFromAPI(ctx, got, state.Variables, &resp.Diagnostics))...)
}

func (r *scheduleResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan scheduleModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	in, diags := plan.toAPI(ctx)
	resp.Diagnostics.Append(diags...)
	client, cdiags := r.data.adminClient()
	resp.Diagnostics.Append(cdiags...)
	if resp.Diagnostics.HasError() {
		return
	}
	updated, err := client.UpdateSchedule(ctx, in)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Unable to Update Schedule", fmt.Sprintf("update schedule %q", in.ID), err, "")
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan.withAPI(updated))...)
}

func (r *scheduleResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state scheduleModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	client, diags := r.data.adminClient()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := client.DeleteSchedule(ctx, state.ID.ValueString()); err != nil && !errors.Is(err, api.ErrNotFound) {
		addAPIError(&resp.Diagnostics, "Unable to Delete Schedule", fmt.Sprintf("delete schedule %q", state.ID.ValueString()), err, "")
	}
}

// ImportState takes the schedule's id. The variables are sensitive and read back as they are
// stored; an imported schedule shows them in its first plan only if the configuration differs.
func (r *scheduleResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

// toAPI is the schedule the configuration describes.
func (m scheduleModel) toAPI(ctx context.Context) (api.ScheduleInput, diag.Diagnostics) {
	var diags diag.Diagnostics
	enabled := m.Enabled.IsNull() || m.Enabled.IsUnknown() || m.Enabled.ValueBool()
	in := api.ScheduleInput{ID: m.ID.ValueString(), RunnerID: m.RunnerID.ValueString(), StateKey: m.StateKey.ValueString(), Cron: m.Cron.ValueString(),
		OnDrift: api.OnDrift(m.OnDrift.ValueString()), Enabled: &enabled}
	if !m.InlineArchive.IsNull() {
		b, err := base64.StdEncoding.DecodeString(m.InlineArchive.ValueString())
		if err != nil {
			diags.AddAttributeError(path.Root("inline_archive_base64"), "Invalid Inline Archive",
				"inline_archive_base64 is not base64: give filebase64(\"infra.tar.gz\") of a gzip-compressed tar. "+err.Error())
			return in, diags
		}
		in.Source.Inline = &api.InlineSource{ArchiveTarGz: b}
	}
	if g := m.Git; g != nil {
		in.Source.Git = &api.GitSource{URL: g.URL.ValueString(), Ref: g.Ref.ValueString(), Path: g.Path.ValueString()}
	}
	if !m.Variables.IsNull() {
		vars := map[string]string{}
		diags.Append(m.Variables.ElementsAs(ctx, &vars, false)...)
		in.Variables = map[string]json.RawMessage{}
		for k, v := range vars {
			b, _ := json.Marshal(v)
			in.Variables[k] = b
		}
	}
	return in, diags
}

// withAPI is the planned model with what the orchestrator computed.
func (m scheduleModel) withAPI(s *api.Schedule) scheduleModel {
	m.OnDrift, m.Enabled = types.StringValue(string(s.OnDrift)), types.BoolValue(s.IsEnabled())
	m.StateStorageID = types.StringValue(s.StateStorageID)
	m.NextFireAt = types.StringValue(s.NextFireAt.UTC().Format(time.RFC3339))
	m.Drifted, m.LastCheckedAt = types.BoolValue(false), types.StringNull()
	if c := s.LastCheck; c != nil {
		m.Drifted, m.LastCheckedAt = types.BoolValue(c.Drifted), types.StringValue(c.CheckedAt.UTC().Format(time.RFC3339))
	}
	return m
}

// scheduleModelFromAPI is a stored schedule as the resource shows it. Variables that are JSON
// strings read back as their text, others as their JSON; prior keeps null variables null.
func scheduleModelFromAPI(ctx context.Context, s *api.Schedule, prior types.Map, diags *diag.Diagnostics) scheduleModel {
	m := scheduleModel{ID: types.StringValue(s.ID), RunnerID: types.StringValue(s.RunnerID), StateKey: types.StringValue(s.StateKey),
		Cron: types.StringValue(s.Cron), InlineArchive: types.StringNull(), Variables: types.MapNull(types.StringType)}
	if in := s.Source.Inline; in != nil {
		m.InlineArchive = types.StringValue(base64.StdEncoding.EncodeToString(in.ArchiveTarGz))
	}
	if g := s.Source.Git; g != nil {
		m.Git = &gitModel{URL: types.StringValue(g.URL), Ref: optionalString(g.Ref), Path: optionalString(g.Path)}
	}
	if len(s.Variables) > 0 || !prior.IsNull() {
		vars := map[string]string{}
		for k, raw := range s.Variables {
			var str string
			if json.Unmarshal(raw, &str) == nil {
				vars[k] = str
			} else {
				vars[k] = string(raw)
			}
		}
		v, d := types.MapValueFrom(ctx, types.StringType, vars)
		diags.Append(d...)
		m.Variables = v
	}
	return m.withAPI(s)
}
