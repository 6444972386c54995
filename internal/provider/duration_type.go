package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// Ensure the custom type satisfies the framework interfaces.
var (
	_ basetypes.StringTypable                    = durationType{}
	_ basetypes.StringValuableWithSemanticEquals = durationValue{}
)

// durationType is a Go duration string ("90m", "1h30m"). Values that denote the same duration
// are semantically equal, so "60m" in the configuration and "1h" read back from the
// orchestrator (which keeps seconds) never show a diff.
type durationType struct {
	basetypes.StringType
}

func (t durationType) String() string { return "durationType" }

func (t durationType) ValueType(_ context.Context) attr.Value { return durationValue{} }

func (t durationType) Equal(o attr.Type) bool {
	other, ok := o.(durationType)
	if !ok {
		return false
	}
	return t.StringType.Equal(other.StringType)
}

func (t durationType) ValueFromString(_ context.Context, in basetypes.StringValue) (basetypes.StringValuable, diag.Diagnostics) {
	return durationValue{StringValue: in}, nil
}

func (t durationType) ValueFromTerraform(ctx context.Context, in tftypes.Value) (attr.Value, error) {
	v, err := t.StringType.ValueFromTerraform(ctx, in)
	if err != nil {
		return nil, err
	}
	s, ok := v.(basetypes.StringValue)
	if !ok {
		return nil, fmt.Errorf("unexpected value type %T", v)
	}
	return durationValue{StringValue: s}, nil
}

// durationValue is a value of durationType.
type durationValue struct {
	basetypes.StringValue
}

func (v durationValue) Type(_ context.Context) attr.Type { return durationType{} }

func (v durationValue) Equal(o attr.Value) bool {
	other, ok := o.(durationValue)
	if !ok {
		return false
	}
	return v.StringValue.Equal(other.StringValue)
}

// StringSemanticEquals reports whether both values parse to the same duration.
func (v durationValue) StringSemanticEquals(_ context.Context, newValuable basetypes.StringValuable) (bool, diag.Diagnostics) {
	var diags diag.Diagnostics
	nv, ok := newValuable.(durationValue)
	if !ok {
		diags.AddError("Semantic Equality Check Error",
			fmt.Sprintf("Expected value type %T, got %T. This is always a bug in the provider code and should be reported to the provider developers.", v, newValuable))
		return false, diags
	}
	a, errA := time.ParseDuration(v.ValueString())
	b, errB := time.ParseDuration(nv.ValueString())
	if errA != nil || errB != nil {
		return v.ValueString() == nv.ValueString(), nil
	}
	return a == b, nil
}

func newDurationValue(s string) durationValue {
	return durationValue{StringValue: basetypes.NewStringValue(s)}
}

// formatSeconds renders whole seconds in the shortest duration form: 3600 → "1h", 5400 → "1h30m".
func formatSeconds(secs int) string {
	d := time.Duration(secs) * time.Second
	s := d.String() // e.g. "1h30m0s"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
