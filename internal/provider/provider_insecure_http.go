package provider

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// envInsecureAllowHTTP is the environment fallback of insecure_allow_http.
const envInsecureAllowHTTP = "OUTPOST_INSECURE_ALLOW_HTTP"

// insecureAllowHTTPDescription is the attribute's documentation.
const insecureAllowHTTPDescription = "Allow a plain `http://` `api_url` whose host is not loopback. The token and every request " +
	"then cross the network unencrypted, where anyone on the way can read the token and act with it; without this " +
	"setting such a URL is refused. Use `https://` instead wherever you can. Falls back to the `" + envInsecureAllowHTTP +
	"` environment variable (`true`)."

// insecureAllowHTTP resolves insecure_allow_http: the configuration first, then the environment.
func insecureAllowHTTP(v types.Bool, diags *diag.Diagnostics) bool {
	if !v.IsNull() && !v.IsUnknown() {
		return v.ValueBool()
	}
	raw := strings.TrimSpace(os.Getenv(envInsecureAllowHTTP))
	if raw == "" {
		return false
	}
	allow, err := strconv.ParseBool(raw)
	if err != nil {
		diags.AddAttributeError(path.Root("insecure_allow_http"), "Invalid Insecure HTTP Setting",
			fmt.Sprintf("%s=%q is not true or false. Unset it, or set it to true only if plain http to the orchestrator is acceptable.", envInsecureAllowHTTP, raw))
	}
	return allow
}

// checkAPIURLTransport refuses a plain http api_url that leaves the machine unless the user
// allowed it by name.
func checkAPIURLTransport(apiURL string, allow bool, diags *diag.Diagnostics) {
	if err := client.CheckPlainHTTP(apiURL, allow, "insecure_allow_http = true (or "+envInsecureAllowHTTP+"=true)"); err != nil {
		diags.AddAttributeError(path.Root("api_url"), "Insecure Outpost API URL",
			fmt.Sprintf("%q uses plain http to a host that is not this machine. %s.", apiURL, err))
	}
}
