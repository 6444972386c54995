package provider

import (
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// jsonForm makes JSON texts that differ only in key order or whitespace equal (the normal form
// the orchestrator stores), for the Kubernetes objects a runner's job block takes as JSON
// (affinity, volumes).
type jsonForm struct{}

func (jsonForm) typeName() string { return "jsonType" }

func (jsonForm) normalize(s string) (string, error) { return podtemplate.Normalize(s) }

// jsonType is the custom type of an attribute holding a Kubernetes object as JSON.
type jsonType = semanticStringType[jsonForm]

// jsonValue is a value of jsonType.
type jsonValue = semanticStringValue[jsonForm]

func newJSONValue(s string) jsonValue {
	if s == "" {
		return jsonValue{StringValue: basetypes.NewStringNull()}
	}
	return jsonValue{StringValue: basetypes.NewStringValue(s)}
}

// keepEquivalentJSON ignores key order and whitespace in a JSON attribute.
func keepEquivalentJSON() planmodifier.String {
	return keepStateWhenEquivalent{
		description: "JSON that differs from the state only in key order or whitespace is no change.",
		equivalent:  sameJSON,
	}
}

// sameJSON reports whether two JSON texts have the same normal form.
func sameJSON(a, b string) bool {
	na, errA := podtemplate.Normalize(a)
	nb, errB := podtemplate.Normalize(b)
	return errA == nil && errB == nil && na == nb
}
