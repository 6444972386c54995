package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/yaml"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/internal/helm"
)

// The chart is installed for real into the test bed's kube-apiserver. No Pod ever runs there (no
// container runtime), so these tests never wait for workloads; the connection wait is tested
// with an "agent" made of signed polls from the test itself.

const agentAddr = "outpost_kubernetes_agent.test"

// agentStack is a key pair in a Secret of ns, a kubernetes state storage in <ns>-state and a
// runner whose Jobs run in <ns>-jobs (the agent's default namespaces), plus
// outpost_kubernetes_agent.test with the given body, which creates the two namespaces.
func (e *accEnv) agentStack(ns, runnerID, agentBody string) string {
	e.deleteNamespacesAfter(ns+"-jobs", ns+"-state")
	return e.providerConfig() + fmt.Sprintf(`
resource "outpost_key_pair" "agent" {
  kubernetes_secret {
    namespace = %[1]q
    name      = "agent-key"
  }
}

resource "outpost_state_storage" "agent" {
  id   = "%[2]s-states"
  type = "kubernetes"
  kubernetes { namespace = "%[1]s-state" }
}

resource "outpost_kubernetes_agent_runner" "agent" {
  id               = %[2]q
  public_keys      = [outpost_key_pair.agent.public_key_pem]
  state_storage_id = outpost_state_storage.agent.id
  job { namespace = "%[1]s-jobs" }
}

resource "outpost_kubernetes_agent" "test" {
  namespace         = %[1]q
  runner_id         = outpost_kubernetes_agent_runner.agent.id
  create_namespaces = true
  private_key_secret { name = "agent-key" }
%[3]s
}
`, ns, runnerID, agentBody)
}

// deleteNamespacesAfter deletes namespaces the test made the provider create (it never deletes
// namespaces itself).
func (e *accEnv) deleteNamespacesAfter(names ...string) {
	e.t.Cleanup(func() {
		for _, n := range names {
			_ = e.kube().CoreV1().Namespaces().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
}

// checkRestricted checks that a namespace is labelled for Pod Security "restricted".
func (e *accEnv) checkRestricted(ns string) resource.TestCheckFunc {
	const want = podSecurityRestricted
	return func(*terraform.State) error {
		n, err := e.kube().CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := n.Labels[labelPodSecurity]; got != want {
			return fmt.Errorf("namespace %s: %s = %q, want %q", ns, labelPodSecurity, got, want)
		}
		return nil
	}
}

func TestAccKubernetesAgent_lifecycle(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	basic := e.agentStack(ns, "agent-runner", `  wait_for_connection = false`)
	tuned := e.agentStack(ns, "agent-runner", `
  wait_for_connection = false
  replicas            = 1
  log_level           = "debug"
  cli                 = "tofu"
  extra_env           = [{ name = "HTTPS_PROXY", value = "http://proxy.example.com:3128" }, { name = "NO_PROXY", value = ".internal" }]
  job_pod_labels      = { "azure.workload.identity/use" = "true" }
  job_service_account_annotations = { "iam.gke.io/gcp-service-account" = "deployer@p.iam.gserviceaccount.com" }
  service_account_annotations     = { "example.com/owner" = "platform" }
  node_selector       = { "kubernetes.io/os" = "linux" }
  tolerations         = [{ key = "dedicated", operator = "Equal", value = "outpost", effect = "NoSchedule" }]
  image {
    repository = "registry.example.com/outpost/agent"
    tag        = "0.1.0-test"
  }
  resources = {
    requests = { cpu = "100m" }
  }
  values = yamlencode({ podAnnotations = { "example.com/audit" = "yes" } })
  job_pod_policy {
    allow_run_as_root           = true
    allow_service_account_token = true
    allowed_secrets             = ["cloud-credentials"]
    pod_template                = jsonencode({ spec = { containers = [{ name = "main", resources = { limits = { memory = "2Gi" } } }] } })
  }
`)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkReleaseGone(ns, defaultReleaseName),
		Steps: []resource.TestStep{
			// Create and Read testing
			{
				Config: basic,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("id"), knownvalue.StringExact(ns+"/"+defaultReleaseName)),
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("status"), knownvalue.StringExact("deployed")),
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("revision"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("chart_version"), knownvalue.StringExact(agentchart.Version)),
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("app_version"), knownvalue.StringExact(agentchart.AppVersion)),
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("api_url"), knownvalue.StringExact(e.orch.URL)),
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("org_id"), knownvalue.StringExact(e.org)),
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("job_namespace"), knownvalue.StringExact(ns+"-jobs")),
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("state_namespace"), knownvalue.StringExact(ns+"-state")),
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("drift_detected"), knownvalue.Bool(false)),
					noPrivateKeyInState{},
				},
				Check: resource.ComposeTestCheckFunc(
					e.checkRelease(ns, func(rel *release.Release) error {
						if rel.Config["runnerId"] != "agent-runner" || rel.Config["apiUrl"] != e.orch.URL {
							return fmt.Errorf("release values %v", rel.Config)
						}
						return nil
					}),
					e.checkAgentDeployment(ns, func(d *appsv1.Deployment) error {
						if *d.Spec.Replicas != defaultReplicas {
							return fmt.Errorf("replicas %d", *d.Spec.Replicas)
						}
						return nil
					}),
					e.checkRestricted(ns+"-jobs"),
					e.checkRestricted(ns+"-state"),
				),
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			// ImportState testing: the inputs come back from the release's values.
			{
				ResourceName:            agentAddr,
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"wait_for_connection", "create_namespaces"},
			},
			// Update in place: every attribute that reaches the chart.
			{
				Config: tuned,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(agentAddr, plancheck.ResourceActionUpdate),
						plancheck.ExpectUnknownValue(agentAddr, tfjsonpath.New("revision")),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("revision"), knownvalue.Int64Exact(2)),
				},
				Check: resource.ComposeTestCheckFunc(
					e.checkAgentDeployment(ns, func(d *appsv1.Deployment) error {
						pod := d.Spec.Template
						c := pod.Spec.Containers[0]
						env := map[string]string{}
						for _, v := range c.Env {
							env[v.Name] = v.Value
						}
						switch {
						case *d.Spec.Replicas != 1:
							return fmt.Errorf("replicas %d", *d.Spec.Replicas)
						case c.Image != "registry.example.com/outpost/agent:0.1.0-test":
							return fmt.Errorf("image %q", c.Image)
						case env["HTTPS_PROXY"] != "http://proxy.example.com:3128":
							return fmt.Errorf("env %v", env)
						case pod.Spec.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Spec.Tolerations) != 1:
							return fmt.Errorf("scheduling %v %v", pod.Spec.NodeSelector, pod.Spec.Tolerations)
						case c.Resources.Requests.Cpu().String() != "100m":
							return fmt.Errorf("requests %v", c.Resources.Requests)
						case pod.Annotations["example.com/audit"] != "yes":
							return fmt.Errorf("pod annotations %v (from values)", pod.Annotations)
						}
						return nil
					}),
					e.checkAgentSettings(ns, func(setting func(string) string) error {
						if setting("cli") != `"tofu"` || setting("logLevel") != `"debug"` || setting("jobs.policy.allowRunAsRoot") != "true" ||
							setting("jobs.policy.allowedSecrets") != `["cloud-credentials"]` || setting("jobs.policy.allowServiceAccountToken") != "true" ||
							!strings.Contains(setting("jobs.podTemplate"), `"2Gi"`) {
							return fmt.Errorf("agent settings: cli %s, logLevel %s, jobs.policy %s, jobs.podTemplate %s", setting("cli"), setting("logLevel"),
								setting("jobs.policy"), setting("jobs.podTemplate"))
						}
						return nil
					}),
					e.checkServiceAccountAnnotation(ns+"-jobs", defaultJobServiceAccount, "iam.gke.io/gcp-service-account", "deployer@p.iam.gserviceaccount.com"),
				),
			},
			{
				ResourceName:            agentAddr,
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"wait_for_connection", "values", "create_namespaces"},
			},
			// A chart check fails the plan: rules that reach Secrets next to the runner's key.
			{
				Config: e.agentStack(ns, "agent-runner", fmt.Sprintf(`
  wait_for_connection = false
  job_namespace       = %q
  values = yamlencode({ jobs = { rbac = { rules = [{ apiGroups = [""], resources = ["secrets"], verbs = ["get"] }] } } })
`, ns)),
				PlanOnly:    true,
				ExpectError: allPhrases("Invalid Chart Values", "jobs.rbac.rules give the jobs access to Secrets", "private key"),
			},
		},
	})
}

// TestAccKubernetesAgent_unknownInputs plans the agent while its namespace and values come from
// resources not applied yet.
func TestAccKubernetesAgent_unknownInputs(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	config := strings.Replace(e.agentStack(ns, "late-runner", `
  wait_for_connection = false
  values              = yamlencode({ podAnnotations = { note = terraform_data.later.output } })
`), fmt.Sprintf("resource \"outpost_kubernetes_agent\" \"test\" {\n  namespace         = %q", ns),
		"resource \"outpost_kubernetes_agent\" \"test\" {\n  namespace         = terraform_data.later.output", 1) + fmt.Sprintf(`
resource "terraform_data" "later" {
  input = %q
}
`, ns)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkReleaseGone(ns, defaultReleaseName),
		Steps: []resource.TestStep{{
			Config: config,
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectUnknownValue(agentAddr, tfjsonpath.New("id")),
					plancheck.ExpectUnknownValue(agentAddr, tfjsonpath.New("job_namespace")),
					plancheck.ExpectUnknownValue(agentAddr, tfjsonpath.New("values_sha256")),
				},
				PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
			},
			Check: e.checkRelease(ns, func(rel *release.Release) error {
				if pa, _ := rel.Config["podAnnotations"].(map[string]any); pa["note"] != ns {
					return fmt.Errorf("values %v", rel.Config)
				}
				return nil
			}),
		}},
	})
}

// TestAccKubernetesAgent_errors covers what only the orchestrator or the cluster can refuse.
func TestAccKubernetesAgent_errors(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	otherNS := e.namespace()
	newNS := "t-agent-new-" + rand.String(6)
	e.deleteNamespacesAfter(newNS, newNS+"-jobs", newNS+"-state")
	for _, n := range []string{ns + "-jobs", ns + "-state"} {
		if _, err := e.kube().CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.deleteNamespacesAfter(ns+"-jobs", ns+"-state")
	// A release installed by someone else.
	chrt, err := agentchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	_, err = helm.Install(context.Background(), e.helmConfig(ns), chrt, map[string]any{
		"apiUrl": "http://example.com", "orgId": "acme", "runnerId": "r", "privateKey": map[string]any{"existingSecret": "k"},
	}, helm.InstallOptions{ReleaseName: "preexisting", Namespace: ns, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := testKeyPEMs(t)
	stack := func(runnerJobNS, agentBody string) string {
		return e.providerConfig() + fmt.Sprintf(`
resource "outpost_state_storage" "agent" {
  id   = "err-states"
  type = "kubernetes"
  kubernetes { namespace = "%[1]s-state" }
}

resource "outpost_kubernetes_agent_runner" "agent" {
  id               = "err-runner"
  public_keys      = [%[2]q]
  state_storage_id = outpost_state_storage.agent.id
  job { namespace = "%[1]s-jobs" }
}

resource "outpost_kubernetes_agent" "test" {
  runner_id           = outpost_kubernetes_agent_runner.agent.id
  wait_for_connection = false
  private_key_secret { name = "agent-key" }
%[3]s
}
`, runnerJobNS, pub, agentBody)
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      strings.Replace(stack(ns, fmt.Sprintf("  namespace = %q", ns)), "runner_id           = outpost_kubernetes_agent_runner.agent.id", `runner_id = "ghost"`, 1),
				ExpectError: allPhrases("Runner Not Found", `Runner "ghost" is not registered`),
			},
			{
				Config:      stack(ns, fmt.Sprintf("  namespace = %q\n  job_namespace = %q", ns, otherNS)),
				ExpectError: allPhrases("Runner Mismatch", fmt.Sprintf("job namespace %q", ns+"-jobs"), fmt.Sprintf("Set job_namespace = %q", ns+"-jobs")),
			},
			{
				Config:      stack(ns, fmt.Sprintf("  namespace = %q\n  state_namespace = %q", ns, otherNS)),
				ExpectError: allPhrases("Runner Mismatch", fmt.Sprintf("Set state_namespace = %q", ns+"-state")),
			},
			{
				Config:      stack(ns, fmt.Sprintf("  namespace = %q\n  release_name = \"preexisting\"", ns)),
				ExpectError: allPhrases("Release Already Exists", "terraform import", fmt.Sprintf("%s/preexisting", ns)),
			},
			{
				Config:      stack(newNS, fmt.Sprintf("  namespace = %q", newNS)),
				ExpectError: allPhrases("Namespace Not Found", "create_namespaces = true"),
			},
			{
				Config: stack(newNS, fmt.Sprintf("  namespace = %q\n  create_namespaces = true", newNS)),
				Check: resource.ComposeTestCheckFunc(e.checkRelease(newNS, func(*release.Release) error { return nil }),
					e.checkRestricted(newNS), e.checkRestricted(newNS+"-jobs"),
					e.checkRestricted(newNS+"-state")),
			},
		},
	})
}

func TestKubernetesAgent_invalid(t *testing.T) {
	agent := func(body string) string {
		return unitProviderConfig + `
resource "outpost_kubernetes_agent" "test" {
  namespace = "outpost"
  runner_id = "r"
` + body + `
}
`
	}
	secret := `private_key_secret { name = "k" }
`
	steps := []resource.TestStep{
		{Config: agent(""), ExpectError: errorPhrase("private_key_secret")},
		{Config: agent(secret + `values = "- a list"`), ExpectError: allPhrases("Invalid Chart Values", "must be a map of chart values")},
		{Config: agent(secret + `values = yamlencode({ bogus = 1 })`), ExpectError: allPhrases("Invalid Chart Values", "refuses these values", "bogus")},
		{Config: agent(secret + `replicas = 0`), ExpectError: errorPhrase("must be between 1 and 10")},
		{Config: agent(secret + `tolerations = [{ operator = "Maybe" }]`), ExpectError: errorPhrase("value must be one of")},
		{Config: agent(secret + `release_name = "Bad_Name"`), ExpectError: errorPhrase("must be a DNS-1123 label of at most 53 characters")},
		{Config: agent(secret + `cli = "bash"`), ExpectError: errorPhrase("value must be one of")},
		{Config: agent(secret + `api_url = "ftp://x"`), ExpectError: errorPhrase("must be an http(s) URL")},
		{Config: agent(secret + `job_namespace = "Bad_NS"`), ExpectError: errorPhrase("is not valid as a Kubernetes namespace")},
		{Config: agent(`private_key_secret { key = "k" }`), ExpectError: allPhrases("Missing Required Attribute", "name")},
		// The typed job and network settings, checked at plan.
		{Config: agent(secret + `proxy { https = "proxy.corp:3128" }`), ExpectError: errorPhrase("must be an http://, https:// or socks5:// URL")},
		{Config: agent(secret + `proxy {
  https = "http://p:3128"
  no_proxy = [".corp, .internal"]
}`), ExpectError: errorPhrase("without spaces or commas")},
		{Config: agent(secret + `proxy {}`), ExpectError: allPhrases("Incomplete Block", "https or http")},
		{Config: agent(secret + `ca_bundle { pem = "-----BEGIN PUBLIC KEY-----" }`), ExpectError: allPhrases("Invalid CA Bundle", "no PEM certificate")},
		{Config: agent(secret + `ca_bundle {}`), ExpectError: allPhrases("Incomplete Block", "pem or secret_name")},
		{Config: agent(secret + `ca_bundle { secret_key = "ca.pem" }`), ExpectError: errorPhrase("secret_name")},
		{Config: agent(secret + `job_history { failed = 1001 }`), ExpectError: errorPhrase("must be between 0 and 1000")},
		{Config: agent(secret + `plugin_cache { volume = jsonencode({ nfs = {}, hostPath = {} }) }`), ExpectError: errorPhrase("names 2 volume types")},
		{Config: agent(secret + `plugin_cache {
  claim_name = "a"
  volume = "{}"
}`), ExpectError: errorPhrase("cannot be specified when")},
		{Config: agent(secret + `provider_installation {
  network_mirror { url = "http://mirror.corp" }
}`), ExpectError: errorPhrase("must be an https:// URL ending in /")},
		{Config: agent(secret + `provider_installation {
  filesystem_mirror { include = ["a"] }
}`), ExpectError: allPhrases("Missing Required Attribute", "path")},
		{Config: agent(secret + `forward_env = ["HTTPS_PROXY"]`), ExpectError: allPhrases("Variable Not Forwardable", "proxy block")},
		{Config: agent(secret + `forward_env = ["OUTPOST_TOKEN"]`), ExpectError: errorPhrase("set by the agent itself")},
		{Config: agent(secret + `extra_env = [{ name = "1BAD" }]`), ExpectError: errorPhrase("must be an environment variable name")},
		{Config: agent(secret + `resources = { limits = { memory = "lots" } }`), ExpectError: errorPhrase("must be a Kubernetes quantity")},
		{Config: agent(secret + `job_resources = { requests = { cpu = "1 core" } }`), ExpectError: errorPhrase("must be a Kubernetes quantity")},
	}
	for i := range steps {
		steps[i].PlanOnly = true
	}
	resource.UnitTest(t, resource.TestCase{ProtoV6ProviderFactories: testAccProtoV6ProviderFactories, Steps: steps})
}

func (e *accEnv) helmConfig(ns string) *action.Configuration {
	e.t.Helper()
	cfg, err := helm.NewConfiguration(helm.NewRESTClientGetter(e.cluster.RESTConfig, ns), ns, e.t.Logf)
	if err != nil {
		e.t.Fatal(err)
	}
	return cfg
}

// checkRelease checks the deployed release of the default name in ns.
func (e *accEnv) checkRelease(ns string, check func(*release.Release) error) resource.TestCheckFunc {
	name := defaultReleaseName
	return func(*terraform.State) error {
		rel, err := helm.Get(e.helmConfig(ns), name)
		if err != nil {
			return err
		}
		if rel.Info.Status != release.StatusDeployed {
			return fmt.Errorf("release %s/%s is %s", ns, name, rel.Info.Status)
		}
		return check(rel)
	}
}

func (e *accEnv) checkReleaseGone(ns, name string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		_, err := helm.Get(e.helmConfig(ns), name)
		if !helm.IsNotFound(err) {
			return fmt.Errorf("release %s/%s: want not found, got %w", ns, name, err)
		}
		return nil
	}
}

func (e *accEnv) checkAgentDeployment(ns string, check func(*appsv1.Deployment) error) resource.TestCheckFunc {
	return func(*terraform.State) error {
		d, err := e.kube().AppsV1().Deployments(ns).Get(context.Background(), agentchart.Fullname(defaultReleaseName, nil), metav1.GetOptions{})
		if err != nil {
			return err
		}
		return check(d)
	}
}

// checkAgentSettings reads the agent's configuration file from the ConfigMap the chart installed
// in ns and hands check its settings by dotted key, each as JSON ("" when absent).
func (e *accEnv) checkAgentSettings(ns string, check func(setting func(key string) string) error) resource.TestCheckFunc {
	return func(*terraform.State) error {
		name := agentchart.Fullname(defaultReleaseName, nil) + "-config"
		cm, err := e.kube().CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(cm.Data["agent.yaml"]), &doc); err != nil {
			return fmt.Errorf("agent.yaml of ConfigMap %s/%s: %w", ns, name, err)
		}
		return check(func(key string) string {
			var v any = doc
			for _, k := range strings.Split(key, ".") {
				m, ok := v.(map[string]any)
				if !ok {
					return ""
				}
				if v, ok = m[k]; !ok {
					return ""
				}
			}
			b, _ := json.Marshal(v)
			return string(b)
		})
	}
}

func (e *accEnv) checkServiceAccountAnnotation(ns, name, key, want string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		sa, err := e.kube().CoreV1().ServiceAccounts(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := sa.Annotations[key]; got != want {
			return fmt.Errorf("ServiceAccount %s/%s annotation %s = %q, want %q", ns, name, key, got, want)
		}
		return nil
	}
}
