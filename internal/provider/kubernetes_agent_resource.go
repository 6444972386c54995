package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"helm.sh/helm/v3/pkg/action"
	helmchart "helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/internal/helm"
)

// Ensure provider defined types fully satisfy framework interfaces.
var (
	_ resource.ResourceWithConfigure   = (*kubernetesAgentResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*kubernetesAgentResource)(nil)
	_ resource.ResourceWithImportState = (*kubernetesAgentResource)(nil)
)

// NewKubernetesAgentResource returns the outpost_kubernetes_agent resource.
func NewKubernetesAgentResource() resource.Resource {
	return &kubernetesAgentResource{}
}

// kubernetesAgentResource installs the embedded agent chart. Schema in _schema.go, model and
// chart values in _model.go, CRUD in _crud.go with the install preparation in _prepare.go, the
// wait for the agent's connection in _wait.go, the import mapping in _import.go.
type kubernetesAgentResource struct {
	data *providerData
}

func (r *kubernetesAgentResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_kubernetes_agent"
}

func (r *kubernetesAgentResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	data, diags := providerDataFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	r.data = data
}

// ModifyPlan fills in the defaults that depend on other values (the provider's api_url and
// org_id, the namespaces) and decides whether the release needs an upgrade: when the values the
// configuration asks for differ from the deployed ones, when the provider embeds another chart
// version, when the release is not `deployed`, or when the live Deployment drifted. The computed
// attributes then show what changes; otherwise they keep their state values and the plan is empty.
func (r *kubernetesAgentResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy
	}
	var plan, config kubernetesAgentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if r.data != nil {
		if config.APIURL.IsNull() {
			plan.APIURL = providerSetting(r.data, "api_url", r.data.apiURL)
		}
		if config.OrgID.IsNull() {
			plan.OrgID = providerSetting(r.data, "org_id", r.data.orgID)
		}
		resp.Diagnostics.Append(r.data.missingForAgent(!config.APIURL.IsNull(), !config.OrgID.IsNull(), plan.WaitForConnection)...)
		if resp.Diagnostics.HasError() {
			return
		}
	}
	// The jobs and the states get namespaces of their own, apart from the agent and its key.
	if config.JobNamespace.IsNull() {
		plan.JobNamespace = ownNamespace(plan.Namespace, "jobs")
	}
	if config.StateNamespace.IsNull() {
		plan.StateNamespace = ownNamespace(plan.Namespace, "state")
	}
	for _, n := range []struct {
		attr string
		v    types.String
	}{{"job_namespace", plan.JobNamespace}, {"state_namespace", plan.StateNamespace}} {
		if !n.v.IsUnknown() && len(n.v.ValueString()) > 63 {
			resp.Diagnostics.AddAttributeError(path.Root(n.attr), "Namespace Name Too Long",
				fmt.Sprintf("The default %s %q is longer than the 63 characters of a namespace name. Set %s.", n.attr, n.v.ValueString(), n.attr))
			return
		}
	}
	plan.ID = types.StringUnknown()
	if !plan.Namespace.IsUnknown() && !plan.ReleaseName.IsUnknown() {
		plan.ID = types.StringValue(plan.Namespace.ValueString() + "/" + plan.ReleaseName.ValueString())
	}
	chartVersion, appVersion := agentchart.InstallVersions()
	plan.ChartVersion = types.StringValue(chartVersion)
	plan.AppVersion = types.StringValue(appVersion)

	desired := types.StringUnknown()
	vals, err := plan.chartValues()
	switch {
	case errors.Is(err, errUnknownValues):
	case err != nil:
		resp.Diagnostics.AddAttributeError(path.Root("values"), "Invalid Chart Values",
			"The chart values built from this resource's attributes are not valid. Fix the attribute named in the error.\n\nOriginal error: "+err.Error())
		return
	default:
		if err := validateChartValues(ctx, vals, plan.Namespace); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("values"), "Invalid Chart Values",
				fmt.Sprintf("The agent chart %s refuses these values. Check `values` and the attributes that set chart values "+
					"against the chart's README.\n\nOriginal error: %s", chartVersion, err))
			return
		}
		sum, err := helm.ValuesSHA256(vals)
		if err != nil {
			resp.Diagnostics.AddError("Unable to Hash Chart Values", "This is always a bug in the provider code and should be reported to the provider developers.\n\nOriginal error: "+err.Error())
			return
		}
		desired = types.StringValue(sum)
	}

	var state *kubernetesAgentModel
	if !req.State.Raw.IsNull() {
		state = &kubernetesAgentModel{}
		resp.Diagnostics.Append(req.State.Get(ctx, state)...)
		if resp.Diagnostics.HasError() {
			return
		}
	}
	if state != nil && !needsUpgrade(*state, desired) {
		plan.Revision, plan.Status, plan.ValuesSHA256, plan.DriftDetected = state.Revision, state.Status, state.ValuesSHA256, state.DriftDetected
	} else {
		plan.Revision = types.Int64Unknown()
		plan.Status = types.StringValue(release.StatusDeployed.String())
		plan.ValuesSHA256 = desired
		plan.DriftDetected = types.BoolValue(false)
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, plan)...)
}

// needsUpgrade reports whether the release in state differs from what the plan wants.
func needsUpgrade(state kubernetesAgentModel, desiredValues types.String) bool {
	return state.Status.ValueString() != release.StatusDeployed.String() ||
		state.ChartVersion.ValueString() != installedChartVersion() ||
		desiredValues.IsUnknown() ||
		desiredValues.ValueString() != state.ValuesSHA256.ValueString() ||
		state.DriftDetected.ValueBool()
}

// installedChartVersion is the version of the chart this provider installs.
func installedChartVersion() string {
	v, _ := agentchart.InstallVersions()
	return v
}

// providerSetting is the provider's value of an orchestrator setting, unknown while the
// provider's own value is.
func providerSetting(d *providerData, attr, v string) types.String {
	for _, u := range d.unknown {
		if u.attr == attr {
			return types.StringUnknown()
		}
	}
	return types.StringValue(v)
}

var (
	chartOnce   sync.Once
	loadedChart *helmchart.Chart
	chartErr    error
)

// embeddedChart loads the embedded chart once; callers must not modify it.
func embeddedChart() (*helmchart.Chart, error) {
	chartOnce.Do(func() { loadedChart, chartErr = agentchart.Load() })
	return loadedChart, chartErr
}

// ownNamespace is <namespace>-<suffix>, unknown while namespace is.
func ownNamespace(namespace types.String, suffix string) types.String {
	if namespace.IsUnknown() {
		return types.StringUnknown()
	}
	return types.StringValue(namespace.ValueString() + "-" + suffix)
}

// validateChartValues checks values against the chart's values.schema.json and renders the
// chart client-side in the release namespace, as Helm will at install time, so mistakes in
// `values` and every check the chart makes (such as jobs.rbac.rules next to the runner's key)
// fail the plan.
func validateChartValues(ctx context.Context, vals map[string]any, namespace types.String) error {
	chrt, err := embeddedChart()
	if err != nil {
		return err
	}
	coalesced, err := chartutil.CoalesceValues(chrt, copyValues(vals))
	if err != nil {
		return err
	}
	if err := chartutil.ValidateAgainstSchema(chrt, coalesced); err != nil {
		return err
	}
	if namespace.IsUnknown() {
		return nil
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun, install.ClientOnly, install.IncludeCRDs = true, true, false
	install.ReleaseName, install.Namespace = defaultReleaseName, namespace.ValueString()
	// A client-only render checks against this version instead of the cluster's; any version
	// the chart supports renders the same objects.
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.34.0", Major: "1", Minor: "34"}
	_, err = install.RunWithContext(ctx, chrt, copyValues(vals))
	return err
}

// copyValues deep-copies values, because Helm's coalescing writes into the map it is given.
func copyValues(v map[string]any) map[string]any {
	out := make(map[string]any, len(v))
	for k, e := range v {
		switch t := e.(type) {
		case map[string]any:
			out[k] = copyValues(t)
		case []any:
			l := make([]any, len(t))
			for i, x := range t {
				if m, ok := x.(map[string]any); ok {
					l[i] = copyValues(m)
				} else {
					l[i] = x
				}
			}
			out[k] = l
		default:
			out[k] = e
		}
	}
	return out
}

// ImportState imports a release by "<namespace>/<release_name>"; Read fills in the attributes
// from the release's values.
func (r *kubernetesAgentResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	ns, name, ok := strings.Cut(req.ID, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		resp.Diagnostics.AddError("Invalid Import ID",
			fmt.Sprintf("Expected \"<namespace>/<release_name>\", e.g. \"outpost-system/outpost-agent\", got %q.", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("namespace"), ns)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("release_name"), name)...)
}
