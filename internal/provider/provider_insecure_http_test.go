package provider

import (
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// TestAccProvider_plainHTTPRefused: the provider refuses, before any request, to send its token
// to an http:// orchestrator that is not loopback, and says why and what to do.
func TestAccProvider_plainHTTPRefused(t *testing.T) {
	t.Setenv(envInsecureAllowHTTP, "")
	cfg := func(extra string) string {
		return `
provider "outpost" {
  api_url = "http://orchestrator.example.com:8700"
  org_id  = "acme"
  token   = "opo_never-sent"
` + extra + `
}
` + testAccStateStorageConfig("s1", "kubernetes", "")
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: cfg(""), ExpectError: allPhrases("Insecure Outpost API URL", "unencrypted", "use https://", "insecure_allow_http = true")},
			{Config: cfg("insecure_allow_http = false"), ExpectError: errorPhrase("Insecure Outpost API URL")},
		},
	})
}

func TestInsecureAllowHTTPSetting(t *testing.T) {
	const remote = "http://orchestrator.example.com:8700"
	cases := []struct {
		name    string
		attr    types.Bool
		env     string
		url     string
		summary string // the error expected, "" for none
	}{
		{"remote http refused", types.BoolNull(), "", remote, "Insecure Outpost API URL"},
		{"allowed in the configuration", types.BoolValue(true), "", remote, ""},
		{"allowed by the environment", types.BoolNull(), "true", remote, ""},
		{"the configuration wins over the environment", types.BoolValue(false), "true", remote, "Insecure Outpost API URL"},
		{"loopback needs nothing", types.BoolNull(), "", "http://127.0.0.1:8700", ""},
		{"https needs nothing", types.BoolNull(), "", "https://orchestrator.example.com", ""},
		{"a bad environment value", types.BoolNull(), "sure", remote, "Invalid Insecure HTTP Setting"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envInsecureAllowHTTP, tc.env)
			var diags diag.Diagnostics
			checkAPIURLTransport(tc.url, insecureAllowHTTP(tc.attr, &diags), &diags)
			switch {
			case tc.summary == "" && diags.HasError():
				t.Fatalf("refused: %v", diags)
			case tc.summary != "" && (!diags.HasError() || !strings.Contains(diags.Errors()[0].Summary(), tc.summary)):
				t.Fatalf("diagnostics %v, want %q", diags, tc.summary)
			}
		})
	}
}
