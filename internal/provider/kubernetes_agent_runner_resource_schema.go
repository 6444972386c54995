package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/objectvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// defaultJobServiceAccount is the job service account the runner and the agent chart default to.
const defaultJobServiceAccount = "outpost-job"

func (r *kubernetesAgentRunnerResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A runner of type `kubernetes-agent` registered with the Outpost orchestrator. The runner's agent " +
			"(installed with `outpost_kubernetes_agent`) authenticates with the private half of one of `public_keys` and " +
			"runs each deployment as a Kubernetes Job in `job.namespace`.\n\n" +
			"Replacing a key never locks the agent out: when an update takes a key out of `public_keys`, the orchestrator " +
			"keeps accepting it until the agent signs with one of the new keys (its next poll, once the agent has the new " +
			"private key), and for 24 hours at most. The agent follows its key Secret without a restart and signs with the " +
			"newest key the runner has, so rotating with `outpost_key_pair.keepers` takes one apply (see that resource).",
		Attributes: map[string]schema.Attribute{
			// Required attributes
			"id": schema.StringAttribute{
				MarkdownDescription: "Id of the runner, unique in the organisation (a DNS-1123 label: lower-case letters, digits and `-`, " +
					"at most 63 characters). `provider::outpost::runner_id(...)` makes one out of a kube context or cluster name. " +
					"Changing it replaces the runner.",
				Required:      true,
				Validators:    []validator.String{runnerIDValidator()},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"public_keys": schema.ListAttribute{
				MarkdownDescription: "One or two ed25519 public keys in PEM form (`-----BEGIN PUBLIC KEY-----`), typically " +
					"`outpost_key_pair.<name>.public_key_pem`. The agent signs with the newest of its keys that the runner has. " +
					"A key taken out of the list is still accepted until the agent signs with one of these (at most 24 hours).",
				ElementType: types.StringType,
				Required:    true,
				Validators: []validator.List{
					listvalidator.SizeBetween(1, 2),
					listvalidator.ValueStringsAre(publicKeyValidator()),
					publicKeysValidator{},
				},
			},
			"state_storage_id": schema.StringAttribute{
				MarkdownDescription: "Id of the state storage (`outpost_state_storage`) the runner's deployments keep their state in.",
				Required:            true,
				Validators:          []validator.String{idValidator()},
			},
			// Optional attributes
			"description": schema.StringAttribute{
				MarkdownDescription: "Free-text description, at most 1024 characters.",
				Optional:            true,
				Validators:          []validator.String{stringvalidator.LengthBetween(1, 1024)},
			},
			"max_concurrency": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("How many deployments the agent runs at once. Defaults to `%d`; the agent follows changes without a restart.", api.DefaultMaxConcurrency),
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(api.DefaultMaxConcurrency),
				Validators:          []validator.Int64{int64validator.Between(1, api.MaxMaxConcurrency)},
			},
			"require_approval": schema.BoolAttribute{
				MarkdownDescription: "Whether every change needs a reviewed plan. When `true`, the orchestrator refuses an apply or a " +
					"destroy queued on the runner (HTTP 403, code `approval_required`); what runs instead is the apply of a saved " +
					"plan a person approved: queue a plan with `save_plan` (`outpost deploy --save-plan`; with `--destroy` for a " +
					"destroy plan), review it (`outpost deployment plan`), approve it (`outpost deployment approve`) and apply it " +
					"(`outpost deployment apply-plan`), which applies exactly the reviewed plan. Plans are never refused. " +
					"Saved plans need a `kubernetes` state storage. Defaults to `false`.",
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
			},
			"job_timeout": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("Longest time one deployment may run, as a duration such as `30m` or `2h` (whole seconds, "+
					"1m to %s). The Job gets it as `activeDeadlineSeconds`. Defaults to `%s`.",
					formatSeconds(api.MaxJobTimeoutSeconds), formatSeconds(api.DefaultJobTimeoutSeconds)),
				CustomType:    durationType{},
				Optional:      true,
				Computed:      true,
				Default:       stringdefault.StaticString(formatSeconds(api.DefaultJobTimeoutSeconds)),
				Validators:    []validator.String{jobTimeoutValidator()},
				PlanModifiers: []planmodifier.String{keepEquivalentDuration()},
			},
			// Computed attributes
			"org_id": schema.StringAttribute{
				MarkdownDescription: "Organisation the runner is registered in: the provider's `org_id`, known at plan time. " +
					"Give it to `outpost_kubernetes_agent.org_id` so the agent serves the runner's organisation.",
				Computed:      true,
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"status": schema.StringAttribute{
				MarkdownDescription: "`connected` while the agent has made an authenticated request within the last minute, else `disconnected`. " +
					"Read on every refresh.",
				Computed: true,
			},
			"last_seen_at": schema.StringAttribute{
				MarkdownDescription: "Time (RFC 3339) of the agent's last authenticated request; null if it never connected.",
				Computed:            true,
			},
			"agent_version": schema.StringAttribute{
				MarkdownDescription: "Version the agent reported in its last request; null if it never connected.",
				Computed:            true,
			},
			"agent_key_fingerprint": schema.StringAttribute{
				MarkdownDescription: "SHA-256 fingerprint of the key the agent last signed with (compare with " +
					"`outpost_key_pair.fingerprint_sha256` during a rotation); null if it never connected.",
				Computed: true,
			},
		},
		Blocks: map[string]schema.Block{
			"job": schema.SingleNestedBlock{
				MarkdownDescription: "Where and as whom the runner's deployments run, and the settings of their pods. Required. " +
					"The settings besides `pod_template` are the ones most runners need, without writing a pod template; " +
					"see \"How the job settings combine\" for how they meet the template and the cluster owner's chart values.",
				Validators: []validator.Object{objectvalidator.IsRequired(), blockRequires("namespace")},
				Attributes: withJobPodAttributes(map[string]schema.Attribute{
					"namespace": schema.StringAttribute{
						MarkdownDescription: "Namespace of the deployment Jobs. The agent chart must be given the same namespace " +
							"(`outpost_kubernetes_agent.job_namespace`) so it grants the agent access to it. Required in the block.",
						Optional:   true,
						Validators: []validator.String{namespaceValidator()},
					},
					"service_account": schema.StringAttribute{
						MarkdownDescription: "Service account of the deployment Jobs (their cloud identity, e.g. through IRSA or Workload Identity). " +
							"Defaults to `" + defaultJobServiceAccount + "`, the one the agent chart creates.",
						Optional:   true,
						Computed:   true,
						Default:    stringdefault.StaticString(defaultJobServiceAccount),
						Validators: []validator.String{serviceAccountValidator()},
					},
					"pod_template": schema.StringAttribute{
						MarkdownDescription: "Kubernetes PodTemplateSpec of the Jobs as JSON (use `jsonencode({...})`). The container named " +
							"`main` runs Terraform/OpenTofu; a template that names none (only `metadata`, say) gets an empty one, which " +
							"the agent fills in, and other containers run beside it. The runner sets `main`'s command, the restart policy, " +
							"the service account and labels under `outpost.dev/`, so the template must leave those out. Key order and " +
							"whitespace do not matter. Null means the agent's defaults.",
						CustomType:    podTemplateType{},
						Optional:      true,
						Validators:    []validator.String{podTemplateValidator()},
						PlanModifiers: []planmodifier.String{keepEquivalentPodTemplate()},
					},
				}),
			},
		},
	}
}

// withJobPodAttributes adds the job pod settings to the job block's attributes.
func withJobPodAttributes(attrs map[string]schema.Attribute) map[string]schema.Attribute {
	for k, v := range jobPodAttributes() {
		attrs[k] = v
	}
	return attrs
}
