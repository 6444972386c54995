package provider

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
)

// testCAPEM makes a self-signed CA certificate in PEM form.
func testCAPEM(t *testing.T, cn string) string {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func stringList(t *testing.T, l ...string) types.List {
	t.Helper()
	els := make([]attr.Value, len(l))
	for i, s := range l {
		els[i] = types.StringValue(s)
	}
	v, diags := types.ListValue(types.StringType, els)
	if diags.HasError() {
		t.Fatal(diags)
	}
	return v
}

// fullAgentJobs sets every attribute of agentJobsModel.
func fullAgentJobs(t *testing.T) agentJobsModel {
	t.Helper()
	res := func(requests map[string]string) types.Object {
		o, diags := types.ObjectValueFrom(t.Context(), resourcesObjectType.AttrTypes,
			resourcesModel{Requests: stringMap(t, requests), Limits: types.MapNull(types.StringType)})
		if diags.HasError() {
			t.Fatal(diags)
		}
		return o
	}
	tolerations, diags := types.ListValueFrom(t.Context(), tolerationObjectType, []jobTolerationModel{{
		Key: types.StringValue("dedicated"), Operator: types.StringValue("Exists"), Value: types.StringNull(),
		Effect: types.StringValue("NoSchedule"), TolerationSeconds: types.Int64Null(),
	}})
	if diags.HasError() {
		t.Fatal(diags)
	}
	env, diags := types.ListValueFrom(t.Context(), envObjectType, []jobEnvModel{
		{Name: types.StringValue("AWS_REGION"), Value: types.StringValue("eu-west-1")},
		{Name: types.StringValue("API_TOKEN"), Value: types.StringNull(),
			SecretKeyRef: &jobKeyRefModel{Name: types.StringValue("agent-secrets"), Key: types.StringValue("token"), Optional: types.BoolValue(true)}},
	})
	if diags.HasError() {
		t.Fatal(diags)
	}
	return agentJobsModel{
		Proxy: &proxyModel{HTTPS: types.StringValue("http://proxy.corp:3128"), HTTP: types.StringValue("http://proxy.corp:3128"),
			NoProxy: stringList(t, ".corp", "10.1.0.0/16")},
		CABundle:    &caBundleModel{PEM: types.StringValue(testCAPEM(t, "corp")), SecretName: types.StringNull(), SecretKey: types.StringNull()},
		JobHistory:  &jobHistoryModel{Succeeded: types.Int64Value(0), Failed: types.Int64Value(20)},
		PluginCache: &pluginCacheModel{ClaimName: types.StringValue("tf-plugins"), Volume: types.StringNull()},
		ProviderInstallation: &providerInstallationModel{
			NetworkMirror: &networkMirrorModel{URL: types.StringValue("https://mirror.corp/providers/"),
				Include: stringList(t, "registry.terraform.io/hashicorp/*"), Exclude: types.ListNull(types.StringType)},
			Direct: &directModel{Include: types.ListNull(types.StringType), Exclude: stringList(t, "registry.terraform.io/hashicorp/*")},
		},
		ForwardEnv:   stringList(t, "AWS_REGION"),
		JobResources: res(map[string]string{"memory": "1Gi"}),
		Tolerations:  tolerations,
		ExtraEnv:     env,
		Resources:    res(map[string]string{"cpu": "100m"}),
	}
}

// TestAgentJobsChartValues checks the chart values of every job and network setting, and that the
// embedded chart renders them.
func TestAgentJobsChartValues(t *testing.T) {
	m := minimalAgentModel()
	m.agentJobsModel = fullAgentJobs(t)
	got, err := m.chartValues()
	if err != nil {
		t.Fatal(err)
	}
	if err := validateChartValues(t.Context(), got, types.StringValue("outpost-system")); err != nil {
		t.Fatalf("the embedded chart refuses the values: %v", err)
	}
	jobs, _ := got["jobs"].(map[string]any)
	want := map[string]any{
		"proxy":       map[string]any{"httpsProxy": "http://proxy.corp:3128", "httpProxy": "http://proxy.corp:3128", "noProxy": []any{".corp", "10.1.0.0/16"}},
		"caBundle":    map[string]any{"pem": m.CABundle.PEM.ValueString()},
		"tolerations": []any{map[string]any{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}},
		"extraEnv": []any{map[string]any{"name": "AWS_REGION", "value": "eu-west-1"},
			map[string]any{"name": "API_TOKEN", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "agent-secrets", "key": "token", "optional": true}}}},
		"resources": map[string]any{"requests": map[string]any{"cpu": "100m"}},
	}
	for k, w := range want {
		if !reflect.DeepEqual(got[k], w) {
			t.Errorf("%s:\n got %#v\nwant %#v", k, got[k], w)
		}
	}
	wantJobs := map[string]any{
		"history":     map[string]any{"succeeded": int64(0), "failed": int64(20)},
		"pluginCache": map[string]any{"persistentVolumeClaim": map[string]any{"claimName": "tf-plugins"}},
		"providerInstallation": "provider_installation {\n  network_mirror {\n    url     = \"https://mirror.corp/providers/\"\n" +
			"    include = [\"registry.terraform.io/hashicorp/*\"]\n  }\n  direct {\n    exclude = [\"registry.terraform.io/hashicorp/*\"]\n  }\n}\n",
		"forwardEnv": []any{"AWS_REGION"},
		"resources":  map[string]any{"requests": map[string]any{"memory": "1Gi"}},
	}
	for k, w := range wantJobs {
		if !reflect.DeepEqual(jobs[k], w) {
			t.Errorf("jobs.%s:\n got %#v\nwant %#v", k, jobs[k], w)
		}
	}
}

// TestAgentTypedAttributesWinOverValues: an attribute wins over the same key in `values`, which
// still fills in what the attribute leaves out; `values` wins over an attribute's default.
func TestAgentTypedAttributesWinOverValues(t *testing.T) {
	m := minimalAgentModel()
	m.Proxy = &proxyModel{HTTPS: types.StringValue("http://typed:3128"), HTTP: types.StringNull(), NoProxy: types.ListNull(types.StringType)}
	m.JobHistory = &jobHistoryModel{Succeeded: types.Int64Value(3), Failed: types.Int64Null()}
	m.Values = types.StringValue(`
proxy: {httpsProxy: "http://values:3128", noProxy: [.corp]}
jobs: {history: {succeeded: 7, failed: 8}, namespace: from-values}
logLevel: debug
`)
	got, err := m.chartValues()
	if err != nil {
		t.Fatal(err)
	}
	proxy, _ := got["proxy"].(map[string]any)
	jobs, _ := got["jobs"].(map[string]any)
	history, _ := jobs["history"].(map[string]any)
	if proxy["httpsProxy"] != "http://typed:3128" || !reflect.DeepEqual(proxy["noProxy"], []any{".corp"}) {
		t.Errorf("proxy %v: want the attribute's httpsProxy and the values' noProxy", proxy)
	}
	if history["succeeded"] != int64(3) || history["failed"] != float64(8) {
		t.Errorf("jobs.history %v: want succeeded from the attribute, failed from values", history)
	}
	if got["logLevel"] != "debug" || jobs["namespace"] != "from-values" {
		t.Errorf("values must win over the defaults of log_level and job_namespace: %v, %v", got["logLevel"], jobs["namespace"])
	}
}

// TestAgentJobsValidators checks the plan-time checks of values the schema's types let through.
func TestAgentJobsValidators(t *testing.T) {
	ca := testCAPEM(t, "a")
	for _, tc := range []struct {
		in, want string // want "" means valid
	}{
		{ca, ""},
		{"subject=CN=a\n" + ca + testCAPEM(t, "b"), ""},
		{"not a certificate", "holds no PEM certificate"},
		{strings.Replace(ca, "CERTIFICATE", "PRIVATE KEY", 2), "only CERTIFICATE blocks"},
	} {
		_, err := parseCertificates(tc.in)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("parseCertificates(%.30q): %v, want %q", tc.in, err, tc.want)
		}
	}
	r := &valuesReader{}
	if got := r.caPEM(types.StringValue("subject=CN=a\n" + ca)); got != ca || r.err != nil {
		t.Errorf("caPEM keeps text around the certificate: %q, %v", got, r.err)
	}
}

// TestProviderInstallationFromHCL reads back what the chart values hold, and warns about a
// block the attributes cannot express.
func TestProviderInstallationFromHCL(t *testing.T) {
	m := minimalAgentModel()
	m.ProviderInstallation = &providerInstallationModel{
		FilesystemMirror: &filesystemMirrorModel{Path: types.StringValue("/plugins"), Include: types.ListNull(types.StringType), Exclude: types.ListNull(types.StringType)},
	}
	vals, err := m.chartValues()
	if err != nil {
		t.Fatal(err)
	}
	back := kubernetesAgentModel{Namespace: m.Namespace}
	if d := back.setInputsFromValues(vals); d.HasError() || !reflect.DeepEqual(back.ProviderInstallation, m.ProviderInstallation) {
		t.Errorf("imported %+v, %v", back.ProviderInstallation, d)
	}
	vals["jobs"].(map[string]any)["providerInstallation"] = "provider_installation {\n  dev_overrides {}\n}\n" //nolint:forcetypeassert // set above
	back = kubernetesAgentModel{Namespace: m.Namespace}
	if d := back.setInputsFromValues(vals); back.ProviderInstallation != nil || d.WarningsCount() != 1 {
		t.Errorf("a block the attributes cannot express: imported %+v, %v", back.ProviderInstallation, d)
	}
}

// TestAccKubernetesAgent_jobSettings installs the chart into the test bed with every job and
// network setting, and checks the objects Helm rendered: the agent Deployment's environment
// (what the agent hands to job pods), tolerations and resources, and the CA bundle's Secrets in
// the agent's and the jobs' namespaces. Import reads every setting back; switching the CA bundle
// to a Secret of one's own removes the chart's.
func TestAccKubernetesAgent_jobSettings(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	ca := testCAPEM(t, "corp")
	settings := func(caBundle string) string {
		return `
  wait_for_connection = false
  proxy {
    https    = "http://proxy.corp:3128"
    http     = "http://proxy.corp:3128"
    no_proxy = [".corp", "10.1.0.0/16"]
  }
` + caBundle + `
  job_history {
    succeeded = 0
    failed    = 20
  }
  plugin_cache {
    claim_name = "tf-plugins"
  }
  provider_installation {
    network_mirror {
      url     = "https://mirror.corp/providers/"
      include = ["registry.terraform.io/hashicorp/*"]
    }
    direct {
      exclude = ["registry.terraform.io/hashicorp/*"]
    }
  }
  extra_env = [
    { name = "AWS_REGION", value = "eu-west-1" },
    { name = "API_TOKEN", secret_key_ref = { name = "agent-secrets", key = "token" } },
  ]
  forward_env   = ["AWS_REGION"]
  job_resources = { requests = { memory = "1Gi" } }
  tolerations   = [{ key = "dedicated", operator = "Exists", effect = "NoSchedule" }]
  resources     = { limits = { memory = "300Mi" } }
  job_image {
    repository = "registry.corp/outpost/job"
    tag        = "1.0"
  }
`
	}
	withPEM := settings("  ca_bundle {\n    pem = <<EOT\n" + ca + "EOT\n  }\n")
	withSecret := settings("  ca_bundle {\n    secret_name = \"corp-ca\"\n    secret_key = \"bundle.pem\"\n  }\n")
	caSecret := agentchart.Fullname(defaultReleaseName, nil) + "-ca-bundle"

	envOf := func(d *appsv1.Deployment) map[string]corev1.EnvVar {
		out := map[string]corev1.EnvVar{}
		for _, v := range d.Spec.Template.Spec.Containers[0].Env {
			out[v.Name] = v
		}
		return out
	}
	checkSettings := func(setting func(string) string) error {
		for key, want := range map[string]string{
			"jobs.history":     `{"failed":20,"succeeded":0}`,
			"jobs.pluginCache": `{"persistentVolumeClaim":{"claimName":"tf-plugins"}}`,
			"jobs.forwardEnv":  `["AWS_REGION"]`,
			"jobs.image":       `"registry.corp/outpost/job:1.0"`,
		} {
			if got := setting(key); got != want {
				return fmt.Errorf("agent setting %s = %s, want %s", key, got, want)
			}
		}
		if v := setting("jobs.providerInstallation"); !strings.Contains(v, `url     = \"https://mirror.corp/providers/\"`) ||
			!strings.Contains(v, `direct {\n    exclude = [\"registry.terraform.io/hashicorp/*\"]`) {
			return fmt.Errorf("jobs.providerInstallation %s", v)
		}
		if v := setting("jobs.resources"); !strings.Contains(v, `"memory":"1Gi"`) || !strings.Contains(v, `"limits":{"memory":"2Gi"}`) {
			return fmt.Errorf("jobs.resources %s: want requests.memory 1Gi merged into the chart's defaults", v)
		}
		return nil
	}
	checkRendered := func(d *appsv1.Deployment) error {
		env := envOf(d)
		pod := d.Spec.Template.Spec
		c := pod.Containers[0]
		for name, want := range map[string]string{
			"HTTPS_PROXY": "http://proxy.corp:3128",
			"HTTP_PROXY":  "http://proxy.corp:3128",
			"AWS_REGION":  "eu-west-1",
		} {
			if got := env[name]; got.Value != want {
				return fmt.Errorf("%s = %q, want %q", name, got.Value, want)
			}
		}
		if v := env["NO_PROXY"].Value; !strings.HasPrefix(v, ".corp,10.1.0.0/16,") {
			return fmt.Errorf("NO_PROXY %q does not start with no_proxy's entries", v)
		}
		if ref := env["API_TOKEN"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "agent-secrets" || ref.SecretKeyRef.Key != "token" {
			return fmt.Errorf("API_TOKEN %+v: want the key token of Secret agent-secrets", env["API_TOKEN"])
		}
		if len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" || pod.Tolerations[0].Operator != corev1.TolerationOpExists ||
			pod.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
			return fmt.Errorf("tolerations %+v", pod.Tolerations)
		}
		if c.Resources.Limits.Memory().String() != "300Mi" || c.Resources.Requests.Cpu().String() != "50m" {
			return fmt.Errorf("resources %+v: want the limit 300Mi and the chart's 50m CPU request", c.Resources)
		}
		return nil
	}
	checkCASecrets := func(want bool) resource.TestCheckFunc {
		return func(*terraform.State) error {
			for _, n := range []string{ns, ns + "-jobs"} {
				s, err := e.kube().CoreV1().Secrets(n).Get(context.Background(), caSecret, metav1.GetOptions{})
				switch {
				case want && err != nil:
					return fmt.Errorf("CA Secret %s/%s: %w", n, caSecret, err)
				case want && string(s.Data["ca.crt"]) != ca:
					return fmt.Errorf("CA Secret %s/%s holds %q", n, caSecret, s.Data["ca.crt"])
				case !want && err == nil:
					return fmt.Errorf("CA Secret %s/%s still there after switching to secret_name", n, caSecret)
				case !want && !apierrors.IsNotFound(err):
					return fmt.Errorf("CA Secret %s/%s: %w", n, caSecret, err)
				}
			}
			return nil
		}
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkReleaseGone(ns, defaultReleaseName),
		Steps: []resource.TestStep{
			{
				Config: e.agentStack(ns, "agent-jobs", withPEM),
				Check: resource.ComposeTestCheckFunc(
					e.checkAgentDeployment(ns, checkRendered),
					e.checkAgentSettings(ns, func(setting func(string) string) error {
						if err := checkSettings(setting); err != nil {
							return err
						}
						if setting("jobs.caSecret") != `"`+caSecret+`"` || setting("jobs.caSecretKey") != `"ca.crt"` {
							return fmt.Errorf("CA settings %s %s", setting("jobs.caSecret"), setting("jobs.caSecretKey"))
						}
						return nil
					}),
					checkCASecrets(true),
				),
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				ResourceName:            agentAddr,
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"wait_for_connection", "create_namespaces"},
			},
			{
				Config: e.agentStack(ns, "agent-jobs", withSecret),
				Check: resource.ComposeTestCheckFunc(
					e.checkAgentDeployment(ns, checkRendered),
					e.checkAgentSettings(ns, func(setting func(string) string) error {
						if err := checkSettings(setting); err != nil {
							return err
						}
						if setting("jobs.caSecret") != `"corp-ca"` || setting("jobs.caSecretKey") != `"bundle.pem"` {
							return fmt.Errorf("CA settings %s %s", setting("jobs.caSecret"), setting("jobs.caSecretKey"))
						}
						return nil
					}),
					checkCASecrets(false),
				),
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
		},
	})
}
