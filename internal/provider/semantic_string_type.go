package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// normalForm says when two strings of a semantic string type mean the same thing. It is a type
// parameter rather than a field so that each form is its own Go type: the framework matches
// values to schema types by type, and a zero value must still know its form.
type normalForm interface {
	// typeName names the custom type in framework messages.
	typeName() string
	// normalize returns the canonical form of s; an error means s has none (it is then only
	// equal to itself, and validation reports it).
	normalize(s string) (string, error)
}

// semanticStringType is a string attribute whose values compare by their normal form F, so a
// configuration written differently from what the orchestrator returns never shows a diff.
type semanticStringType[F normalForm] struct {
	basetypes.StringType
}

// semanticStringValue is a value of semanticStringType[F].
type semanticStringValue[F normalForm] struct {
	basetypes.StringValue
}

func (t semanticStringType[F]) String() string {
	var f F
	return f.typeName()
}

func (t semanticStringType[F]) ValueType(_ context.Context) attr.Value {
	return semanticStringValue[F]{}
}

func (t semanticStringType[F]) Equal(o attr.Type) bool {
	other, ok := o.(semanticStringType[F])
	if !ok {
		return false
	}
	return t.StringType.Equal(other.StringType)
}

func (t semanticStringType[F]) ValueFromString(_ context.Context, in basetypes.StringValue) (basetypes.StringValuable, diag.Diagnostics) {
	return semanticStringValue[F]{StringValue: in}, nil
}

func (t semanticStringType[F]) ValueFromTerraform(ctx context.Context, in tftypes.Value) (attr.Value, error) {
	v, err := t.StringType.ValueFromTerraform(ctx, in)
	if err != nil {
		return nil, err
	}
	s, ok := v.(basetypes.StringValue)
	if !ok {
		return nil, fmt.Errorf("unexpected value type %T", v)
	}
	return semanticStringValue[F]{StringValue: s}, nil
}

func (v semanticStringValue[F]) Type(_ context.Context) attr.Type { return semanticStringType[F]{} }

func (v semanticStringValue[F]) Equal(o attr.Value) bool {
	other, ok := o.(semanticStringValue[F])
	if !ok {
		return false
	}
	return v.StringValue.Equal(other.StringValue)
}

// StringSemanticEquals reports whether both values have the same normal form. Values without
// one are compared as written.
func (v semanticStringValue[F]) StringSemanticEquals(_ context.Context, newValuable basetypes.StringValuable) (bool, diag.Diagnostics) {
	var diags diag.Diagnostics
	nv, ok := newValuable.(semanticStringValue[F])
	if !ok {
		diags.AddError("Semantic Equality Check Error",
			fmt.Sprintf("Expected value type %T, got %T. This is always a bug in the provider code and should be reported to the provider developers.", v, newValuable))
		return false, diags
	}
	var f F
	a, errA := f.normalize(v.ValueString())
	b, errB := f.normalize(nv.ValueString())
	if errA != nil || errB != nil {
		return v.ValueString() == nv.ValueString(), nil
	}
	return a == b, nil
}
