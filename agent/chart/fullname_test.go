package chart_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
)

// The Go rule must name exactly the Deployment the template renders, or the provider's messages
// point at objects that do not exist.
func TestFullnameMatchesTheTemplate(t *testing.T) {
	long := strings.Repeat("r", 48) + "-team" // 53, Helm's longest release name: 67 with the suffix
	for _, tc := range []struct{ release, overrides string }{
		{releaseName, ""},
		{"prod", ""},
		{"prod-outpost-agent-eu", ""},
		{long, ""},
		{strings.Repeat("s", 53), "nameOverride: abcdefgh-jk"}, // cut at 63 right after a dash
		{"prod", "fullnameOverride: " + strings.Repeat("x", 63)},
		{"prod", "nameOverride: runner"},
		{"runner-eu", "nameOverride: runner"},
		{"prod", "fullnameOverride: eu-agents"},
	} {
		r, err := renderChart(t, tc.overrides, renderOptions{releaseName: tc.release})
		if err != nil {
			t.Fatalf("release %q, %q: %v", tc.release, tc.overrides, err)
		}
		deployments := all[appsv1.Deployment](r)
		if len(deployments) != 1 {
			t.Fatalf("release %q renders %d Deployments", tc.release, len(deployments))
		}
		var values map[string]any
		if err := yaml.Unmarshal([]byte(tc.overrides), &values); err != nil {
			t.Fatal(err)
		}
		if got, want := agentchart.Fullname(tc.release, values), deployments[0].Name; got != want {
			t.Errorf("Fullname(%q, %q) = %q, the chart renders %q", tc.release, tc.overrides, got, want)
		}
	}
}
