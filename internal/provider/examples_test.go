package provider

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// TestExamples plans every resource example of the documentation with this provider, so an
// example that no longer matches the schema or the plan-time validation fails here rather than
// in a user's first apply. (Data source examples would need an orchestrator to read from.)
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../../examples/resources/*/resource.tf")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no examples found")
	}
	for _, f := range files {
		t.Run(filepath.Base(filepath.Dir(f)), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(src), `provider "outpost"`) {
				t.Fatalf("%s configures the provider; resource examples must leave that to examples/provider", f)
			}
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{{
					Config:             unitProviderConfig + string(src),
					PlanOnly:           true,
					ExpectNonEmptyPlan: true,
				}},
			})
		})
	}
}
