package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// Ensure the custom type satisfies the framework interfaces.
var (
	_ basetypes.StringTypable                    = podTemplateType{}
	_ basetypes.StringValuableWithSemanticEquals = podTemplateValue{}
)

// podTemplateType is a JSON string holding a Kubernetes PodTemplateSpec. Two values that differ
// only in key order or whitespace are semantically equal (podtemplate.Normalize), so a template
// written as a heredoc, as jsonencode() or read back from the orchestrator never shows a diff.
type podTemplateType struct {
	basetypes.StringType
}

func (t podTemplateType) String() string { return "podTemplateType" }

func (t podTemplateType) ValueType(_ context.Context) attr.Value { return podTemplateValue{} }

func (t podTemplateType) Equal(o attr.Type) bool {
	other, ok := o.(podTemplateType)
	if !ok {
		return false
	}
	return t.StringType.Equal(other.StringType)
}

func (t podTemplateType) ValueFromString(_ context.Context, in basetypes.StringValue) (basetypes.StringValuable, diag.Diagnostics) {
	return podTemplateValue{StringValue: in}, nil
}

func (t podTemplateType) ValueFromTerraform(ctx context.Context, in tftypes.Value) (attr.Value, error) {
	v, err := t.StringType.ValueFromTerraform(ctx, in)
	if err != nil {
		return nil, err
	}
	s, ok := v.(basetypes.StringValue)
	if !ok {
		return nil, fmt.Errorf("unexpected value type %T", v)
	}
	return podTemplateValue{StringValue: s}, nil
}

// podTemplateValue is a value of podTemplateType.
type podTemplateValue struct {
	basetypes.StringValue
}

func (v podTemplateValue) Type(_ context.Context) attr.Type { return podTemplateType{} }

func (v podTemplateValue) Equal(o attr.Value) bool {
	other, ok := o.(podTemplateValue)
	if !ok {
		return false
	}
	return v.StringValue.Equal(other.StringValue)
}

// StringSemanticEquals reports whether both templates normalize to the same JSON. A value that is
// not JSON is only equal to itself; validation reports it.
func (v podTemplateValue) StringSemanticEquals(_ context.Context, newValuable basetypes.StringValuable) (bool, diag.Diagnostics) {
	var diags diag.Diagnostics
	nv, ok := newValuable.(podTemplateValue)
	if !ok {
		diags.AddError("Semantic Equality Check Error",
			fmt.Sprintf("Expected value type %T, got %T. This is always a bug in the provider code and should be reported to the provider developers.", v, newValuable))
		return false, diags
	}
	a, errA := podtemplate.Normalize(v.ValueString())
	b, errB := podtemplate.Normalize(nv.ValueString())
	if errA != nil || errB != nil {
		return v.ValueString() == nv.ValueString(), nil
	}
	return a == b, nil
}

func newPodTemplateValue(s string) podTemplateValue {
	return podTemplateValue{StringValue: basetypes.NewStringValue(s)}
}

func newPodTemplateNull() podTemplateValue {
	return podTemplateValue{StringValue: basetypes.NewStringNull()}
}
