package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// providerData is what Configure hands to resources and data sources.
type providerData struct {
	version string
	apiURL  string
	orgID   string
	token   string
	// client is nil while a setting is unknown or missing.
	client *client.AdminClient
	// unknown lists the orchestrator settings that were unknown at Configure time.
	unknown []orchestratorSetting
	// missing lists the orchestrator settings set neither in the configuration nor in the
	// environment.
	missing []orchestratorSetting
	// kube connects to the cluster on first use; only resources that touch the cluster call it.
	kube *kubeConnector
}

// orchestratorSetting is a provider setting that only the orchestrator's callers need.
type orchestratorSetting struct {
	attr, label, env string
	// hint says how to set it.
	hint string
}

// orchestratorSettings are the provider settings of the orchestrator, in the order they are
// reported.
var orchestratorSettings = []orchestratorSetting{
	{"api_url", "Outpost API URL", envAPIURL, `Set api_url = "https://outpost.example.com" in the provider configuration or the ` + envAPIURL + ` environment variable.`},
	{"org_id", "Outpost Organisation ID", envOrgID, `Set org_id = "my-org" in the provider configuration or the ` + envOrgID + ` environment variable.`},
	{"token", "Outpost Token", envToken, `Set the ` + envToken + ` environment variable to an admin token of the orchestrator (or token in the provider configuration, which puts it into your files).`},
}

// missingSettings returns an error per orchestrator setting that is set neither in the provider
// configuration nor in the environment. Resources that call the orchestrator report them from
// ModifyPlan, so the plan fails where a setting is needed and nowhere else.
func (d *providerData) missingSettings() diag.Diagnostics {
	var diags diag.Diagnostics
	if d == nil {
		return diags // not configured yet (validation): checked again once it is
	}
	for _, m := range d.missing {
		diags.AddError("Missing "+m.label,
			fmt.Sprintf("The provider cannot reach the Outpost orchestrator without %s, and this needs it. %s", m.attr, m.hint))
	}
	return diags
}

// missingForAgent is missingSettings for outpost_kubernetes_agent, which calls the orchestrator
// only to check the runner and wait for its connection: it needs api_url and org_id (for the
// agent) unless it sets its own, and the token only when it waits for the connection.
func (d *providerData) missingForAgent(ownAPIURL, ownOrgID bool, wait types.Bool) diag.Diagnostics {
	var diags diag.Diagnostics
	if d == nil {
		return diags
	}
	for _, m := range d.missing {
		switch {
		case m.attr == "api_url" && !ownAPIURL, m.attr == "org_id" && !ownOrgID:
			diags.AddAttributeError(path.Root(m.attr), "Missing "+m.label,
				fmt.Sprintf("The agent needs %s to reach the orchestrator. Set %s on this resource, or: %s", m.attr, m.attr, m.hint))
		case m.attr == "token" && !wait.IsNull() && (wait.IsUnknown() || wait.ValueBool()):
			diags.AddAttributeError(path.Root("wait_for_connection"), "Missing "+m.label,
				"Waiting for the agent's connection asks the orchestrator for the runner's status, which needs the token. "+m.hint+
					" Or set wait_for_connection = false to install the agent without the orchestrator (the runner is then not checked either).")
		}
	}
	return diags
}

// hasOrchestrator reports whether the orchestrator client exists (every setting known and set).
func (d *providerData) hasOrchestrator() bool { return d != nil && d.client != nil }

// adminClient returns the orchestrator client, or a diagnostic per provider setting that was
// missing or unknown when the provider was configured.
func (d *providerData) adminClient() (*client.AdminClient, diag.Diagnostics) {
	var diags diag.Diagnostics
	if d == nil {
		diags.Append(notConfigured())
		return nil, diags
	}
	if d.client != nil {
		return d.client, nil
	}
	diags.Append(d.missingSettings()...)
	for _, u := range d.unknown {
		diags.AddError("Unknown "+u.label,
			fmt.Sprintf("The provider's %q is not known yet (it comes from a resource that has not been applied), "+
				"but this operation needs the Outpost orchestrator. Either apply the source of the value first "+
				"(terraform apply -target=...), set the value statically in the provider configuration, or use the "+
				"%s environment variable.", u.attr, u.env))
	}
	if !diags.HasError() {
		diags.AddError("Outpost Client Not Configured",
			"The provider has no orchestrator client. This is always a bug in the provider code and should be reported to the provider developers.")
	}
	return nil, diags
}

// kubeConnect returns the cluster clients, connecting on first use.
func (d *providerData) kubeConnect(ctx context.Context) (*kubeConn, diag.Diagnostics) {
	if d == nil || d.kube == nil {
		return nil, diag.Diagnostics{notConfigured()}
	}
	return d.kube.connect(ctx)
}

// notConfigured is the diagnostic of an operation that ran before the provider was configured.
func notConfigured() diag.Diagnostic {
	return diag.NewErrorDiagnostic("Provider Not Configured",
		"The operation ran before the provider was configured. This is always a bug in the provider code and should be reported to the provider developers.")
}

// providerDataFrom converts the framework's ProviderData into *providerData. It returns nil
// without diagnostics when the provider is not configured yet (ProviderData is nil during
// validation), which callers treat as "nothing to do".
func providerDataFrom(raw any) (*providerData, diag.Diagnostics) {
	var diags diag.Diagnostics
	if raw == nil {
		return nil, nil
	}
	data, ok := raw.(*providerData)
	if !ok {
		diags.AddError("Unexpected Provider Data Type",
			fmt.Sprintf("Expected *providerData, got %T. This is always a bug in the provider code and should be reported to the provider developers.", raw))
		return nil, diags
	}
	return data, nil
}
