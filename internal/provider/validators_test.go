package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// TestPodTemplateValidator: templates that name no "main" container pass; one whose containers
// are all others passes with a warning that names them, and a broken one fails without warnings.
func TestPodTemplateValidator(t *testing.T) {
	cases := []struct {
		tpl            string
		errors, warned int
		warning        string
	}{
		{`{"metadata":{"labels":{"app.kubernetes.io/name":"humanitec-runner"}}}`, 0, 0, ""},
		{`{"spec":{"nodeSelector":{"pool":"iac"}}}`, 0, 0, ""},
		{`{"spec":{"containers":[{"name":"main"},{"name":"proxy"}]}}`, 0, 0, ""},
		{`{"spec":{"containers":[{"name":"terraform"}]}}`, 0, 1, `["terraform"] run beside it`},
		{`{"spec":{"containers":[{"name":"main","command":["sh"]}]}}`, 1, 0, ""},
	}
	for _, tc := range cases {
		req := validator.StringRequest{Path: path.Root("pod_template"), ConfigValue: types.StringValue(tc.tpl)}
		var resp validator.StringResponse
		podTemplateValidator().ValidateString(context.Background(), req, &resp)
		if got := resp.Diagnostics.ErrorsCount(); got != tc.errors {
			t.Errorf("%s: %d errors, want %d: %v", tc.tpl, got, tc.errors, resp.Diagnostics)
		}
		warnings := resp.Diagnostics.Warnings()
		if len(warnings) != tc.warned {
			t.Errorf("%s: %d warnings, want %d: %v", tc.tpl, len(warnings), tc.warned, warnings)
			continue
		}
		if tc.warned > 0 && (!strings.Contains(warnings[0].Detail(), tc.warning) || warnings[0].Summary() != "Pod Template Has No Main Container") {
			t.Errorf("%s: warning %q / %q", tc.tpl, warnings[0].Summary(), warnings[0].Detail())
		}
	}
}
