package provider

import (
	"os"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
)

// TestRunnerIDFunction applies the function's documentation example (with no orchestrator
// settings at all: a function needs none) and checks the ids it shows, then the errors.
func TestRunnerIDFunction(t *testing.T) {
	for _, env := range []string{envAPIURL, envOrgID, envToken} {
		t.Setenv(env, "")
	}
	example, err := os.ReadFile("../../examples/functions/runner_id/function.tf")
	if err != nil {
		t.Fatal(err)
	}
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_8_0)},
		Steps: []resource.TestStep{
			{
				Config: string(example),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("eks_runner_id", knownvalue.StringExact("kubernetes-agent-arn-aws-c0be03e0-1-123456789012-cluster-prod")),
					statecheck.ExpectKnownOutputValue("gke_runner_id", knownvalue.StringExact("kubernetes-agent-gke-acme-platform-europe-west1-prod")),
				},
			},
			{
				Config:      `output "x" { value = provider::outpost::runner_id("::/") }`,
				ExpectError: errorPhrase(`Cannot make a runner id: "::/" has no letter or digit to make an id from`),
			},
			{
				Config:      `output "x" { value = provider::outpost::runner_id(null) }`,
				ExpectError: errorPhrase("null"),
			},
		},
	})
}
