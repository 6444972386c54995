package provider

import (
	"context"
	"fmt"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
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

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
)

// Defaults of outpost_kubernetes_agent.
const (
	defaultReleaseName = "outpost-agent"
	defaultReplicas    = 2
	defaultLogLevel    = "info"
)

// helmReleaseName is what Helm accepts as a release name (a DNS-1123 label of at most 53
// characters, leaving room for suffixes in object names).
var helmReleaseName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$`)

func (r *kubernetesAgentResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	stringMap := func(desc string) schema.MapAttribute {
		return schema.MapAttribute{MarkdownDescription: desc, ElementType: types.StringType, Optional: true}
	}
	optional := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{MarkdownDescription: desc, Optional: true, Validators: []validator.String{stringvalidator.LengthAtLeast(1)}}
	}
	computed := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{MarkdownDescription: desc, Computed: true}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: fmt.Sprintf("Installs or upgrades the Outpost agent (chart `%s`, embedded in the provider; a provider "+
			"release installs the chart and agent image of its own version) into a "+
			"Kubernetes cluster through the Helm SDK, and waits until the agent has connected to the orchestrator.\n\n"+
			"The release is checked on every refresh: a release changed outside Terraform (other values, another chart version, "+
			"a failed or pending status, or a Deployment scaled or re-imaged with kubectl) shows up as a diff and the next apply "+
			"upgrades it back. A release left `pending-install`, `pending-upgrade` or `pending-rollback` by an interrupted run is "+
			"rolled back to its last deployed revision (or uninstalled if it has none) before the upgrade.\n\n"+
			"Namespaces are never deleted, not even those created through `create_namespaces`: they may hold Terraform state.",
			agentchart.Name),
		Attributes: map[string]schema.Attribute{
			// Required attributes
			"namespace": schema.StringAttribute{
				MarkdownDescription: "Namespace of the release and the agent. Changing it reinstalls the agent.",
				Required:            true,
				Validators:          []validator.String{namespaceValidator()},
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"runner_id": schema.StringAttribute{
				MarkdownDescription: "Id of the runner the agent serves (`outpost_kubernetes_agent_runner.id`).",
				Required:            true,
				Validators:          []validator.String{idValidator()},
			},
			// Optional attributes
			"release_name": schema.StringAttribute{
				MarkdownDescription: "Name of the Helm release. Defaults to `" + defaultReleaseName + "`. Changing it reinstalls the agent.",
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(defaultReleaseName),
				Validators: []validator.String{stringvalidator.RegexMatches(helmReleaseName,
					"must be a DNS-1123 label of at most 53 characters (lower-case letters, digits and '-')")},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"api_url": schema.StringAttribute{
				MarkdownDescription: "Orchestrator URL as the agent reaches it. Defaults to the provider's `api_url`; set it when the " +
					"cluster reaches the orchestrator under another address.",
				Optional:   true,
				Computed:   true,
				Validators: []validator.String{stringvalidator.RegexMatches(regexp.MustCompile(`^https?://[^\s/?#]+[^\s]*$`), "must be an http(s) URL")},
			},
			"org_id": schema.StringAttribute{
				MarkdownDescription: "Organisation of the runner. Defaults to the provider's `org_id`.",
				Optional:            true,
				Computed:            true,
				Validators:          []validator.String{idValidator()},
			},
			"create_namespaces": schema.BoolAttribute{
				MarkdownDescription: "Create `namespace`, `job_namespace` and `state_namespace` if they do not exist, labelled `pod-security.kubernetes.io/enforce` (`restricted`, or for `job_namespace` the level `job_pod_policy` needs). They are never deleted. Defaults to `false`.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(false),
			},
			"job_namespace": schema.StringAttribute{
				MarkdownDescription: "Namespace of the deployment Jobs; must equal the runner's `job.namespace`. Defaults to `<namespace>-jobs`: job pods run code from the deployments, so by default they never share a namespace with the agent's private key or the states.",
				Optional:            true,
				Computed:            true,
				Validators:          []validator.String{namespaceValidator()},
			},
			"job_service_account": schema.StringAttribute{
				MarkdownDescription: "Service account the chart creates for the Jobs; must equal the runner's `job.service_account`. Defaults to `" + defaultJobServiceAccount + "`.",
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(defaultJobServiceAccount),
				Validators:          []validator.String{serviceAccountValidator()},
			},
			"job_service_account_annotations": stringMap("Annotations of the Jobs' service account: the cloud identity Terraform runs with, separate from the agent's " +
				"(e.g. `eks.amazonaws.com/role-arn`, `iam.gke.io/gcp-service-account`, `azure.workload.identity/client-id`)."),
			"job_pod_labels":              stringMap("Labels the agent puts on every Job pod, e.g. `azure.workload.identity/use = \"true\"` for AKS Workload Identity."),
			"service_account_annotations": stringMap("Annotations of the agent's own service account. The agent needs no cloud identity; give cloud roles to the Jobs."),
			"serve_state": schema.BoolAttribute{
				MarkdownDescription: "Serve the deployments' Terraform state from Kubernetes Secrets in `state_namespace` (runners whose state storage has `type = \"kubernetes\"`). Defaults to `true`.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(true),
			},
			"state_namespace": schema.StringAttribute{
				MarkdownDescription: "Namespace of the state Secrets; must equal the namespace of the runner's kubernetes state storage. Defaults to `<namespace>-state`.",
				Optional:            true,
				Computed:            true,
				Validators:          []validator.String{namespaceValidator()},
			},
			"cli": schema.StringAttribute{
				MarkdownDescription: "CLI the Jobs run: `terraform` or `tofu`. Unset, each Job runs whichever of `tofu` and `terraform` its image has (`tofu` first); the default Job image has OpenTofu.",
				Optional:            true,
				Validators:          []validator.String{stringvalidator.OneOf("terraform", "tofu")},
			},
			"log_level": schema.StringAttribute{
				MarkdownDescription: "Log level of the agent: `debug`, `info`, `warn` or `error`. Defaults to `" + defaultLogLevel + "`.",
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(defaultLogLevel),
				Validators:          []validator.String{stringvalidator.OneOf("debug", "info", "warn", "error")},
			},
			"replicas": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("Number of agent pods; one is the elected leader. Defaults to `%d`.", defaultReplicas),
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(defaultReplicas),
				Validators:          []validator.Int64{int64validator.Between(1, 10)},
			},
			"image_registry": optional("Registry for every image of the chart (agent and Jobs), for mirrors in air-gapped clusters (`global.imageRegistry`)."),
			"node_selector":  stringMap("Node selector of the agent pods."),
			"values": schema.StringAttribute{
				MarkdownDescription: "Further chart values as YAML or JSON: the last resort, for chart values no attribute sets " +
					"(see the chart's README; unknown keys are refused by the chart's schema, at plan time). Every attribute you set " +
					"wins over the same key here; `values` wins only over the defaults of `api_url`, `org_id`, `job_namespace`, " +
					"`state_namespace`, `job_service_account`, `serve_state`, `log_level`, `replicas` and `private_key_secret.key`.",
				Optional:   true,
				Validators: []validator.String{valuesValidator()},
			},
			"wait_for_connection": schema.BoolAttribute{
				MarkdownDescription: "Wait after install or upgrade until the runner reports `connected`, failing with what to check when it " +
					"does not within the create/update timeout. Defaults to `true`.",
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(true),
			},
			// Computed attributes
			"id":            computed("`<namespace>/<release_name>`."),
			"chart_version": computed("Version of the chart installed; a provider upgrade that embeds a new chart shows as a diff here."),
			"app_version":   computed("Agent version the installed chart deploys by default."),
			"status": computed("Status of the release's newest revision (`deployed`, `failed`, `pending-upgrade`, ...). " +
				"Anything but `deployed` is planned back to `deployed`."),
			"revision": schema.Int64Attribute{
				MarkdownDescription: "Revision of the release (grows with every upgrade).",
				Computed:            true,
			},
			"values_sha256": computed("SHA-256 of the chart values of the deployed revision. A release upgraded outside Terraform with other values shows as a diff here."),
			"drift_detected": schema.BoolAttribute{
				MarkdownDescription: "Whether the live agent Deployment differs from the release (replicas or images changed outside Helm, or the Deployment deleted). Planned back to `false`.",
				Computed:            true,
			},
		},
		Blocks: map[string]schema.Block{
			"private_key_secret": schema.SingleNestedBlock{
				MarkdownDescription: "Secret in `namespace` holding the runner's private key (see `outpost_key_pair.kubernetes_secret`). Required.",
				Validators:          []validator.Object{objectvalidator.IsRequired(), blockRequires("name")},
				Attributes: map[string]schema.Attribute{
					"name": schema.StringAttribute{
						MarkdownDescription: "Name of the Secret. Required in the block.",
						Optional:            true,
						Validators:          []validator.String{secretNameValidator()},
					},
					"key": schema.StringAttribute{
						MarkdownDescription: "Data key of the private key in the Secret. Defaults to `" + secretKeyPrivate + "`.",
						Optional:            true,
						Computed:            true,
						Default:             stringdefault.StaticString(secretKeyPrivate),
					},
				},
			},
			"job_pod_policy": jobPodPolicyBlock(),
			"network_policy": networkPolicyBlock(),
			"image":          imageBlock("agent", true),
			"job_image": imageBlock("Job `main` container when the runner's pod template names none (default: `ghcr.io/outpost-dev/outpost-job`, with OpenTofu; "+
				"any image with `tofu` or `terraform` works, because the job runner is copied into the pod from the agent image; Terraform is not shipped for licence reasons, see the chart README)", false),
			"image_pull_secret": imagePullSecretBlock(),
			"timeouts":          timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true, Delete: true}),
		},
	}
	for name, a := range agentJobsAttributes() {
		resp.Schema.Attributes[name] = a
	}
	for name, b := range agentJobsBlocks() {
		resp.Schema.Blocks[name] = b
	}
}

func imageBlock(what string, pullPolicy bool) schema.SingleNestedBlock {
	optional := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{MarkdownDescription: desc, Optional: true, Validators: []validator.String{stringvalidator.LengthAtLeast(1)}}
	}
	attrs := map[string]schema.Attribute{
		"registry":   optional("Registry that replaces the registry host of the repository."),
		"repository": optional("Image repository."),
		"tag":        optional("Image tag (default: the chart's appVersion)."),
		"digest":     optional("Image digest (`sha256:...`); pins the image whatever the tag."),
	}
	if pullPolicy {
		attrs["pull_policy"] = schema.StringAttribute{
			MarkdownDescription: "Pull policy: `Always`, `IfNotPresent` or `Never`.",
			Optional:            true,
			Validators:          []validator.String{stringvalidator.OneOf("Always", "IfNotPresent", "Never")},
		}
	}
	return schema.SingleNestedBlock{
		MarkdownDescription: "Image of the " + what + ". Unset attributes keep the chart's defaults.",
		Attributes:          attrs,
	}
}
