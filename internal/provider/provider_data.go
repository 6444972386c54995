package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// providerData is what Configure hands to resources and data sources.
type providerData struct {
	version string
	apiURL  string
	orgID   string
	token   string
	// client is nil while a setting is unknown (see unknown).
	client *client.AdminClient
	// unknown lists the orchestrator settings that were unknown at Configure time.
	unknown []unknownSetting
	// kube connects to the cluster on first use; only resources that touch the cluster call it.
	kube *kubeConnector
}

// unknownSetting is a provider setting whose value was not known when the provider was configured.
type unknownSetting struct {
	attr, label, env string
}

// adminClient returns the orchestrator client, or a diagnostic per provider setting that was
// unknown when the provider was configured.
func (d *providerData) adminClient() (*client.AdminClient, diag.Diagnostics) {
	var diags diag.Diagnostics
	if d == nil {
		diags.Append(notConfigured())
		return nil, diags
	}
	if d.client != nil {
		return d.client, nil
	}
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
