package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// sameInputs reports whether the plan and the state agree on every input of the resource: every
// attribute its schema lets a configuration set (Required or Optional, in blocks too). The list
// is derived from the schema, so a new attribute is compared without anyone remembering to add
// it; computed-only attributes (status, last_seen_at, ...) are what the provider reports, never
// inputs, and are left out.
func sameInputs(ctx context.Context, plan tfsdk.Plan, state tfsdk.State) (bool, error) {
	isInput := func(p *tftypes.AttributePath) bool {
		a, err := plan.Schema.AttributeAtTerraformPath(ctx, p)
		// A block, or a step inside an attribute's value: only attributes are left out.
		return err != nil || a.IsRequired() || a.IsOptional()
	}
	p, err := inputsOnly(plan.Raw, isInput)
	if err != nil {
		return false, err
	}
	s, err := inputsOnly(state.Raw, isInput)
	if err != nil {
		return false, err
	}
	return p.Equal(s), nil
}

// inputsOnly returns v with every attribute that is not an input set to null.
func inputsOnly(v tftypes.Value, isInput func(*tftypes.AttributePath) bool) (tftypes.Value, error) {
	return tftypes.Transform(v, func(p *tftypes.AttributePath, v tftypes.Value) (tftypes.Value, error) {
		steps := p.Steps()
		if len(steps) == 0 {
			return v, nil
		}
		if _, ok := steps[len(steps)-1].(tftypes.AttributeName); !ok || isInput(p) {
			return v, nil
		}
		return tftypes.NewValue(v.Type(), nil), nil
	})
}
