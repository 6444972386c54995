package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// Validators that run the API's own checks at plan time, so a configuration the orchestrator
// would refuse fails in `terraform plan` with the same message.
var (
	_ validator.String = stringCheck{}
	_ validator.List   = publicKeysValidator{}
)

// stringCheck validates a string attribute with a plain Go check. Null and unknown values are
// skipped: they are checked once known.
type stringCheck struct {
	summary     string
	description string
	check       func(string) error
	// notes, when set, returns warnings (summary noteSummary) about a value that passed check.
	notes       func(string) []string
	noteSummary string
}

func (v stringCheck) Description(ctx context.Context) string { return v.MarkdownDescription(ctx) }

func (v stringCheck) MarkdownDescription(_ context.Context) string { return v.description }

func (v stringCheck) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := v.check(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, v.summary, messageOf(err))
		return
	}
	if v.notes != nil {
		for _, n := range v.notes(req.ConfigValue.ValueString()) {
			resp.Diagnostics.AddAttributeWarning(req.Path, v.noteSummary, n)
		}
	}
}

// messageOf returns the message of an api.FieldError without its API field name (the diagnostic
// already names the Terraform attribute), or the error text.
func messageOf(err error) string {
	var fe *api.FieldError
	if errors.As(err, &fe) {
		return fe.Message
	}
	return err.Error()
}

// idValidator checks an id the way the orchestrator does (DNS-1123 label).
func idValidator() validator.String {
	return stringCheck{
		summary:     "Invalid ID",
		description: "must be a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters",
		check:       func(s string) error { return api.ValidateID("id", s) },
	}
}

// runnerIDValidator checks a runner id like idValidator. A runner id is often made from a kube
// context or cluster name, which is rarely a valid id, so the error also says which valid id
// provider::outpost::runner_id makes of the value.
func runnerIDValidator() validator.String {
	return stringCheck{
		summary:     "Invalid Runner ID",
		description: "must be a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters",
		check: func(s string) error {
			err := api.ValidateID("id", s)
			if err == nil {
				return nil
			}
			id, derr := api.DeriveID(s)
			if derr != nil {
				return err
			}
			return fmt.Errorf("%s. To make a valid id from a kube context or cluster name, wrap the expression in "+
				"provider::outpost::runner_id(...) (Terraform 1.8+, OpenTofu 1.7+): for this value it gives %q, on every run", messageOf(err), id)
		},
	}
}

// namespaceValidator checks a Kubernetes namespace name.
func namespaceValidator() validator.String {
	return stringCheck{
		summary:     "Invalid Namespace",
		description: "must be a valid Kubernetes namespace name (DNS-1123 label)",
		check:       func(s string) error { return api.ValidateNamespace("namespace", s) },
	}
}

// serviceAccountValidator checks a Kubernetes service account name.
func serviceAccountValidator() validator.String {
	return stringCheck{
		summary:     "Invalid Service Account",
		description: "must be a valid Kubernetes service account name (DNS-1123 subdomain)",
		check:       func(s string) error { return api.ValidateServiceAccount("service_account", s) },
	}
}

// podTemplateValidator checks a pod template against the runner's contract (package podtemplate)
// and warns about containers that will run beside the one the runner adds.
func podTemplateValidator() validator.String {
	return stringCheck{
		summary:     "Invalid Pod Template",
		description: "must be a Kubernetes PodTemplateSpec in JSON; a container named \"main\" is added when it names none",
		check:       func(s string) error { return podtemplate.Validate("job.pod_template", s) },
		notes:       podtemplate.Notes,
		noteSummary: "Pod Template Has No Main Container",
	}
}

// publicKeyValidator checks one PEM public key; pasting a private key gets its own message.
func publicKeyValidator() validator.String {
	return stringCheck{
		summary:     "Invalid Public Key",
		description: "must be an ed25519 public key in PEM form (-----BEGIN PUBLIC KEY-----)",
		check: func(s string) error {
			_, err := keys.ParsePublicPEM(s)
			return err
		},
	}
}

// jobTimeoutValidator checks a job timeout: a Go duration of whole seconds the orchestrator accepts.
func jobTimeoutValidator() validator.String {
	return stringCheck{
		summary:     "Invalid Job Timeout",
		description: fmt.Sprintf("must be a duration such as \"30m\" or \"2h\", between 1m and %s", formatSeconds(api.MaxJobTimeoutSeconds)),
		check: func(s string) error {
			_, err := parseJobTimeout(s)
			return err
		},
	}
}

func parseJobTimeout(s string) (int, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration; write it like \"30m\", \"2h\" or \"1h30m\"", s)
	}
	if d%time.Second != 0 {
		return 0, fmt.Errorf("%q has a fraction of a second; use whole seconds", s)
	}
	secs := int(d / time.Second)
	if secs < 60 || secs > api.MaxJobTimeoutSeconds {
		return 0, fmt.Errorf("%q is out of range; use 1m to %s", s, formatSeconds(api.MaxJobTimeoutSeconds))
	}
	return secs, nil
}

// publicKeysValidator checks the list as a whole: no key twice (each element is checked by
// publicKeyValidator).
type publicKeysValidator struct{}

func (v publicKeysValidator) Description(ctx context.Context) string {
	return v.MarkdownDescription(ctx)
}

func (v publicKeysValidator) MarkdownDescription(_ context.Context) string {
	return "must not hold the same key twice"
}

func (v publicKeysValidator) ValidateList(_ context.Context, req validator.ListRequest, resp *validator.ListResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	pems := make([]string, 0, len(req.ConfigValue.Elements()))
	for _, e := range req.ConfigValue.Elements() {
		s, ok := e.(types.String)
		if !ok || s.IsNull() || s.IsUnknown() {
			return
		}
		if _, err := keys.ParsePublicPEM(s.ValueString()); err != nil {
			return // reported by the element validator
		}
		pems = append(pems, s.ValueString())
	}
	if len(pems) == 0 || len(pems) > 2 {
		return // reported by the size validator
	}
	if err := api.ValidatePublicKeys("public_keys", pems); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid Public Keys", messageOf(err))
	}
}

// blockRequires checks that a present single nested block sets the named attributes. Such
// attributes are Optional in the schema, because the framework reports Required attributes of
// an absent block as missing.
func blockRequires(attrs ...string) validator.Object {
	return blockRequiresValidator{attrs: attrs}
}

type blockRequiresValidator struct {
	attrs []string
}

func (v blockRequiresValidator) Description(ctx context.Context) string {
	return v.MarkdownDescription(ctx)
}

func (v blockRequiresValidator) MarkdownDescription(_ context.Context) string {
	return fmt.Sprintf("when the block is set, %s must be set", strings.Join(v.attrs, ", "))
}

func (v blockRequiresValidator) ValidateObject(_ context.Context, req validator.ObjectRequest, resp *validator.ObjectResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	attrs := req.ConfigValue.Attributes()
	for _, name := range v.attrs {
		if a, ok := attrs[name]; ok && a.IsNull() {
			resp.Diagnostics.AddAttributeError(req.Path.AtName(name), "Missing Required Attribute",
				fmt.Sprintf("The %s block needs %s.", req.Path, name))
		}
	}
}
