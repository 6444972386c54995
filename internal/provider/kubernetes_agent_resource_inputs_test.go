package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/outpost-dev/terraform-provider-outpost/internal/helm"
)

// agentInputsNotInChartValues are the attributes of outpost_kubernetes_agent a configuration sets
// that are not chart values, with the reason. ModifyPlan plans an upgrade when the chart values'
// hash changes, so any other input must reach the chart values, or an edit of it would plan
// nothing (TestAgentChartValuesCoverEveryInput).
var agentInputsNotInChartValues = map[string]string{
	"namespace":           "where the release lives; changing it replaces the resource",
	"release_name":        "the release's name; changing it replaces the resource",
	"create_namespaces":   "whether apply creates the namespaces before the install; nothing in the chart",
	"wait_for_connection": "how apply waits for the agent, not what it installs",
	"timeouts":            "how long apply may take, not what it installs",
	"image_pull_secret.docker_config_json": "the content of the pull Secrets the provider writes next to the release; " +
		"Update writes a changed one without an upgrade (pods read it at their next pull)",
}

// TestAgentChartValuesCoverEveryInput walks the schema of outpost_kubernetes_agent: for every
// attribute a configuration can set, at any depth, it changes that attribute alone and checks
// that the chart values ModifyPlan hashes change, unless agentInputsNotInChartValues excludes
// it with a reason; an excluded attribute must not change them.
func TestAgentChartValuesCoverEveryInput(t *testing.T) {
	ctx := context.Background()
	var sresp resource.SchemaResponse
	(&kubernetesAgentResource{}).Schema(ctx, resource.SchemaRequest{}, &sresp)
	s := sresp.Schema
	base := nullLeaves(s.Type().TerraformType(ctx))

	// hash is the values hash of the configuration raw, or "" if chartValues refuses it.
	hash := func(raw tftypes.Value) string {
		var m kubernetesAgentModel
		if diags := (tfsdk.Plan{Schema: s, Raw: raw}).Get(ctx, &m); diags.HasError() {
			t.Fatalf("decoding a sample configuration: %v", diags)
		}
		vals, err := m.chartValues()
		if err != nil {
			return ""
		}
		sum, err := helm.ValuesSHA256(vals)
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	with := func(p *tftypes.AttributePath, v tftypes.Value) tftypes.Value {
		out, err := tftypes.Transform(base, func(q *tftypes.AttributePath, w tftypes.Value) (tftypes.Value, error) {
			if q.Equal(p) {
				return v, nil
			}
			return w, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	seen := map[string]bool{}
	err := tftypes.Walk(base, func(p *tftypes.AttributePath, v tftypes.Value) (bool, error) {
		steps := p.Steps()
		if len(steps) == 0 {
			return true, nil
		}
		a, err := s.AttributeAtTerraformPath(ctx, p)
		if err != nil {
			return true, nil //nolint:nilerr // a block (fwschema.ErrPathIsBlock, internal): its attributes are visited next
		}
		if !a.IsRequired() && !a.IsOptional() {
			return false, nil // computed only: the provider reports it
		}
		name := dotted(p)
		top := name
		if i := strings.Index(top, "."); i >= 0 {
			top = top[:i]
		}
		seen[top], seen[name] = true, true
		// Pairs of values of the attribute's type; strings try a plain word, a JSON list, a YAML
		// map, a pod template and a PEM certificate, for attributes that must parse as one of them.
		pairs := [][2]tftypes.Value{{sampleValue(v.Type(), false), sampleValue(v.Type(), true)}}
		if v.Type().Is(tftypes.String) {
			for _, pair := range [][2]string{{`[{"key":"a"}]`, `[{"key":"b"}]`}, {"a: 1", "a: 2"},
				{`{"metadata":{"labels":{"a":"1"}}}`, `{"metadata":{"labels":{"a":"2"}}}`}, {testCAPEM(t, "a"), testCAPEM(t, "b")}} {
				pairs = append(pairs, [2]tftypes.Value{tftypes.NewValue(tftypes.String, pair[0]), tftypes.NewValue(tftypes.String, pair[1])})
			}
		}
		for _, pair := range pairs {
			h1, h2 := hash(with(p, pair[0])), hash(with(p, pair[1]))
			if h1 == "" || h2 == "" {
				continue // not a value this attribute accepts
			}
			reason, excluded := agentInputsNotInChartValues[name] // one attribute of a block, or a whole one
			if !excluded {
				reason, excluded = agentInputsNotInChartValues[top]
			}
			switch {
			case h1 == h2 && !excluded:
				t.Errorf("%s can be configured but changes no chart value: map it in chartValues, or add it to "+
					"agentInputsNotInChartValues with the reason", name)
			case h1 != h2 && excluded:
				t.Errorf("%s changes the chart values, but agentInputsNotInChartValues excludes it (%s)", name, reason)
			case excluded:
				t.Logf("excluded: %s: %s", name, reason)
			default:
				t.Logf("compared through the chart values: %s", name)
			}
			return false, nil
		}
		t.Errorf("%s: chartValues accepts none of the sample values tried; teach the test a value of its form", name)
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range agentInputsNotInChartValues {
		if !seen[name] {
			t.Errorf("agentInputsNotInChartValues names %s, which is no configurable attribute", name)
		}
	}
}

// nullLeaves is a value of typ whose objects (blocks) are present and whose other values are null,
// so every attribute path exists and any one of them can be set alone.
func nullLeaves(typ tftypes.Type) tftypes.Value {
	obj, ok := typ.(tftypes.Object)
	if !ok {
		return tftypes.NewValue(typ, nil)
	}
	attrs := map[string]tftypes.Value{}
	for name, at := range obj.AttributeTypes {
		attrs[name] = nullLeaves(at)
	}
	return tftypes.NewValue(typ, attrs)
}

// dotted is an attribute path as a configuration writes it: image.tag.
func dotted(p *tftypes.AttributePath) string {
	var parts []string
	for _, s := range p.Steps() {
		if n, ok := s.(tftypes.AttributeName); ok {
			parts = append(parts, string(n))
		}
	}
	return strings.Join(parts, ".")
}
