package demo

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// guideExample is the worked example of templates/guides/humanitec-migration.md.tmpl.
const guideExample = "examples/guides/humanitec-migration/main.tf"

// testKeyPair makes an ed25519 key pair in the PEM forms `openssl genpkey -algorithm ed25519`
// and `openssl pkey -pubout` write (PKCS#8 and PKIX).
func testKeyPair(t *testing.T) (pub, priv string) {
	t.Helper()
	p, k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if pub, err = keys.EncodePublicPEM(p); err != nil {
		t.Fatal(err)
	}
	if priv, err = keys.EncodePrivatePEM(k); err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// testHumanitecGuide applies the guide's worked example as written, in a cluster set up the way
// the Humanitec documentation leaves it: the runner's key pair in files made with openssl, the
// private key in a Secret of the agent's namespace under the key private_key. An override file
// only points the module source at this checkout, the provider at the test bed, and turns off
// the connection wait (no agent process runs here).
func testHumanitecGuide(e *moduleEnv) {
	t := e.t
	example, err := os.ReadFile(filepath.Join(e.c.Repo, guideExample))
	if err != nil {
		t.Fatal(err)
	}
	pub, priv := testKeyPair(t)
	const agentNS, jobNS, secretName = "humanitec-kubernetes-agent-runner-ns", "humanitec-kubernetes-agent-runner-job-ns", "humanitec-kubernetes-agent-runner"
	if _, err := e.kube.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.CoreV1().Secrets(agentNS).Create(e.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName},
		Data:       map[string][]byte{"private_key": []byte(priv)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := e.workDir(map[string]string{
		"main.tf":               string(example),
		"runner_public_key.pem": pub,
		"test_override.tf": `
provider "outpost" {
  kubernetes {
    config_path = "` + e.kubeconfig + `"
  }
}

module "kubernetes_agent_runner" {
  source              = "MODULE_SOURCE"
  wait_for_connection = false
}
`,
	})
	const runnerID = "kubernetes-agent-gke-acme-platform-europe-west1-prod"
	e.applyPlanEmptyDestroy(dir, runnerID, func() {
		r, err := e.admin.GetRunner(e.ctx, runnerID)
		if err != nil {
			t.Fatalf("runner %s not registered: %v", runnerID, err)
		}
		if len(r.PublicKeys) != 1 || strings.TrimSpace(r.PublicKeys[0]) != strings.TrimSpace(pub) {
			t.Errorf("registered public keys %q, want the file's %q", r.PublicKeys, pub)
		}
		if r.Job.Namespace != jobNS || r.Job.ServiceAccount != "humanitec-kubernetes-agent-runner-job" ||
			r.Job.PodTemplate != `{"metadata":{"labels":{"app.kubernetes.io/name":"kubernetes-agent-runner"}}}` {
			t.Errorf("runner job settings %+v", r.Job)
		}
		if d := e.deploymentJSON(agentNS); !strings.Contains(d, `"serviceAccountName":"humanitec-kubernetes-agent-runner"`) {
			t.Errorf("agent Deployment does not run as humanitec-kubernetes-agent-runner:\n%s", d)
		}
		settings := e.agentSettings(agentNS)
		for key, want := range map[string]string{"privateKey": `{"existingSecret":"` + secretName + `","secretKey":"private_key"}`,
			"orgId": `"acme"`, "runnerId": `"` + runnerID + `"`} {
			if got := setting(settings, key); got != want {
				t.Errorf("agent setting %s = %s, want %s", key, got, want)
			}
		}
		sa, err := e.kube.CoreV1().ServiceAccounts(jobNS).Get(e.ctx, "humanitec-kubernetes-agent-runner-job", metav1.GetOptions{})
		if err != nil || sa.Annotations["iam.gke.io/gcp-service-account"] != "deployer@acme-platform.iam.gserviceaccount.com" {
			t.Errorf("jobs' service account: %v %v", sa, err)
		}
	})
	// The key Secret was the user's before and stays theirs.
	if _, err := e.kube.CoreV1().Secrets(agentNS).Get(e.ctx, secretName, metav1.GetOptions{}); err != nil {
		t.Errorf("destroy removed the user's key Secret: %v", err)
	}
}

// humanitecModuleCall is Humanitec's documented module call with only `source` changed.
const humanitecModuleCall = "examples/guides/humanitec-migration/humanitec-module/main.tf"

// testHumanitecModule applies Humanitec's documented installer-module call (all 15 inputs, the
// self-hosting ones included) with only `source` changed, in a cluster with nothing prepared:
// the key pair is the openssl files the documentation makes, and the provider writes the Secret.
// The override file points the module source at this checkout and the provider at the test bed,
// and turns off the connection wait. It checks what was registered and installed, that Humanitec's
// runner image runs nowhere, that the inputs Outpost ignores say so, and that their outputs exist.
// A plan with proxy variables in extra_env_vars shows them as the agent's proxy.
func testHumanitecModule(e *moduleEnv) {
	t := e.t
	call, err := os.ReadFile(filepath.Join(e.c.Repo, humanitecModuleCall))
	if err != nil {
		t.Fatal(err)
	}
	pub, priv := testKeyPair(t)
	override := `
provider "outpost" {
  kubernetes {
    config_path    = "` + e.kubeconfig + `"
    config_context = null
  }
}

module "kubernetes_agent_runner" {
  source              = "HUMANITEC_MODULE_SOURCE"
  wait_for_connection = false
}
`
	dir := e.workDir(map[string]string{
		"main.tf":                string(call),
		"runner_public_key.pem":  pub,
		"runner_private_key.pem": priv,
		"test_override.tf":       override,
	})
	const (
		runnerID         = "kubernetes-agent-prod-eu"
		agentNS, jobNS   = "humanitec-kubernetes-agent-runner-ns", "humanitec-kubernetes-agent-runner-job-ns"
		agentSA, jobSA   = "humanitec-kubernetes-agent-runner", "humanitec-kubernetes-agent-runner-job"
		roleARN          = "arn:aws:iam::123456789012:role/humanitec-runner"
		humanitecImage   = "myregistry.example.com/humanitec/humanitec-runner"
		roleARNAnnotated = "eks.amazonaws.com/role-arn"
	)
	e.applyPlanEmptyDestroy(dir, runnerID, func() {
		r, err := e.admin.GetRunner(e.ctx, runnerID)
		if err != nil {
			t.Fatalf("runner %s not registered: %v", runnerID, err)
		}
		if len(r.PublicKeys) != 1 || strings.TrimSpace(r.PublicKeys[0]) != strings.TrimSpace(pub) || r.Job.Namespace != jobNS || r.Job.ServiceAccount != jobSA {
			t.Errorf("runner registered as %+v", r)
		}
		if ss, err := e.admin.GetStateStorage(e.ctx, r.StateStorageID); err != nil || ss.Kubernetes == nil || ss.Kubernetes.Namespace != jobNS {
			t.Errorf("state storage %s: %+v, %v; want kubernetes in %s, where Humanitec's module kept the states", r.StateStorageID, ss, err, jobNS)
		}
		sec, err := e.kube.CoreV1().Secrets(agentNS).Get(e.ctx, runnerID+"-key", metav1.GetOptions{})
		if err != nil || !samePrivateKey(t, sec.Data[privateKeyDataKey], priv) {
			t.Errorf("the provider did not write runner_private_key.pem into Secret %s/%s-key: %v", agentNS, runnerID, err)
		}
		d := e.deploymentJSON(agentNS)
		for _, want := range []string{`"serviceAccountName":"` + agentSA + `"`, `"image":"ghcr.io/outpost-dev/outpost-agent:`} {
			if !strings.Contains(d, want) {
				t.Errorf("agent Deployment lacks %s:\n%s", want, d)
			}
		}
		for _, unwanted := range []string{humanitecImage, "REMOTE_URL"} {
			if strings.Contains(d, unwanted) {
				t.Errorf("agent Deployment holds %s:\n%s", unwanted, d)
			}
		}
		for _, sa := range []struct{ ns, name string }{{agentNS, agentSA}, {jobNS, jobSA}} {
			got, err := e.kube.CoreV1().ServiceAccounts(sa.ns).Get(e.ctx, sa.name, metav1.GetOptions{})
			if err != nil || got.Annotations[roleARNAnnotated] != roleARN {
				t.Errorf("service_account_annotations must reach service account %s/%s: %v, %v", sa.ns, sa.name, got, err)
			}
		}
		var outputs map[string]struct{ Value any }
		if err := json.Unmarshal([]byte(e.run(dir, "output", "-json")), &outputs); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]any{"runner_id": runnerID, "k8s_namespace": agentNS, "k8s_job_namespace": jobNS,
			"k8s_service_account": agentSA, "k8s_job_service_account_name": jobSA, "runner_helm_chart_version": agentchart.Version} {
			if got := outputs[name].Value; got != want {
				t.Errorf("output %s = %v, want %v", name, got, want)
			}
		}
	})
	// The ignored inputs said so, on every plan and apply.
	out := e.run(dir, "plan", "-input=false", "-no-color")
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"kubernetes_agent_runner_chart_repository and kubernetes_agent_runner_chart_version are ignored",
		"name Humanitec's runner image; Outpost's chart runs its own agent, so they are ignored",
		"pod_template sets Humanitec's runner image (" + humanitecImage + ")",
		"REMOTE_URL in extra_env_vars is ignored"} {
		if !strings.Contains(flat, want) {
			t.Errorf("plan does not warn %q:\n%s", want, out)
		}
	}

	// Proxy variables in extra_env_vars become the agent's proxy; the rest stay on the agent.
	proxied := strings.Replace(string(call), `extra_env_vars = [`, `extra_env_vars = [
    { name = "HTTPS_PROXY", value = "http://proxy.corp:3128" },
    { name = "no_proxy", value = ".corp, 10.0.0.0/8" },
    { name = "TF_LOG", value = "INFO" },`, 1)
	dir = e.workDir(map[string]string{"main.tf": proxied, "runner_public_key.pem": pub, "runner_private_key.pem": priv, "test_override.tf": override})
	e.run(dir, "get", "-no-color")
	e.run(dir, "plan", "-input=false", "-no-color", "-out=plan.bin")
	var plan struct {
		PlannedValues struct {
			RootModule struct {
				ChildModules []struct {
					ChildModules []struct {
						Resources []struct {
							Type   string
							Values map[string]any
						}
					} `json:"child_modules"`
				} `json:"child_modules"`
			} `json:"root_module"`
		} `json:"planned_values"`
	}
	if err := json.Unmarshal([]byte(e.run(dir, "show", "-json", "plan.bin")), &plan); err != nil {
		t.Fatal(err)
	}
	var agent map[string]any
	for _, m := range plan.PlannedValues.RootModule.ChildModules {
		for _, c := range m.ChildModules {
			for _, r := range c.Resources {
				if r.Type == "outpost_kubernetes_agent" {
					agent = r.Values
				}
			}
		}
	}
	proxy, _ := json.Marshal(agent["proxy"])
	env, _ := json.Marshal(agent["extra_env"])
	if string(proxy) != `{"http":null,"https":"http://proxy.corp:3128","no_proxy":[".corp","10.0.0.0/8"]}` ||
		!strings.Contains(string(env), `"name":"TF_LOG"`) || strings.Contains(string(env), "PROXY") || strings.Contains(string(env), "REMOTE_URL") {
		t.Errorf("planned agent proxy %s and extra_env %s", proxy, env)
	}
}

// samePrivateKey reports whether two PEM private keys are the same key.
func samePrivateKey(t *testing.T, a []byte, b string) bool {
	t.Helper()
	ka, errA := keys.ParsePrivatePEM(a)
	kb, errB := keys.ParsePrivatePEM([]byte(b))
	return errA == nil && errB == nil && ka.Equal(kb)
}

// testCAPEM makes a self-signed CA certificate in PEM form.
func testCAPEM(t *testing.T) string {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "corp CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
