package provider

import (
	"context"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// Runner status values.
const (
	runnerConnected    = "connected"
	runnerDisconnected = "disconnected"
)

// runnerModel maps outpost_kubernetes_agent_runner (resource and data source).
type runnerModel struct {
	ID                  types.String    `tfsdk:"id"`
	OrgID               types.String    `tfsdk:"org_id"`
	Description         types.String    `tfsdk:"description"`
	PublicKeys          types.List      `tfsdk:"public_keys"` //< string
	Job                 *runnerJobModel `tfsdk:"job"`
	StateStorageID      types.String    `tfsdk:"state_storage_id"`
	MaxConcurrency      types.Int64     `tfsdk:"max_concurrency"`
	RequireApproval     types.Bool      `tfsdk:"require_approval"`
	JobTimeout          durationValue   `tfsdk:"job_timeout"`
	Status              types.String    `tfsdk:"status"`
	LastSeenAt          types.String    `tfsdk:"last_seen_at"`
	AgentVersion        types.String    `tfsdk:"agent_version"`
	AgentKeyFingerprint types.String    `tfsdk:"agent_key_fingerprint"`
}

// runnerJobModel maps the job block; its job pod settings are in jobPodModel.
type runnerJobModel struct {
	Namespace      types.String     `tfsdk:"namespace"`
	ServiceAccount types.String     `tfsdk:"service_account"`
	PodTemplate    podTemplateValue `tfsdk:"pod_template"`
	jobPodModel
}

// toAPI builds the create/update body. The plan is fully known at apply time.
func (m runnerModel) toAPI(ctx context.Context) (api.RunnerInput, diag.Diagnostics) {
	var pems []string
	diags := m.PublicKeys.ElementsAs(ctx, &pems, false)
	in := api.RunnerInput{
		ID:             m.ID.ValueString(),
		Description:    m.Description.ValueString(),
		PublicKeys:     pems,
		StateStorageID: m.StateStorageID.ValueString(),
		MaxConcurrency: int(m.MaxConcurrency.ValueInt64()),
		// Null and unknown read as false: the default.
		RequireApproval: m.RequireApproval.ValueBool(),
	}
	if m.Job != nil {
		in.Job = api.RunnerJob{
			Namespace:      m.Job.Namespace.ValueString(),
			ServiceAccount: m.Job.ServiceAccount.ValueString(),
			PodTemplate:    m.Job.PodTemplate.ValueString(),
			Pod:            m.Job.toAPI(),
		}
	}
	if !m.JobTimeout.IsNull() && !m.JobTimeout.IsUnknown() {
		secs, err := parseJobTimeout(m.JobTimeout.ValueString())
		if err != nil {
			diags.AddAttributeError(pathJobTimeout, "Invalid Job Timeout", err.Error())
		}
		in.JobTimeoutSeconds = secs
	}
	return in, diags
}

// runnerModelFromAPI maps a runner of organisation org onto the model. prior (the plan or the
// state) supplies the spelling of values the orchestrator may store in another but equivalent
// form: a public key that parses to the same key keeps the configured text.
func runnerModelFromAPI(r *api.Runner, org string, prior *runnerModel) (runnerModel, diag.Diagnostics) {
	var diags diag.Diagnostics
	var priorKeys []attr.Value
	if prior != nil && !prior.PublicKeys.IsNull() && !prior.PublicKeys.IsUnknown() {
		priorKeys = prior.PublicKeys.Elements()
	}
	pems := make([]attr.Value, len(r.PublicKeys))
	for i, p := range r.PublicKeys {
		pems[i] = types.StringValue(p)
		if i < len(priorKeys) {
			if s, ok := priorKeys[i].(types.String); ok && samePublicKey(s.ValueString(), p) {
				pems[i] = s
			}
		}
	}
	keyList, d := types.ListValue(types.StringType, pems)
	diags.Append(d...)

	m := runnerModel{
		ID:              types.StringValue(r.ID),
		OrgID:           types.StringValue(org),
		Description:     optionalString(r.Description),
		PublicKeys:      keyList,
		StateStorageID:  types.StringValue(r.StateStorageID),
		MaxConcurrency:  types.Int64Value(int64(r.MaxConcurrency)),
		RequireApproval: types.BoolValue(r.RequireApproval),
		JobTimeout:      newDurationValue(formatSeconds(r.JobTimeoutSeconds)),
		Job: &runnerJobModel{
			Namespace:      types.StringValue(r.Job.Namespace),
			ServiceAccount: types.StringValue(r.Job.ServiceAccount),
			PodTemplate:    newPodTemplateNull(),
			jobPodModel:    jobPodModelFromAPI(r.Job.Pod),
		},
		Status:              types.StringValue(runnerDisconnected),
		LastSeenAt:          types.StringNull(),
		AgentVersion:        optionalString(r.Status.AgentVersion),
		AgentKeyFingerprint: optionalString(r.Status.KeyFingerprint),
	}
	if r.Job.PodTemplate != "" {
		m.Job.PodTemplate = newPodTemplateValue(r.Job.PodTemplate)
	}
	if r.Status.Connected {
		m.Status = types.StringValue(runnerConnected)
	}
	if r.Status.LastSeenAt != nil {
		m.LastSeenAt = types.StringValue(r.Status.LastSeenAt.UTC().Format(time.RFC3339))
	}
	return m, diags
}

// samePublicKey reports whether two PEM texts hold the same public key.
func samePublicKey(a, b string) bool {
	if a == b {
		return true
	}
	ka, errA := keys.ParsePublicPEM(a)
	kb, errB := keys.ParsePublicPEM(b)
	return errA == nil && errB == nil && ka.Equal(kb)
}
