package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

func TestAccStateStorageDataSource(t *testing.T) {
	e := newAccEnv(t)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: e.providerConfig() + testAccStateStorageConfig("read-me", "s3", "shared") + `
data "outpost_state_storage" "test" {
  id = outpost_state_storage.test.id
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.outpost_state_storage.test", tfjsonpath.New("type"), knownvalue.StringExact("s3")),
					statecheck.ExpectKnownValue("data.outpost_state_storage.test", tfjsonpath.New("description"), knownvalue.StringExact("shared")),
					statecheck.ExpectKnownValue("data.outpost_state_storage.test", tfjsonpath.New("kubernetes"), knownvalue.Null()),
					statecheck.CompareValuePairs("data.outpost_state_storage.test", tfjsonpath.New("s3"),
						"outpost_state_storage.test", tfjsonpath.New("s3"), compare.ValuesSame()),
				},
			},
			{
				Config: e.providerConfig() + `
data "outpost_state_storage" "missing" {
  id = "no-such-storage"
}
`,
				ExpectError: allPhrases("State Storage Not Found", `No state storage "no-such-storage" is registered`),
			},
		},
	})
}
