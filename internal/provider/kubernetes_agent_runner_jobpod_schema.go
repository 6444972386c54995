package provider

import (
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// jobPodAttributes are the job pod settings of the runner's job block.
func jobPodAttributes() map[string]schema.Attribute {
	nonEmptyString := []validator.String{stringvalidator.LengthAtLeast(1)}
	stringMap := func(desc string) schema.MapAttribute {
		return schema.MapAttribute{MarkdownDescription: desc, ElementType: types.StringType, Optional: true,
			Validators: []validator.Map{mapvalidator.SizeAtLeast(1)}}
	}
	return map[string]schema.Attribute{
		"resources": resourcesAttribute("Requests and limits of the `main` container (where Terraform/OpenTofu runs), by resource name, " +
			"as Kubernetes quantities (`cpu = \"500m\"`, `memory = \"1Gi\"`). Each replaces the template's value of the same " +
			"name. When neither this nor the pod template sets any, `main` gets the chart's `jobs.resources` (requests " +
			"`250m` CPU and `512Mi` memory, a `2Gi` memory limit)."),
		"node_selector": stringMap("Node labels the job pods must run on, merged key by key over the template's."),
		"tolerations":   tolerationsAttribute("Taints the job pods tolerate, added to the template's. One without `key` and with `operator = \"Exists\"` tolerates every taint; the agent's job pod policy refuses it unless `job_pod_policy.allow_tolerate_all`."),
		"affinity": schema.StringAttribute{
			MarkdownDescription: "A Kubernetes `Affinity` (`nodeAffinity`, `podAffinity`, `podAntiAffinity`) as JSON " +
				"(`jsonencode({ nodeAffinity = {...} })`), replacing the template's. Key order and whitespace do not matter.",
			CustomType: jsonType{}, Optional: true, Validators: nonEmptyString,
			PlanModifiers: []planmodifier.String{keepEquivalentJSON()},
		},
		"env": envAttribute("Environment variables of `main`, replacing the template's of the same name: a literal "+
			"`value`, or a key of a Secret or ConfigMap in `job.namespace`. Names under `OUTPOST_` are the runner's.",
			func(kind string) string {
				return "in `job.namespace` (the job pod policy must allow the " + kind + ", chart value `jobs.policy.allowed" + kind + "s`)"
			}),
		"labels":      stringMap("Labels of the job pods, merged over the template's. Keys under `outpost.dev/` are the runner's."),
		"annotations": stringMap("Annotations of the job pods, merged over the template's. Keys under `outpost.dev/` are the runner's."),
		"volumes": schema.StringAttribute{
			MarkdownDescription: "Extra volumes of the job pods: a JSON list of Kubernetes `Volume` objects " +
				"(`jsonencode([{ name = \"cache\", persistentVolumeClaim = { claimName = \"tf-cache\" } }])`), replacing the " +
				"template's of the same name. The job pod policy decides which volume types are allowed (`hostPath` is not, " +
				"unless the cluster owner allows it). Names starting with `outpost-` are the runner's.",
			CustomType: jsonType{}, Optional: true, Validators: nonEmptyString,
			PlanModifiers: []planmodifier.String{keepEquivalentJSON()},
		},
		"volume_mounts": schema.ListNestedAttribute{
			MarkdownDescription: "Mounts of `volumes` (or of the template's `spec.volumes`) into `main`, replacing the template's " +
				"mounts of the same name or path.",
			Optional:   true,
			Validators: []validator.List{listvalidator.SizeAtLeast(1)},
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"name":       schema.StringAttribute{MarkdownDescription: "Name of the volume.", Required: true, Validators: nonEmptyString},
				"mount_path": schema.StringAttribute{MarkdownDescription: "Absolute path in `main`.", Required: true, Validators: nonEmptyString},
				"sub_path":   schema.StringAttribute{MarkdownDescription: "Path inside the volume to mount instead of its root.", Optional: true, Validators: nonEmptyString},
				"read_only": schema.BoolAttribute{MarkdownDescription: "Mount read-only. Defaults to `false`.",
					Optional: true, Computed: true, Default: booldefault.StaticBool(false)},
			}},
		},
		"priority_class_name": schema.StringAttribute{
			MarkdownDescription: "PriorityClass of the job pods, replacing the template's. The agent's job pod policy refuses it " +
				"unless the cluster owner lists it (`job_pod_policy.allowed_priority_classes` of `outpost_kubernetes_agent`).",
			Optional: true, Validators: nonEmptyString,
		},
	}
}

// The shapes shared by the runner's job block, outpost_kubernetes_agent and the installer module:
// one object shape per concept (resources, tolerations, environment variables), the Kubernetes
// field names in snake_case.

// resourcesAttribute is requests and limits by resource name, as Kubernetes quantities.
func resourcesAttribute(desc string) schema.SingleNestedAttribute {
	quantities := func(desc string) schema.MapAttribute {
		return schema.MapAttribute{MarkdownDescription: desc, ElementType: types.StringType, Optional: true,
			Validators: []validator.Map{mapvalidator.SizeAtLeast(1), mapvalidator.ValueStringsAre(stringvalidator.RegexMatches(quantityPattern,
				"must be a Kubernetes quantity such as 500m, 1, 512Mi or 2Gi"))}}
	}
	return schema.SingleNestedAttribute{
		MarkdownDescription: desc,
		Optional:            true,
		Attributes: map[string]schema.Attribute{
			"requests": quantities("Requested resources, e.g. `{ cpu = \"500m\", memory = \"1Gi\" }`."),
			"limits":   quantities("Resource limits, e.g. `{ memory = \"4Gi\" }`. A request above its limit is refused."),
		},
	}
}

// quantityPattern is what the chart's schema takes as a Kubernetes quantity.
var quantityPattern = regexp.MustCompile(`^[0-9.]+([eE][-+]?[0-9]+|[numkMGTPE]i?|Ki)?$`)

// tolerationsAttribute is a list of Kubernetes tolerations.
func tolerationsAttribute(desc string) schema.ListNestedAttribute {
	nonEmptyString := []validator.String{stringvalidator.LengthAtLeast(1)}
	return schema.ListNestedAttribute{
		MarkdownDescription: desc,
		Optional:            true,
		Validators:          []validator.List{listvalidator.SizeAtLeast(1)},
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"key": schema.StringAttribute{MarkdownDescription: "Taint key; leave it out with `operator = \"Exists\"` to tolerate every taint.",
				Optional: true, Validators: nonEmptyString},
			"operator": schema.StringAttribute{MarkdownDescription: "`Equal` (the default) or `Exists`.",
				Optional: true, Validators: []validator.String{stringvalidator.OneOf("Equal", "Exists")}},
			"value": schema.StringAttribute{MarkdownDescription: "Taint value, with `Equal`.", Optional: true, Validators: nonEmptyString},
			"effect": schema.StringAttribute{MarkdownDescription: "`NoSchedule`, `PreferNoSchedule` or `NoExecute`; null matches all.",
				Optional: true, Validators: []validator.String{stringvalidator.OneOf("NoSchedule", "PreferNoSchedule", "NoExecute")}},
			"toleration_seconds": schema.Int64Attribute{MarkdownDescription: "With `NoExecute`: how long the pod stays after the taint appears; null for ever.",
				Optional: true},
		}},
	}
}

// envAttribute is a list of environment variables: a literal value, or a key of a Secret or a
// ConfigMap (refWhere says where, for the kind).
func envAttribute(desc string, refWhere func(kind string) string) schema.ListNestedAttribute {
	nonEmptyString := []validator.String{stringvalidator.LengthAtLeast(1)}
	keyRef := func(kind string) schema.SingleNestedAttribute {
		return schema.SingleNestedAttribute{
			MarkdownDescription: "A key of a " + kind + " " + refWhere(kind) + ".",
			Optional:            true,
			Attributes: map[string]schema.Attribute{
				"name": schema.StringAttribute{MarkdownDescription: "Name of the " + kind + ".", Required: true, Validators: nonEmptyString},
				"key":  schema.StringAttribute{MarkdownDescription: "Data key in the " + kind + ".", Required: true, Validators: nonEmptyString},
				"optional": schema.BoolAttribute{
					MarkdownDescription: "Start the pod even when the " + kind + " or the key is missing. Defaults to `false`.",
					Optional:            true, Computed: true, Default: booldefault.StaticBool(false),
				},
			},
		}
	}
	return schema.ListNestedAttribute{
		MarkdownDescription: desc,
		Optional:            true,
		Validators:          []validator.List{listvalidator.SizeAtLeast(1)},
		NestedObject: schema.NestedAttributeObject{
			Attributes: map[string]schema.Attribute{
				"name": schema.StringAttribute{MarkdownDescription: "Variable name.", Required: true,
					Validators: []validator.String{stringvalidator.RegexMatches(envNamePattern, "must be an environment variable name (letters, digits, '_', '-' and '.', not starting with a digit)")}},
				"value":              schema.StringAttribute{MarkdownDescription: "Literal value; leave it out (with both references) for an empty one.", Optional: true, Validators: nonEmptyString},
				"secret_key_ref":     keyRef("Secret"),
				"config_map_key_ref": keyRef("ConfigMap"),
			},
		},
	}
}

// envNamePattern is what Kubernetes takes as an environment variable name.
var envNamePattern = regexp.MustCompile(`^[-._a-zA-Z][-._a-zA-Z0-9]*$`)
