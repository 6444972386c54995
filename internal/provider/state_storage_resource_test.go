package provider

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

func TestAccStateStorage_lifecycle(t *testing.T) {
	e := newAccEnv(t)
	addr := "outpost_state_storage.test"
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkStateStorageDestroyed("states"),
		Steps: []resource.TestStep{
			// Create and Read testing
			{
				Config: e.providerConfig() + testAccStateStorageConfig("states", "kubernetes", ""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("type"), knownvalue.StringExact("kubernetes")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("kubernetes").AtMapKey("namespace"), knownvalue.StringExact("outpost-state")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("description"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("s3"), knownvalue.Null()),
				},
				Check: e.checkStateStorage("states", func(s *api.StateStorage) error {
					if s.Type != api.StateStorageKubernetes || s.Kubernetes == nil || s.Kubernetes.Namespace != "outpost-state" {
						return fmt.Errorf("registered %+v", s)
					}
					return nil
				}),
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			// ImportState testing, with the CLI and with an import block
			{ResourceName: addr, ImportState: true, ImportStateVerify: true},
			{ResourceName: addr, ImportState: true, ImportStateKind: resource.ImportBlockWithID},
			// Update in place: description, then another type
			{
				Config: e.providerConfig() + testAccStateStorageConfig("states", "s3", "team states"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("description"), knownvalue.StringExact("team states")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("s3").AtMapKey("bucket"), knownvalue.StringExact("my-states")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("kubernetes"), knownvalue.Null()),
				},
				Check: e.checkStateStorage("states", func(s *api.StateStorage) error {
					if s.Type != api.StateStorageS3 || s.S3 == nil || s.S3.Region != "eu-central-1" || s.Description != "team states" {
						return fmt.Errorf("registered %+v", s)
					}
					return nil
				}),
			},
			{
				Config:           e.providerConfig() + testAccStateStorageConfig("states", "gcs", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("gcs").AtMapKey("path_prefix"), knownvalue.StringExact("teams/a")),
				},
			},
			{
				Config:           e.providerConfig() + testAccStateStorageConfig("states", "azurerm", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("azurerm").AtMapKey("container_name"), knownvalue.StringExact("tfstate")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("azurerm").AtMapKey("resource_group_name"), knownvalue.Null()),
				},
			},
			// A changed id replaces the state storage.
			{
				Config: e.providerConfig() + testAccStateStorageConfig("states-2", "azurerm", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroyBeforeCreate)},
				},
				Check: e.checkStateStorageGone("states"),
			},
		},
	})
}

// TestAccStateStorage_deletedOutside deletes the storage through the API: the next plan must
// create it again.
func TestAccStateStorage_deletedOutside(t *testing.T) {
	e := newAccEnv(t)
	addr := "outpost_state_storage.test"
	config := e.providerConfig() + testAccStateStorageConfig("drifty", "kubernetes", "")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkStateStorageDestroyed("drifty"),
		Steps: []resource.TestStep{
			{Config: config},
			{
				PreConfig: func() {
					if err := e.admin.DeleteStateStorage(context.Background(), "drifty"); err != nil {
						t.Fatal(err)
					}
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: e.checkStateStorage("drifty", func(*api.StateStorage) error { return nil }),
			},
		},
	})
}

// TestStateStorage_invalid checks every validation message; none of them needs an orchestrator.
func TestStateStorage_invalid(t *testing.T) {
	block := func(body string) string {
		return unitProviderConfig + fmt.Sprintf(`
resource "outpost_state_storage" "test" {
  %s
}
`, body)
	}
	steps := []resource.TestStep{
		{Config: block(`id = "Bad_ID"
  type = "kubernetes"
  kubernetes { namespace = "x" }`), ExpectError: errorPhrase(`"Bad_ID" is not valid as an id`)},
		{Config: block(`id = "s"
  type = "ftp"`), ExpectError: errorPhrase(`value must be one of`)},
		{Config: block(`id = "s"
  type = "s3"`), ExpectError: allPhrases("Missing State Storage Block", `type is "s3", so the s3 block is required`)},
		{Config: block(`id = "s"
  type = "kubernetes"
  kubernetes { namespace = "x" }
  gcs { bucket = "b-1-2" }`), ExpectError: allPhrases("Conflicting State Storage Block", `The gcs block is set but type is "kubernetes"`)},
		{Config: block(`id = "s"
  type = "s3"
  s3 {
    bucket = "No_Such-Bucket!"
    region = "eu-central-1"
  }`), ExpectError: allPhrases("Invalid State Storage", `"No_Such-Bucket!" is not a valid bucket name`)},
		{Config: block(`id = "s"
  type = "gcs"
  gcs {
    bucket      = "my-bucket"
    path_prefix = "a b"
  }`), ExpectError: errorPhrase(`may only hold letters, digits`)},
		{Config: block(`id = "s"
  type = "kubernetes"
  kubernetes { namespace = "Not_A_Namespace" }`), ExpectError: errorPhrase(`is not valid as a Kubernetes namespace`)},
		{Config: block(`id = "s"
  type = "kubernetes"
  description = ""
  kubernetes { namespace = "x" }`), ExpectError: errorPhrase(`string length must be at least 1`)},
	}
	for i := range steps {
		steps[i].PlanOnly = true
	}
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps:                    steps,
	})
}

// testAccStateStorageConfig returns outpost_state_storage.test of the given type.
func testAccStateStorageConfig(id, typ, description string) string {
	desc := ""
	if description != "" {
		desc = fmt.Sprintf("description = %q", description)
	}
	blocks := map[string]string{
		"kubernetes": `kubernetes { namespace = "outpost-state" }`,
		"s3": `s3 {
    bucket = "my-states"
    region = "eu-central-1"
  }`,
		"gcs": `gcs {
    bucket      = "my-states"
    path_prefix = "teams/a"
  }`,
		"azurerm": `azurerm {
    storage_account_name = "mystates"
    container_name       = "tfstate"
  }`,
	}
	return fmt.Sprintf(`
resource "outpost_state_storage" "test" {
  id   = %q
  type = %q
  %s
  %s
}
`, id, typ, desc, blocks[typ])
}

func (e *accEnv) checkStateStorage(id string, check func(*api.StateStorage) error) resource.TestCheckFunc {
	return func(*terraform.State) error {
		s, err := e.admin.GetStateStorage(context.Background(), id)
		if err != nil {
			return err
		}
		return check(s)
	}
}

func (e *accEnv) checkStateStorageGone(id string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		_, err := e.admin.GetStateStorage(context.Background(), id)
		if !errors.Is(err, api.ErrNotFound) {
			return fmt.Errorf("state storage %q: want not found, got %w", id, err)
		}
		return nil
	}
}

func (e *accEnv) checkStateStorageDestroyed(id string) resource.TestCheckFunc {
	return func(s *terraform.State) error { return e.checkStateStorageGone(id)(s) }
}
