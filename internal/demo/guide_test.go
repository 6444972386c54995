package demo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		d := e.deploymentJSON(agentNS)
		for _, want := range []string{`"serviceAccountName":"humanitec-kubernetes-agent-runner"`, `"secretName":"` + secretName + `"`,
			`"key":"private_key"`, `"name":"OUTPOST_ORG_ID","value":"acme"`, `"name":"OUTPOST_RUNNER_ID","value":"` + runnerID + `"`} {
			if !strings.Contains(d, want) {
				t.Errorf("agent Deployment lacks %s:\n%s", want, d)
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
