package provider

import (
	dschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
)

// withComputedJobPodAttributes adds the job pod settings to the data source's job attribute:
// the resource's attributes (jobPodAttributes), read-only, so both keep one definition.
func withComputedJobPodAttributes(attrs map[string]dschema.Attribute) map[string]dschema.Attribute {
	for k, v := range jobPodAttributes() {
		attrs[k] = computedAttribute(v)
	}
	return attrs
}

// computedAttribute turns a resource attribute of the kinds jobPodAttributes uses into a
// computed data source attribute with the same description and type.
func computedAttribute(a rschema.Attribute) dschema.Attribute {
	desc := a.GetMarkdownDescription()
	switch a := a.(type) {
	case rschema.StringAttribute:
		return dschema.StringAttribute{MarkdownDescription: desc, CustomType: a.CustomType, Computed: true}
	case rschema.BoolAttribute:
		return dschema.BoolAttribute{MarkdownDescription: desc, Computed: true}
	case rschema.Int64Attribute:
		return dschema.Int64Attribute{MarkdownDescription: desc, Computed: true}
	case rschema.MapAttribute:
		return dschema.MapAttribute{MarkdownDescription: desc, ElementType: a.ElementType, Computed: true}
	case rschema.SingleNestedAttribute:
		return dschema.SingleNestedAttribute{MarkdownDescription: desc, Attributes: computedAttributes(a.Attributes), Computed: true}
	case rschema.ListNestedAttribute:
		return dschema.ListNestedAttribute{MarkdownDescription: desc, Computed: true,
			NestedObject: dschema.NestedAttributeObject{Attributes: computedAttributes(a.NestedObject.Attributes)}}
	}
	panic("computedAttribute: no data source form of " + a.GetType().String())
}

func computedAttributes(in map[string]rschema.Attribute) map[string]dschema.Attribute {
	out := make(map[string]dschema.Attribute, len(in))
	for k, v := range in {
		out[k] = computedAttribute(v)
	}
	return out
}
