package provider

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// runnerBase declares two in-state key pairs, a state storage and a job namespace that is only
// known after apply, so the runner's inputs are unknown at plan time.
const runnerBase = `
resource "outpost_key_pair" "a" {}
resource "outpost_key_pair" "b" {}

resource "terraform_data" "job_namespace" {
  input = "outpost-jobs"
}

resource "outpost_state_storage" "test" {
  id   = "runner-states"
  type = "kubernetes"
  kubernetes { namespace = "outpost-state" }
}
`

func TestAccKubernetesAgentRunner_lifecycle(t *testing.T) {
	e := newAccEnv(t)
	addr := "outpost_kubernetes_agent_runner.test"
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkRunnerGone("runner-1"),
		Steps: []resource.TestStep{
			// Create and Read testing, with public_keys and job.namespace unknown at plan time
			{
				Config: e.providerConfig() + runnerBase + `
resource "outpost_kubernetes_agent_runner" "test" {
  id               = "runner-1"
  description      = "first"
  public_keys      = [outpost_key_pair.a.public_key_pem]
  state_storage_id = outpost_state_storage.test.id
  job {
    namespace    = terraform_data.job_namespace.output
    pod_template = jsonencode({ spec = { containers = [{ name = "main", env = [{ name = "A", value = "1" }] }] } })
  }
}
`,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectUnknownValue(addr, tfjsonpath.New("public_keys").AtSliceIndex(0)),
						plancheck.ExpectUnknownValue(addr, tfjsonpath.New("job").AtMapKey("namespace")),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact(runnerDisconnected)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("last_seen_at"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("agent_version"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("max_concurrency"), knownvalue.Int64Exact(api.DefaultMaxConcurrency)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("require_approval"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("job_timeout"), knownvalue.StringExact("1h")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("job").AtMapKey("service_account"), knownvalue.StringExact(defaultJobServiceAccount)),
					statecheck.CompareValuePairs(addr, tfjsonpath.New("public_keys").AtSliceIndex(0),
						"outpost_key_pair.a", tfjsonpath.New("public_key_pem"), compare.ValuesSame()),
				},
				Check: e.checkRunner("runner-1", func(r *api.Runner) error {
					if r.Job.Namespace != "outpost-jobs" || r.JobTimeoutSeconds != 3600 || len(r.PublicKeys) != 1 || !strings.Contains(r.Job.PodTemplate, `"main"`) {
						return fmt.Errorf("registered %+v", r)
					}
					return nil
				}),
			},
			// ImportState testing, with the CLI and with an import block
			{ResourceName: addr, ImportState: true, ImportStateVerify: true},
			{ResourceName: addr, ImportState: true, ImportStateKind: resource.ImportBlockWithID},
			// Update in place: a second key (rotation), limits, another template
			{
				Config: e.providerConfig() + runnerBase + `
resource "outpost_kubernetes_agent_runner" "test" {
  id               = "runner-1"
  description      = "second"
  public_keys      = [outpost_key_pair.a.public_key_pem, outpost_key_pair.b.public_key_pem]
  state_storage_id = outpost_state_storage.test.id
  max_concurrency  = 3
  job_timeout      = "90m"
  require_approval = true
  job {
    namespace       = terraform_data.job_namespace.output
    service_account = "deployer"
    pod_template    = jsonencode({ metadata = { labels = { team = "a" } }, spec = { containers = [{ name = "main" }] } })
  }
}
`,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("public_keys"), knownvalue.ListSizeExact(2)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("job_timeout"), knownvalue.StringExact("90m")),
				},
				Check: e.checkRunner("runner-1", func(r *api.Runner) error {
					if len(r.PublicKeys) != 2 || r.MaxConcurrency != 3 || r.JobTimeoutSeconds != 5400 || r.Job.ServiceAccount != "deployer" || r.Description != "second" || !r.RequireApproval {
						return fmt.Errorf("registered %+v", r)
					}
					return nil
				}),
			},
			// The same template and timeout written differently are no change.
			{
				Config: e.providerConfig() + runnerBase + `
resource "outpost_kubernetes_agent_runner" "test" {
  id               = "runner-1"
  description      = "second"
  public_keys      = [outpost_key_pair.a.public_key_pem, outpost_key_pair.b.public_key_pem]
  state_storage_id = outpost_state_storage.test.id
  max_concurrency  = 3
  job_timeout      = "1h30m"
  require_approval = true
  job {
    namespace       = terraform_data.job_namespace.output
    service_account = "deployer"
    pod_template    = <<-EOT
      {
        "spec":     { "containers": [ { "name": "main" } ] },
        "metadata": { "labels": { "team": "a" } }
      }
    EOT
  }
}
`,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			// Rotation done: the old key goes, in place.
			{
				Config: e.providerConfig() + runnerBase + `
resource "outpost_kubernetes_agent_runner" "test" {
  id               = "runner-1"
  public_keys      = [outpost_key_pair.b.public_key_pem]
  state_storage_id = outpost_state_storage.test.id
  job {
    namespace = "outpost-jobs"
  }
}
`,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("description"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("job").AtMapKey("pod_template"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("max_concurrency"), knownvalue.Int64Exact(api.DefaultMaxConcurrency)),
				},
				Check: e.checkRunner("runner-1", func(r *api.Runner) error {
					if len(r.PublicKeys) != 1 || r.Job.PodTemplate != "" || r.Description != "" {
						return fmt.Errorf("registered %+v", r)
					}
					return nil
				}),
			},
			// Deleted outside Terraform: the plan creates it again.
			{
				PreConfig: func() {
					if err := e.admin.DeleteRunner(context.Background(), "runner-1"); err != nil {
						t.Fatal(err)
					}
				},
				Config: e.providerConfig() + runnerBase + `
resource "outpost_kubernetes_agent_runner" "test" {
  id               = "runner-1"
  public_keys      = [outpost_key_pair.b.public_key_pem]
  state_storage_id = outpost_state_storage.test.id
  job {
    namespace = "outpost-jobs"
  }
}
`,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: e.checkRunner("runner-1", func(*api.Runner) error { return nil }),
			},
			// A new id replaces the runner.
			{
				Config: e.providerConfig() + runnerBase + `
resource "outpost_kubernetes_agent_runner" "test" {
  id               = "runner-2"
  public_keys      = [outpost_key_pair.b.public_key_pem]
  state_storage_id = outpost_state_storage.test.id
  job {
    namespace = "outpost-jobs"
  }
}
`,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroyBeforeCreate)},
				},
				Check: resource.ComposeTestCheckFunc(e.checkRunnerGone("runner-1"), e.checkRunner("runner-2", func(*api.Runner) error { return nil })),
			},
		},
	})
}

// TestAccKubernetesAgentRunner_apiErrors covers what only the orchestrator can refuse.
func TestAccKubernetesAgentRunner_apiErrors(t *testing.T) {
	e := newAccEnv(t)
	pub, _ := testKeyPEMs(t)
	if _, err := e.admin.CreateStateStorage(context.Background(), api.StateStorageInput{
		ID: "taken-states", Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: "s"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.CreateRunner(context.Background(), api.RunnerInput{
		ID: "taken", PublicKeys: []string{pub}, Job: api.RunnerJob{Namespace: "j", ServiceAccount: "sa"}, StateStorageID: "taken-states",
	}); err != nil {
		t.Fatal(err)
	}
	runner := func(id, storage string) string {
		return e.providerConfig() + fmt.Sprintf(`
resource "outpost_kubernetes_agent_runner" "test" {
  id               = %q
  public_keys      = [%q]
  state_storage_id = %q
  job { namespace = "jobs" }
}
`, id, pub, storage)
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: runner("taken", "taken-states"), ExpectError: allPhrases("Unable to Register Runner", `A runner with id "taken" already exists`, "terraform import", "Original error:")},
			{Config: runner("fresh", "no-such-storage"), ExpectError: allPhrases("Unable to Register Runner", "Original error:", "state_storage_id", `"no-such-storage" does not exist`)},
		},
	})
}

// TestKubernetesAgentRunner_invalid checks every plan-time validation message.
func TestKubernetesAgentRunner_invalid(t *testing.T) {
	pub, priv := testKeyPEMs(t)
	pub2, _ := testKeyPEMs(t)
	rsaPub := testRSAPublicKeyPEM(t)
	runner := func(id string, keys []string, job string) string {
		quoted := make([]string, len(keys))
		for i, k := range keys {
			quoted[i] = fmt.Sprintf("%q", k)
		}
		return unitProviderConfig + fmt.Sprintf(`
resource "outpost_kubernetes_agent_runner" "test" {
  id               = %q
  public_keys      = [%s]
  state_storage_id = "states"
  %s
}
`, id, strings.Join(quoted, ", "), job)
	}
	job := func(body string) string { return "job {\n" + body + "\n}" }
	ok := job(`namespace = "jobs"`)
	tpl := func(json string) string {
		return job(fmt.Sprintf("namespace = \"jobs\"\npod_template = %q", json))
	}
	steps := []resource.TestStep{
		{Config: runner("Runner_1", []string{pub}, ok), ExpectError: errorPhrase(`"Runner_1" is not valid as an id`)},
		// Ids made from kube context names say which valid id the runner_id function makes of them.
		{Config: runner("kubernetes-agent-arn:aws:eks:eu-west-1:123456789012:cluster/prod", []string{pub}, ok), ExpectError: allPhrases(
			"Invalid Runner ID", "is 64 characters", "provider::outpost::runner_id(...)", `"kubernetes-agent-arn-aws-c0be03e0-1-123456789012-cluster-prod"`)},
		{Config: runner("kubernetes-agent-gke_acme_europe-west1_prod", []string{pub}, ok), ExpectError: allPhrases(
			"is not valid as an id", "provider::outpost::runner_id(...)", `"kubernetes-agent-gke-acme-europe-west1-prod"`)},
		{Config: runner("r", []string{priv}, ok), ExpectError: allPhrases("Invalid Public Key", "this is a PRIVATE key; give the PUBLIC key")},
		{Config: runner("r", []string{rsaPub}, ok), ExpectError: errorPhrase("not an ed25519 public key")},
		{Config: runner("r", []string{"ssh-ed25519 AAAAC3Nza"}, ok), ExpectError: errorPhrase("this looks like an OpenSSH key; give the PEM form")},
		{Config: runner("r", []string{}, ok), ExpectError: errorPhrase("list must contain at least 1 elements and at most 2")},
		{Config: runner("r", []string{pub, pub2, pub}, ok), ExpectError: errorPhrase("list must contain at least 1 elements and at most 2")},
		{Config: runner("r", []string{pub, pub}, ok), ExpectError: allPhrases("Invalid Public Keys", "same key as public_keys[0]")},
		{Config: runner("r", []string{pub}, ""), ExpectError: errorPhrase("job")},
		{Config: runner("r", []string{pub}, job(`service_account = "x"`)), ExpectError: allPhrases("Missing Required Attribute", "namespace")},
		{Config: runner("r", []string{pub}, job(`namespace = "Jobs_NS"`)), ExpectError: errorPhrase(`"Jobs_NS" is not valid as a Kubernetes namespace`)},
		{Config: runner("r", []string{pub}, tpl(`{"spec": {`)), ExpectError: allPhrases("Invalid Pod Template", "not valid JSON", "jsonencode")},
		{Config: runner("r", []string{pub}, tpl(`{"spec":{"containers":[{"name":"main","command":["sh"]}]}}`)), ExpectError: errorPhrase(`the command of "main" is set by the runner`)},
		{Config: runner("r", []string{pub}, tpl(`{"spec":{"restartPolicy":"Always","containers":[{"name":"main"}]}}`)), ExpectError: errorPhrase("restartPolicy to Never")},
		{Config: runner("r", []string{pub}, tpl(`{"spec":{"serviceAccountName":"x","containers":[{"name":"main"}]}}`)), ExpectError: errorPhrase("the runner sets the service account")},
		{Config: runner("r", []string{pub}, tpl(`{"metadata":{"labels":{"outpost.dev/deployment-id":"x"}},"spec":{"containers":[{"name":"main"}]}}`)), ExpectError: errorPhrase("labels under outpost.dev/ are set by the runner")},
		{Config: runner("r", []string{pub}, tpl(`{"spec":{"containers":[{"name":"main"}]},"bogus":1}`)), ExpectError: errorPhrase("not a Kubernetes PodTemplateSpec")},
		{Config: strings.Replace(runner("r", []string{pub}, ok), `state_storage_id = "states"`, `state_storage_id = "states"
  job_timeout = "10s"`, 1), ExpectError: allPhrases("Invalid Job Timeout", "out of range")},
		{Config: strings.Replace(runner("r", []string{pub}, ok), `state_storage_id = "states"`, `state_storage_id = "states"
  job_timeout = "soon"`, 1), ExpectError: errorPhrase(`"soon" is not a duration`)},
		{Config: strings.Replace(runner("r", []string{pub}, ok), `state_storage_id = "states"`, `state_storage_id = "states"
  max_concurrency = 0`, 1), ExpectError: errorPhrase("must be between 1 and 1000")},
	}
	for i := range steps {
		steps[i].PlanOnly = true
	}
	resource.UnitTest(t, resource.TestCase{ProtoV6ProviderFactories: testAccProtoV6ProviderFactories, Steps: steps})
}

// testKeyPEMs returns a fresh ed25519 key pair in PEM form.
func testKeyPEMs(t *testing.T) (pub, priv string) {
	t.Helper()
	p, k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pub, err = keys.EncodePublicPEM(p)
	if err != nil {
		t.Fatal(err)
	}
	priv, err = keys.EncodePrivatePEM(k)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func testRSAPublicKeyPEM(t *testing.T) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func (e *accEnv) checkRunner(id string, check func(*api.Runner) error) resource.TestCheckFunc {
	return func(*terraform.State) error {
		r, err := e.admin.GetRunner(context.Background(), id)
		if err != nil {
			return err
		}
		return check(r)
	}
}

func (e *accEnv) checkRunnerGone(id string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		_, err := e.admin.GetRunner(context.Background(), id)
		if !errors.Is(err, api.ErrNotFound) {
			return fmt.Errorf("runner %q: want not found, got %w", id, err)
		}
		return nil
	}
}
