package provider

import (
	"context"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
)

var _ planmodifier.String = keepStateWhenEquivalent{}

// keepStateWhenEquivalent plans the state's value when the configuration only spells the same
// value differently (a reformatted pod template, "60m" for "1h"), so that is not a diff. The
// custom types' semantic equality covers values read back from the orchestrator; this covers
// the configuration, which the framework compares byte for byte.
type keepStateWhenEquivalent struct {
	description string
	equivalent  func(a, b string) bool
}

func (m keepStateWhenEquivalent) Description(ctx context.Context) string {
	return m.MarkdownDescription(ctx)
}

func (m keepStateWhenEquivalent) MarkdownDescription(_ context.Context) string {
	return m.description
}

func (m keepStateWhenEquivalent) PlanModifyString(_ context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if req.StateValue.IsNull() || req.StateValue.IsUnknown() || req.PlanValue.IsNull() || req.PlanValue.IsUnknown() {
		return
	}
	if m.equivalent(req.StateValue.ValueString(), req.PlanValue.ValueString()) {
		resp.PlanValue = req.StateValue
	}
}

// keepEquivalentPodTemplate ignores key order and whitespace in a pod template.
func keepEquivalentPodTemplate() planmodifier.String {
	return keepStateWhenEquivalent{
		description: "A pod template that differs from the state only in key order or whitespace is no change.",
		equivalent:  sameJSON,
	}
}

// keepEquivalentDuration ignores how a duration is spelled.
func keepEquivalentDuration() planmodifier.String {
	return keepStateWhenEquivalent{
		description: "A duration equal to the state's (\"60m\" for \"1h\") is no change.",
		equivalent: func(a, b string) bool {
			da, errA := time.ParseDuration(a)
			db, errB := time.ParseDuration(b)
			return errA == nil && errB == nil && da == db
		},
	}
}
