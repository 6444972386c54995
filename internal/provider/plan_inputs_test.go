package provider

import (
	"context"
	"fmt"
	"math/big"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// TestRunnerModifyPlanComparesEveryInput walks the runner's schema: for every attribute, at any
// depth, it plans a change of that attribute alone and checks ModifyPlan's verdict. An attribute
// the configuration can set must show as a change (or an edit of it would plan nothing); a
// computed-only attribute must not (or every refresh of the status would plan an update). Nothing
// here names an attribute, so a new one is covered the day it is added.
func TestRunnerModifyPlanComparesEveryInput(t *testing.T) {
	ctx := context.Background()
	r := &kubernetesAgentRunnerResource{}
	var sresp resource.SchemaResponse
	r.Schema(ctx, resource.SchemaRequest{}, &sresp)
	s := sresp.Schema
	state := sampleValue(s.Type().TerraformType(ctx), false)

	var compared, excluded []string
	err := tftypes.Walk(state, func(p *tftypes.AttributePath, v tftypes.Value) (bool, error) {
		steps := p.Steps()
		if len(steps) == 0 {
			return true, nil
		}
		if _, ok := steps[len(steps)-1].(tftypes.AttributeName); !ok {
			return false, nil // inside an attribute's value
		}
		a, err := s.AttributeAtTerraformPath(ctx, p)
		if err != nil {
			return true, nil //nolint:nilerr // a block (fwschema.ErrPathIsBlock, internal): its attributes are visited next
		}
		changed, err := tftypes.Transform(state, func(q *tftypes.AttributePath, w tftypes.Value) (tftypes.Value, error) {
			if q.Equal(p) {
				return sampleValue(w.Type(), true), nil
			}
			return w, nil
		})
		if err != nil {
			return false, err
		}
		req := resource.ModifyPlanRequest{
			Plan:  tfsdk.Plan{Schema: s, Raw: changed},
			State: tfsdk.State{Schema: s, Raw: state},
		}
		resp := resource.ModifyPlanResponse{Plan: req.Plan}
		r.ModifyPlan(ctx, req, &resp)
		if resp.Diagnostics.HasError() {
			return false, fmt.Errorf("%s: %v", p, resp.Diagnostics)
		}
		keptChange := resp.Plan.Raw.Equal(changed)
		switch input := a.IsRequired() || a.IsOptional(); {
		case input && !keptChange:
			t.Errorf("%s can be configured, but ModifyPlan replaced a plan that changes it with the state: an edit of it would plan nothing", p)
		case !input && keptChange:
			t.Errorf("%s is computed only, but ModifyPlan kept a plan that differs from the state only there", p)
		case input:
			compared = append(compared, p.String())
		default:
			excluded = append(excluded, p.String())
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compared (the configuration sets them): %v", compared)
	t.Logf("excluded (computed only: the provider reports them, no configuration sets them): %v", excluded)
	if len(compared) == 0 || len(excluded) == 0 {
		t.Fatalf("walked %d compared and %d excluded attributes; the walk missed the schema", len(compared), len(excluded))
	}
}

// sampleValue is a known value of type typ; other gives a second value that differs from the
// first in every primitive, for a change of exactly one attribute.
func sampleValue(typ tftypes.Type, other bool) tftypes.Value {
	switch tt := typ.(type) {
	case tftypes.List:
		return tftypes.NewValue(typ, []tftypes.Value{sampleValue(tt.ElementType, other)})
	case tftypes.Set:
		return tftypes.NewValue(typ, []tftypes.Value{sampleValue(tt.ElementType, other)})
	case tftypes.Map:
		return tftypes.NewValue(typ, map[string]tftypes.Value{"k": sampleValue(tt.ElementType, other)})
	case tftypes.Object:
		attrs := map[string]tftypes.Value{}
		for name, at := range tt.AttributeTypes {
			attrs[name] = sampleValue(at, other)
		}
		return tftypes.NewValue(typ, attrs)
	}
	switch {
	case typ.Is(tftypes.String) && other:
		return tftypes.NewValue(typ, "b")
	case typ.Is(tftypes.String):
		return tftypes.NewValue(typ, "a")
	case typ.Is(tftypes.Number) && other:
		return tftypes.NewValue(typ, big.NewFloat(2))
	case typ.Is(tftypes.Number):
		return tftypes.NewValue(typ, big.NewFloat(1))
	case typ.Is(tftypes.Bool):
		return tftypes.NewValue(typ, !other)
	}
	panic(fmt.Sprintf("sampleValue: no sample for type %s", typ))
}
