package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"
	"helm.sh/helm/v3/pkg/release"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/helm"
)

// Default operation timeouts of outpost_kubernetes_agent (the timeouts block overrides them).
const (
	defaultAgentCreateTimeout = 10 * time.Minute
	defaultAgentUpdateTimeout = 10 * time.Minute
	defaultAgentDeleteTimeout = 5 * time.Minute
)

const releaseDescription = "managed by Terraform (outpost_kubernetes_agent)"

func (r *kubernetesAgentResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan kubernetesAgentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, diags := plan.Timeouts.Create(ctx, defaultAgentCreateTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	state, diags := r.apply(ctx, plan, true, timeout)
	resp.Diagnostics.Append(diags...)
	if state != nil {
		resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
	}
}

func (r *kubernetesAgentResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan kubernetesAgentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var prior kubernetesAgentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !plan.Revision.IsUnknown() {
		// Only attributes that do not reach the chart changed (wait_for_connection, timeouts,
		// the image pull Secret's content, ...).
		if managesPullSecret(plan) || managesPullSecret(prior) {
			conn, diags := r.data.kubeConnect(ctx)
			resp.Diagnostics.Append(diags...)
			if resp.Diagnostics.HasError() {
				return
			}
			resp.Diagnostics.Append(r.applyPullSecret(ctx, conn, plan)...)
			resp.Diagnostics.Append(r.deletePullSecrets(ctx, conn, prior, &plan)...)
			if resp.Diagnostics.HasError() {
				return
			}
		}
		resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
		return
	}
	timeout, diags := plan.Timeouts.Update(ctx, defaultAgentUpdateTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	state, diags := r.apply(ctx, plan, false, timeout)
	resp.Diagnostics.Append(diags...)
	if state != nil {
		if conn, d := r.data.kubeConnect(ctx); !d.HasError() {
			// After the upgrade: the pods of the new revision pull with the new Secret.
			resp.Diagnostics.Append(r.deletePullSecrets(ctx, conn, prior, state)...)
		}
		resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
	}
}

// apply installs or upgrades the release and waits for the agent. It returns the state to save
// (also when a later step failed, so Terraform tracks the release) and the diagnostics.
func (r *kubernetesAgentResource) apply(ctx context.Context, plan kubernetesAgentModel, creating bool, timeout time.Duration) (*kubernetesAgentModel, diag.Diagnostics) {
	var diags diag.Diagnostics
	// Without the orchestrator's settings (no token, say) the agent is installed unchecked, as long
	// as nothing waits for its connection (ModifyPlan refuses that plan).
	var admin *client.AdminClient
	if plan.WaitForConnection.ValueBool() || r.data.hasOrchestrator() {
		c, d := r.data.adminClient()
		diags.Append(d...)
		admin = c
	}
	conn, d := r.data.kubeConnect(ctx)
	diags.Append(d...)
	if diags.HasError() {
		return nil, diags
	}
	if admin != nil {
		diags.Append(r.checkRunner(ctx, admin, plan)...)
	}
	if diags.HasError() {
		return nil, diags
	}
	vals, err := plan.chartValues()
	if err != nil {
		diags.AddAttributeError(path.Root("values"), "Invalid Chart Values",
			"The chart values could not be built from the resource's attributes.\n\nOriginal error: "+err.Error())
		return nil, diags
	}
	diags.Append(r.prepareNamespaces(ctx, conn, plan, vals)...)
	if diags.HasError() {
		return nil, diags
	}
	diags.Append(r.applyPullSecret(ctx, conn, plan)...)
	if diags.HasError() {
		return nil, diags
	}
	rel, d := r.deploy(ctx, conn, plan, creating)
	diags.Append(d...)
	if rel == nil {
		return nil, diags
	}
	state := plan
	d = state.setRelease(rel)
	diags.Append(d...)
	state.DriftDetected = types.BoolValue(false)
	if diags.HasError() {
		return &state, diags
	}
	if plan.WaitForConnection.ValueBool() {
		diags.Append(r.waitForConnection(ctx, admin, conn, plan, rel, timeout)...)
	}
	return &state, diags
}

// deploy recovers a pending release, then installs or upgrades it. A non-nil release with error
// diagnostics is a release Helm recorded as failed.
func (r *kubernetesAgentResource) deploy(ctx context.Context, conn *kubeConn, plan kubernetesAgentModel, creating bool) (*release.Release, diag.Diagnostics) {
	var diags diag.Diagnostics
	ns, name := plan.Namespace.ValueString(), plan.ReleaseName.ValueString()
	fields := map[string]any{"namespace": ns, "release": name}
	vals, err := plan.chartValues()
	if err != nil {
		diags.AddAttributeError(path.Root("values"), "Invalid Chart Values",
			"The chart values could not be built from the resource's attributes.\n\nOriginal error: "+err.Error())
		return nil, diags
	}
	chrt, err := agentchart.Load()
	if err != nil {
		diags.AddError("Unable to Load Agent Chart", "The chart embedded in the provider could not be loaded. "+
			"This is always a bug in the provider code and should be reported to the provider developers.\n\nOriginal error: "+err.Error())
		return nil, diags
	}
	cfg, d := r.helmConfig(ctx, conn, ns)
	diags.Append(d...)
	if diags.HasError() {
		return nil, diags
	}
	opts := helm.InstallOptions{ReleaseName: name, Namespace: ns, Timeout: helmTimeout(ctx), Description: releaseDescription}

	rec, err := helm.RecoverPending(ctx, cfg, name, opts.Timeout)
	if err != nil {
		addKubeError(&diags, "Unable to Recover Pending Release", fmt.Sprintf("recover release %s/%s from %s", ns, name, rec.PendingStatus),
			"Helm refuses to change a release while an operation is pending. Make sure no other helm run is working on it, "+
				"then retry, or roll it back yourself (helm -n "+ns+" rollback "+name+").", err)
		return nil, diags
	}
	if rec.Action != helm.RecoveryNone {
		fields["recovery"], fields["pending_revision"], fields["pending_status"] = rec.Action, rec.PendingRevision, rec.PendingStatus.String()
		tflog.Warn(ctx, "recovered a release stuck in a pending state", fields)
		detail := fmt.Sprintf("Revision %d of release %s/%s was stuck in %s (an earlier run was interrupted); it was ", rec.PendingRevision, ns, name, rec.PendingStatus)
		if rec.Action == helm.RecoveryRollback {
			detail += fmt.Sprintf("rolled back to revision %d before the upgrade.", rec.RolledBackTo)
		} else {
			detail += "uninstalled (it never had a deployed revision) before installing afresh."
		}
		diags.AddWarning("Recovered Pending Release", detail)
	}

	hist, err := helm.History(cfg, name)
	if err != nil && !helm.IsNotFound(err) {
		addKubeError(&diags, "Unable to Read Release", fmt.Sprintf("read the history of release %s/%s", ns, name),
			"Check the provider's kubernetes block and that its identity may read Secrets in the namespace.", err)
		return nil, diags
	}
	var rel *release.Release
	verb := "install"
	if len(hist) == 0 {
		tflog.Info(ctx, "installing the agent chart", fields)
		rel, err = helm.Install(ctx, cfg, chrt, vals, opts)
	} else {
		if creating && hist[len(hist)-1].Info.Status == release.StatusDeployed {
			diags.AddError("Release Already Exists",
				fmt.Sprintf("Release %s/%s is already installed (revision %d) but not managed by this resource. Import it "+
					"(terraform import <address> %s/%s), uninstall it (helm -n %s uninstall %s), or choose another release_name.",
					ns, name, hist[len(hist)-1].Version, ns, name, ns, name))
			return nil, diags
		}
		verb = "upgrade"
		tflog.Info(ctx, "upgrading the agent chart", fields)
		rel, err = helm.Upgrade(ctx, cfg, chrt, vals, opts)
	}
	if err != nil {
		summary, what := "Unable to "+titleCase(verb)+" Agent Chart", fmt.Sprintf("%s the agent chart as release %s/%s", verb, ns, name)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			// Helm may still be writing to rel in the background; it must not be read.
			addKubeError(&diags, summary, what, "The operation ran out of time or was interrupted; the release may be left pending, "+
				"and the next apply recovers it. Raise the timeouts block if this repeats.", err)
			return nil, diags
		}
		addKubeError(&diags, summary, what, "Check the error and the namespace's events (kubectl -n "+ns+" get events). The next apply upgrades the release again.", err)
		if rel != nil && rel.Info != nil && rel.Info.Status == release.StatusFailed {
			return rel, diags
		}
		return nil, diags
	}
	fields["revision"] = rel.Version
	tflog.Info(ctx, "deployed the agent chart", fields)
	return rel, diags
}

func (r *kubernetesAgentResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state kubernetesAgentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	conn, diags := r.data.kubeConnect(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns, name := state.Namespace.ValueString(), state.ReleaseName.ValueString()
	cfg, diags := r.helmConfig(ctx, conn, ns)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	rel, err := helm.Get(cfg, name)
	if helm.IsNotFound(err) {
		tflog.Warn(ctx, "the release is gone; removing it from state", map[string]any{"namespace": ns, "release": name})
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addKubeError(&resp.Diagnostics, "Unable to Read Release", fmt.Sprintf("read release %s/%s", ns, name),
			"Check the provider's kubernetes block and that its identity may read Secrets in the namespace.", err)
		return
	}
	if state.RunnerID.IsNull() {
		// Import: the configuration's inputs come back from the release's values.
		resp.Diagnostics.Append(state.setInputsFromValues(rel.Config)...)
	}
	resp.Diagnostics.Append(state.setRelease(rel)...)
	resp.Diagnostics.Append(readPullSecret(ctx, conn, &state)...)
	drift, err := helm.LiveDrift(ctx, conn.clientset, rel)
	if err != nil {
		resp.Diagnostics.AddWarning("Unable to Check Live Drift",
			fmt.Sprintf("The live objects of release %s/%s could not be compared with the release; drift outside Helm goes unnoticed. "+
				"Check that the provider's identity may read Deployments in the namespace.\n\nOriginal error: %s", ns, name, err))
	}
	state.DriftDetected = types.BoolValue(len(drift) > 0)
	if len(drift) > 0 {
		tflog.Warn(ctx, "the live agent differs from the release", map[string]any{"namespace": ns, "release": name, "drift": strings.Join(drift, "; ")})
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *kubernetesAgentResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state kubernetesAgentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, diags := state.Timeouts.Delete(ctx, defaultAgentDeleteTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, diags := r.data.kubeConnect(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns, name := state.Namespace.ValueString(), state.ReleaseName.ValueString()
	cfg, diags := r.helmConfig(ctx, conn, ns)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := helm.Uninstall(ctx, cfg, name, helmTimeout(ctx)); err != nil {
		addKubeError(&resp.Diagnostics, "Unable to Uninstall Agent Chart", fmt.Sprintf("uninstall release %s/%s", ns, name),
			"Retry the destroy; if it keeps failing, uninstall it yourself (helm -n "+ns+" uninstall "+name+") and remove it from state.", err)
		return
	}
	tflog.Info(ctx, "uninstalled the agent chart", map[string]any{"namespace": ns, "release": name})
	resp.Diagnostics.Append(r.deletePullSecrets(ctx, conn, state, nil)...)
}

// setRelease copies what the release says into the computed attributes.
func (m *kubernetesAgentModel) setRelease(rel *release.Release) diag.Diagnostics {
	var diags diag.Diagnostics
	m.ID = types.StringValue(m.Namespace.ValueString() + "/" + m.ReleaseName.ValueString())
	m.Revision = types.Int64Value(int64(rel.Version))
	m.Status = types.StringValue(rel.Info.Status.String())
	if rel.Chart != nil && rel.Chart.Metadata != nil {
		m.ChartVersion = types.StringValue(rel.Chart.Metadata.Version)
		m.AppVersion = types.StringValue(rel.Chart.Metadata.AppVersion)
	}
	sum, err := helm.ValuesSHA256(rel.Config)
	if err != nil {
		diags.AddError("Unable to Hash Chart Values", fmt.Sprintf("The values of release %s could not be hashed. This is always a bug in the provider code and should be reported to the provider developers.\n\nOriginal error: %s", rel.Name, err))
		return diags
	}
	m.ValuesSHA256 = types.StringValue(sum)
	if m.DriftDetected.IsNull() || m.DriftDetected.IsUnknown() {
		m.DriftDetected = types.BoolValue(false)
	}
	return diags
}
