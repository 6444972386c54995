package provider

import (
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// Ensure the custom type satisfies the framework interfaces.
var (
	_ basetypes.StringTypable                    = podTemplateType{}
	_ basetypes.StringValuableWithSemanticEquals = podTemplateValue{}
)

// podTemplateForm makes JSON pod templates that differ only in key order or whitespace equal
// (podtemplate.Normalize), so a template written as a heredoc, as jsonencode() or read back from
// the orchestrator never shows a diff.
type podTemplateForm struct{}

func (podTemplateForm) typeName() string { return "podTemplateType" }

func (podTemplateForm) normalize(s string) (string, error) { return podtemplate.Normalize(s) }

// podTemplateType is the custom type of pod_template: a JSON Kubernetes PodTemplateSpec.
type podTemplateType = semanticStringType[podTemplateForm]

// podTemplateValue is a value of podTemplateType.
type podTemplateValue = semanticStringValue[podTemplateForm]

func newPodTemplateValue(s string) podTemplateValue {
	return podTemplateValue{StringValue: basetypes.NewStringValue(s)}
}

func newPodTemplateNull() podTemplateValue {
	return podTemplateValue{StringValue: basetypes.NewStringNull()}
}
