package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/client-go/kubernetes"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// The acceptance tests drive the real Terraform or OpenTofu CLI (TF_ACC_TERRAFORM_PATH) against a
// real orchestrator (orchestratortest, one per test) and a real kube-apiserver (the test bed, one
// per test binary, a namespace per test). Nothing in them assumes one CLI: the lead's `make test`
// runs this package once with each.

func TestMain(m *testing.M) {
	if os.Getenv(resource.EnvTfAcc) == "" {
		// Without TF_ACC only the unit tests run; they need no cluster.
		os.Exit(m.Run())
	}
	testbed.Main(m, testbed.Options{})
}

// testAccProtoV6ProviderFactories serves the provider in-process to the CLI under test.
var testAccProtoV6ProviderFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"outpost": providerserver.NewProtocol6WithError(New("test")()),
}

// accEnv is what an acceptance test talks to: its own orchestrator and the shared cluster.
type accEnv struct {
	t       *testing.T
	orch    *orchestratortest.Instance
	org     string
	admin   *client.AdminClient
	cluster *testbed.Cluster
}

// newAccEnv starts an orchestrator for the test. It skips (like resource.Test) without TF_ACC.
func newAccEnv(t *testing.T) *accEnv {
	t.Helper()
	if os.Getenv(resource.EnvTfAcc) == "" {
		t.Skipf("acceptance test: set %s=1", resource.EnvTfAcc)
	}
	orch := orchestratortest.Start(t)
	org := "acme"
	admin, err := client.NewAdminClient(orch.URL, org, orch.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	return &accEnv{t: t, orch: orch, org: org, admin: admin, cluster: testbed.Shared(t)}
}

// providerConfig is the provider block of every acceptance test configuration.
func (e *accEnv) providerConfig() string {
	return fmt.Sprintf(`
provider "outpost" {
  api_url = %q
  org_id  = %q
  token   = %q
  kubernetes {
    config_path = %q
  }
}
`, e.orch.URL, e.org, e.orch.AdminToken, e.cluster.Kubeconfig)
}

func (e *accEnv) kube() kubernetes.Interface { return e.cluster.Client() }

func (e *accEnv) namespace() string { return testbed.NewNamespace(e.t, e.cluster) }

// unitProviderConfig configures the provider for tests that fail before it connects anywhere.
const unitProviderConfig = `
provider "outpost" {
  api_url = "http://127.0.0.1:9"
  org_id  = "acme"
  token   = "unused"
}
`

// errorPhrase matches a phrase in CLI output, whatever line wrapping the CLI applied.
func errorPhrase(phrase string) *regexp.Regexp {
	words := strings.Fields(phrase)
	for i, w := range words {
		words[i] = regexp.QuoteMeta(w)
	}
	return regexp.MustCompile(strings.Join(words, `\s+`))
}

// allPhrases matches phrases appearing in this order, each as errorPhrase does.
func allPhrases(phrases ...string) *regexp.Regexp {
	parts := make([]string, len(phrases))
	for i, p := range phrases {
		parts[i] = errorPhrase(p).String()
	}
	return regexp.MustCompile(`(?s)` + strings.Join(parts, ".*"))
}

// noPrivateKeyInState fails when any value anywhere in the state (as `terraform show -json`
// prints it, sensitive values included) contains a private key.
type noPrivateKeyInState struct{}

func (noPrivateKeyInState) CheckState(_ context.Context, req statecheck.CheckStateRequest, resp *statecheck.CheckStateResponse) {
	raw, err := json.Marshal(req.State)
	if err != nil {
		resp.Error = err
		return
	}
	if strings.Contains(string(raw), "PRIVATE KEY") {
		resp.Error = fmt.Errorf("the state holds a private key")
	}
}

// privateKeyInState is the opposite check, proving that noPrivateKeyInState can see keys.
type privateKeyInState struct{}

func (privateKeyInState) CheckState(ctx context.Context, req statecheck.CheckStateRequest, resp *statecheck.CheckStateResponse) {
	var inner statecheck.CheckStateResponse
	noPrivateKeyInState{}.CheckState(ctx, req, &inner)
	if inner.Error == nil {
		resp.Error = fmt.Errorf("expected the state to hold a private key, found none")
	}
}

func TestAccProvider_missingSettings(t *testing.T) {
	for _, env := range []string{envAPIURL, envOrgID, envToken} {
		t.Setenv(env, "")
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: `provider "outpost" {}` + testAccStateStorageConfig("s1", "kubernetes", ""),
				ExpectError: allPhrases("Missing Outpost API URL", envAPIURL+" environment variable",
					"Missing Outpost Organisation ID", envOrgID, "Missing Outpost Token", envToken),
			},
			{
				Config: `
provider "outpost" {
  api_url = "ftp://example.com"
  org_id  = "Not_An_Id"
  token   = "x"
}
` + testAccStateStorageConfig("s1", "kubernetes", ""),
				ExpectError: allPhrases("Invalid Outpost API URL", "not an absolute http(s) URL",
					"Invalid Outpost Organisation ID", "DNS-1123 label"),
			},
		},
	})
}

// TestAccProvider_noOrchestrator: with no orchestrator setting at all (no token, no URL, no
// organisation), what does not call the orchestrator still works: key pairs in state and in a
// cluster Secret, and the agent install that does not wait for the agent's connection (given
// the URL and organisation the agent needs). What does call it fails at plan time, saying what is
// missing.
func TestAccProvider_noOrchestrator(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	for _, env := range []string{envAPIURL, envOrgID, envToken} {
		t.Setenv(env, "")
	}
	pub, _ := testKeyPEMs(t)
	if _, err := e.admin.CreateStateStorage(t.Context(), api.StateStorageInput{
		ID: "no-token-states", Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: ns + "-state"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.CreateRunner(t.Context(), api.RunnerInput{
		ID: "no-token", PublicKeys: []string{pub}, Job: api.RunnerJob{Namespace: ns + "-jobs", ServiceAccount: defaultJobServiceAccount}, StateStorageID: "no-token-states",
	}); err != nil {
		t.Fatal(err)
	}
	provider := fmt.Sprintf(`
provider "outpost" {
  kubernetes {
    config_path = %q
  }
}

resource "outpost_key_pair" "in_state" {}

resource "outpost_key_pair" "test" {
  kubernetes_secret {
    namespace = %q
    name      = "no-token-key"
  }
}
`, e.cluster.Kubeconfig, ns)
	agent := func(wait bool) string {
		return fmt.Sprintf(`
resource "outpost_kubernetes_agent" "test" {
  namespace           = %q
  runner_id           = "no-token"
  api_url             = %q
  org_id              = %q
  wait_for_connection = %t
  create_namespaces   = true # the jobs' and the states' namespaces, <namespace>-jobs and -state
  private_key_secret {
    name = outpost_key_pair.test.kubernetes_secret.name
  }
}
`, ns, e.orch.URL, e.org, wait)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             resource.ComposeTestCheckFunc(e.checkSecretGone(ns, "no-token-key"), e.checkReleaseGone(ns, defaultReleaseName)),
		Steps: []resource.TestStep{
			{
				Config: provider,
				Check:  e.checkSecretMatches(ns, "no-token-key"),
			},
			{
				Config: provider + agent(false),
				Check: e.checkRelease(ns, func(rel *release.Release) error {
					if rel.Config["runnerId"] != "no-token" || rel.Config["apiUrl"] != e.orch.URL || rel.Config["orgId"] != e.org {
						return fmt.Errorf("release values %v", rel.Config)
					}
					return nil
				}),
			},
			{
				Config:      provider + agent(true),
				PlanOnly:    true,
				ExpectError: allPhrases("Missing Outpost Token", "wait_for_connection = false"),
			},
			{
				Config:      provider + strings.NewReplacer("  api_url", "  # api_url", "  org_id", "  # org_id").Replace(agent(false)),
				PlanOnly:    true,
				ExpectError: allPhrases("Missing Outpost API URL", "The agent needs api_url", "Missing Outpost Organisation ID", envOrgID),
			},
			{
				Config:      provider + agent(false) + testAccStateStorageConfig("s1", "kubernetes", ""),
				PlanOnly:    true,
				ExpectError: allPhrases("Missing Outpost API URL", "Missing Outpost Organisation ID", "Missing Outpost Token", envToken),
			},
		},
	})
}

// TestAccProvider_environment configures the provider from OUTPOST_* variables only.
func TestAccProvider_environment(t *testing.T) {
	e := newAccEnv(t)
	t.Setenv(envAPIURL, e.orch.URL)
	t.Setenv(envOrgID, e.org)
	t.Setenv(envToken, e.orch.AdminToken)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkStateStorageDestroyed("from-env"),
		Steps: []resource.TestStep{{
			Config: `provider "outpost" {}` + testAccStateStorageConfig("from-env", "kubernetes", ""),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("outpost_state_storage.test", tfjsonpath.New("id"), knownvalue.StringExact("from-env")),
			},
		}},
	})
}

// TestAccProvider_unknownSettings takes api_url from a resource: a plan with the value unknown
// must work as far as it can, and a refresh that needs the orchestrator must say which setting
// is unknown instead of failing obscurely (or panicking).
func TestAccProvider_unknownSettings(t *testing.T) {
	e := newAccEnv(t)
	config := func(trigger string) string {
		return fmt.Sprintf(`
resource "terraform_data" "url" {
  input            = %[1]q
  triggers_replace = [%[2]q]
}

provider "outpost" {
  api_url = terraform_data.url.output
  org_id  = %[3]q
  token   = %[4]q
}
`, e.orch.URL, trigger, e.org, e.orch.AdminToken) + testAccStateStorageConfig("late-url", "kubernetes", "")
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkStateStorageDestroyed("late-url"),
		Steps: []resource.TestStep{
			{
				// Planned with api_url unknown, applied once it is known.
				Config: config("one"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("outpost_state_storage.test", tfjsonpath.New("id"), knownvalue.StringExact("late-url")),
				},
			},
			{
				// Replacing the source makes api_url unknown while the state storage must be refreshed.
				Config:      config("two"),
				ExpectError: errorPhrase("Unknown Outpost API URL"),
			},
		},
	})
}

// TestAccProvider_unknownKubernetes takes the kubeconfig path from a resource: creating a key pair
// Secret works once it is known, and a refresh while it is unknown names the problem.
func TestAccProvider_unknownKubernetes(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	config := func(trigger string) string {
		return fmt.Sprintf(`
resource "terraform_data" "kubeconfig" {
  input            = %[1]q
  triggers_replace = [%[2]q]
}

provider "outpost" {
  api_url = %[3]q
  org_id  = %[4]q
  token   = %[5]q
  kubernetes {
    config_path = terraform_data.kubeconfig.output
  }
}

resource "outpost_key_pair" "test" {
  kubernetes_secret {
    namespace = %[6]q
    name      = "late-kubeconfig"
  }
}
`, e.cluster.Kubeconfig, trigger, e.orch.URL, e.org, e.orch.AdminToken, ns)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkSecretGone(ns, "late-kubeconfig"),
		Steps: []resource.TestStep{
			{Config: config("one"), Check: e.checkSecretMatches(ns, "late-kubeconfig")},
			{Config: config("two"), ExpectError: allPhrases("Unknown Kubernetes Configuration", "config_path")},
		},
	})
}
