// Package provider is the framework glue of the Outpost Terraform provider: schemas, plan
// modifiers and CRUD that map Terraform configuration onto the orchestrator API (package api),
// the cluster (client-go) and the embedded agent chart (package helm).
package provider

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/function"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// Environment variables the provider configuration falls back to.
const (
	envAPIURL         = "OUTPOST_API_URL"
	envOrgID          = "OUTPOST_ORG_ID"
	envToken          = "OUTPOST_TOKEN"
	envKubeConfigPath = "KUBE_CONFIG_PATH"
)

// Ensure the implementation satisfies the expected interfaces.
var (
	_ provider.Provider              = (*outpostProvider)(nil)
	_ provider.ProviderWithFunctions = (*outpostProvider)(nil)
)

// outpostProvider is the provider implementation.
type outpostProvider struct {
	// version is the provider's release version, "dev" for local builds and "test" in tests.
	version string
}

// outpostProviderModel maps the provider configuration.
type outpostProviderModel struct {
	APIURL     types.String           `tfsdk:"api_url"`
	OrgID      types.String           `tfsdk:"org_id"`
	Token      types.String           `tfsdk:"token"`
	Kubernetes *kubernetesConfigModel `tfsdk:"kubernetes"`
	// InsecureAllowHTTP: see provider_insecure_http.go.
	InsecureAllowHTTP types.Bool `tfsdk:"insecure_allow_http"`
}

// New returns a function that builds the provider, as providerserver expects.
func New(version string) func() provider.Provider {
	return func() provider.Provider {
		return &outpostProvider{version: version}
	}
}

func (p *outpostProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "outpost"
	resp.Version = p.version
}

func (p *outpostProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The Outpost provider registers runners and state storages with an Outpost orchestrator, " +
			"generates the runners' ed25519 key pairs, and installs the Outpost agent into a Kubernetes cluster " +
			"through the embedded Helm chart.\n\n" +
			"`api_url`, `org_id` and `token` are needed only where the orchestrator is called: by `outpost_state_storage`, " +
			"`outpost_kubernetes_agent_runner`, the data sources, and `outpost_kubernetes_agent` (which needs `api_url` and " +
			"`org_id` for the agent, and the token only to wait for the agent's connection). Key pairs and functions work " +
			"without them; a missing setting fails the plan of the resource that needs it.",
		Attributes: map[string]schema.Attribute{
			"api_url": schema.StringAttribute{
				MarkdownDescription: "Base URL of the Outpost orchestrator, e.g. `https://outpost.example.com`. " +
					"Falls back to the `" + envAPIURL + "` environment variable.",
				Optional: true,
			},
			"org_id": schema.StringAttribute{
				MarkdownDescription: "Organisation the provider works in (a DNS-1123 label). " +
					"Falls back to the `" + envOrgID + "` environment variable.",
				Optional: true,
			},
			"token": schema.StringAttribute{
				MarkdownDescription: "Admin token of the orchestrator. Falls back to the `" + envToken + "` environment variable; " +
					"prefer the variable so the token stays out of configuration files.",
				Optional:  true,
				Sensitive: true,
			},
			"insecure_allow_http": schema.BoolAttribute{
				MarkdownDescription: insecureAllowHTTPDescription,
				Optional:            true,
			},
		},
		Blocks: map[string]schema.Block{
			"kubernetes": kubernetesConfigBlock(),
		},
	}
}

// Configure resolves the orchestrator settings (configuration first, then environment) and
// prepares the lazily connected Kubernetes clients.
//
// Only the resources and data sources that call the orchestrator need its settings, so a setting
// that is missing or unknown is not an error here: a configuration with only key pairs (or only
// functions) needs no orchestrator at all. Those that do report a missing setting at plan time
// (providerData.missingSettings) and an unknown one when they actually need the client
// (providerData.adminClient), so a plan can proceed as far as it can. Values that are set but
// malformed are errors on the attribute here, naming the environment variable that could set them.
func (p *outpostProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var config outpostProviderModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}

	data := &providerData{version: p.version}
	values := map[string]types.String{"api_url": config.APIURL, "org_id": config.OrgID, "token": config.Token}
	targets := map[string]*string{"api_url": &data.apiURL, "org_id": &data.orgID, "token": &data.token}
	for _, s := range orchestratorSettings {
		value := values[s.attr]
		if value.IsUnknown() {
			data.unknown = append(data.unknown, s)
			continue
		}
		v := os.Getenv(s.env)
		if !value.IsNull() {
			v = value.ValueString()
		}
		v = strings.TrimSpace(v)
		if v == "" {
			data.missing = append(data.missing, s)
			continue
		}
		*targets[s.attr] = v
	}
	if data.apiURL != "" {
		if u, err := url.Parse(data.apiURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			resp.Diagnostics.AddAttributeError(path.Root("api_url"),
				"Invalid Outpost API URL",
				fmt.Sprintf("%q is not an absolute http(s) URL. Set api_url (or %s) to the orchestrator's base URL, "+
					"like https://outpost.example.com.", data.apiURL, envAPIURL))
		}
	}
	allowHTTP := insecureAllowHTTP(config.InsecureAllowHTTP, &resp.Diagnostics)
	if data.apiURL != "" {
		checkAPIURLTransport(data.apiURL, allowHTTP, &resp.Diagnostics)
	}
	if data.orgID != "" {
		if err := api.ValidateID("org_id", data.orgID); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("org_id"),
				"Invalid Outpost Organisation ID",
				fmt.Sprintf("%s. Set org_id (or %s) to your organisation's id.", err, envOrgID))
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}

	kube, diags := newKubeConnector(config.Kubernetes)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	data.kube = kube

	if len(data.unknown) == 0 && len(data.missing) == 0 {
		opts := []client.Option{client.WithUserAgent("terraform-provider-outpost/" + p.version), client.WithRequestHook(logRequest)}
		if allowHTTP {
			opts = append(opts, client.AllowInsecureHTTP())
		}
		admin, err := client.NewAdminClient(data.apiURL, data.orgID, data.token, opts...)
		if err != nil {
			resp.Diagnostics.AddError("Unable to Create Outpost Client",
				"The orchestrator client could not be built from the provider configuration. Check api_url and org_id.\n\n"+
					"Original error: "+err.Error())
			return
		}
		data.client = admin
	}

	ctx = tflog.SetField(ctx, "outpost_api_url", data.apiURL)
	ctx = tflog.SetField(ctx, "outpost_org_id", data.orgID)
	tflog.Info(ctx, "configured the outpost provider", map[string]any{"provider_version": p.version, "unknown_settings": len(data.unknown), "missing_settings": len(data.missing)})

	resp.ResourceData = data
	resp.DataSourceData = data
}

func (p *outpostProvider) Resources(_ context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		NewKeyPairResource,
		NewStateStorageResource,
		NewScheduleResource,
		NewKubernetesAgentRunnerResource,
		NewKubernetesAgentResource,
	}
}

func (p *outpostProvider) DataSources(_ context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{
		NewStateStorageDataSource,
		NewKubernetesAgentRunnerDataSource,
	}
}

func (p *outpostProvider) Functions(_ context.Context) []func() function.Function {
	return []func() function.Function{
		NewRunnerIDFunction,
	}
}

// logRequest writes one try of an orchestrator request to the provider log. It never logs bodies
// or credentials (RequestInfo holds neither).
func logRequest(ctx context.Context, info client.RequestInfo) {
	fields := map[string]any{
		"method":      info.Method,
		"path":        info.Path,
		"try":         info.Try,
		"status":      info.Status,
		"duration_ms": info.Duration.Milliseconds(),
	}
	if info.Err != nil {
		fields["error"] = info.Err.Error()
	}
	tflog.Debug(ctx, "orchestrator request", fields)
}
