package release

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/release/releasetest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// HelmEnv names the helm CLI the tests run.
const HelmEnv = releasetest.HelmEnv

// helmCLI runs the real helm CLI with a configuration of its own and the test bed's kubeconfig.
type helmCLI struct {
	path, home, kubeconfig string
}

func newHelm(t *testing.T, c *testbed.Cluster) helmCLI {
	t.Helper()
	p := os.Getenv(HelmEnv)
	if p == "" {
		t.Skipf("%s is not set: build the helm CLI with scripts/tools.sh helm and export %s (make test does)", HelmEnv, HelmEnv)
	}
	return helmCLI{path: p, home: t.TempDir(), kubeconfig: c.Kubeconfig}
}

func (h helmCLI) run(t *testing.T, args ...string) string {
	t.Helper()
	cmd := releasetest.HelmCommand(t.Context(), h.path, h.home, h.kubeconfig, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// uaRecorder is a reverse proxy in front of the orchestrator that records the User-Agent of every
// request, to see which version the provider reports.
type uaRecorder struct {
	mu  sync.Mutex
	uas map[string]bool
}

func (u *uaRecorder) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for k := range u.uas {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestChartFromOCIMatchesTheProviderInstall pushes the snapshot's chart to an OCI registry (an
// in-memory one on loopback) with the release's own push code, installs it from there with the
// real helm CLI as the chart's README tells users to, installs the agent through the snapshot's
// provider (terraform init from the mirror, outpost_kubernetes_agent) with the same settings, and
// compares the two releases: chart name, version and appVersion, and every object of their
// manifests, once the namespaces and runner ids that tell them apart are replaced. The provider
// reports the snapshot's version in its User-Agent.
func TestChartFromOCIMatchesTheProviderInstall(t *testing.T) {
	s := loadSnapshot(t)
	c := testbed.Shared(t)
	helm := newHelm(t, c)
	ctx := t.Context()

	reg := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	var pushLog bytes.Buffer
	pushed, err := PushChart(s.chart(), "oci://"+host+"/charts", Credentials{}, true, &pushLog)
	if err != nil {
		t.Fatalf("pushing the chart: %v\n%s", err, pushLog.String())
	}
	if want := host + "/charts/outpost-agent:" + s.Version; pushed.Ref != want {
		t.Errorf("the chart was pushed as %s, want %s", pushed.Ref, want)
	}

	inst := orchestratortest.Start(t)
	rec := &uaRecorder{uas: map[string]bool{}}
	target, _ := url.Parse(inst.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.uas[r.UserAgent()] = true
		rec.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	admin, err := client.NewAdminClient(inst.URL, "acme", inst.AdminToken)
	if err != nil {
		t.Fatal(err)
	}

	// One agent namespace (with its -jobs and -state namespaces and runner) per install.
	type side struct{ ns, runner string }
	viaHelm := side{testbed.NewNamespace(t, c), "runner-by-helm-cli"}
	viaProvider := side{testbed.NewNamespace(t, c), "runner-by-provider"}
	for _, sd := range []side{viaHelm, viaProvider} {
		for _, ns := range []string{sd.ns + "-jobs", sd.ns + "-state"} {
			createNamespace(t, c, ns)
		}
		pub, _, err := keys.Generate()
		if err != nil {
			t.Fatal(err)
		}
		pubPEM, _ := keys.EncodePublicPEM(pub)
		if _, err := admin.CreateStateStorage(ctx, api.StateStorageInput{ID: sd.runner + "-states", Type: api.StateStorageKubernetes,
			Kubernetes: &api.KubernetesStateSpec{Namespace: sd.ns + "-state"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CreateRunner(ctx, api.RunnerInput{ID: sd.runner, PublicKeys: []string{pubPEM}, StateStorageID: sd.runner + "-states",
			Job: api.RunnerJob{Namespace: sd.ns + "-jobs", ServiceAccount: "outpost-job"}}); err != nil {
			t.Fatal(err)
		}
	}

	// The helm CLI, from the OCI registry, with the values the chart's README asks for and the
	// settings the provider's defaults amount to.
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, fmt.Appendf(nil, `apiUrl: %s
orgId: acme
runnerId: %s
privateKey:
  existingSecret: runner-key
jobs:
  namespace: %s-jobs
state:
  namespace: %s-state
`, front.URL, viaHelm.runner, viaHelm.ns, viaHelm.ns), 0o644); err != nil {
		t.Fatal(err)
	}
	helm.run(t, "install", "outpost-agent", "oci://"+host+"/charts/outpost-agent", "--version", s.Version, "--plain-http",
		"--namespace", viaHelm.ns, "--values", values)

	// The provider of the snapshot, through terraform and the filesystem mirror.
	cliConfig := mirror(t, s)
	tf := clis(t)[0]
	dir := t.TempDir()
	cfg := fmt.Sprintf(`terraform {
  required_providers {
    outpost = {
      source  = "outpost-dev/outpost"
      version = "= %[1]s"
    }
  }
}

provider "outpost" {
  api_url             = %[2]q
  org_id              = "acme"
  token               = %[3]q
  insecure_allow_http = true
  kubernetes {
    config_path = %[4]q
  }
}

resource "outpost_kubernetes_agent" "agent" {
  namespace = %[5]q
  runner_id = %[6]q
  private_key_secret {
    name = "runner-key"
  }
  wait_for_connection = false
}

output "versions" {
  value = "${outpost_kubernetes_agent.agent.chart_version} ${outpost_kubernetes_agent.agent.app_version}"
}
`, s.Version, front.URL, inst.AdminToken, c.Kubeconfig, viaProvider.ns, viaProvider.runner)
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	tf.run(t, dir, cliConfig, "init", "-input=false", "-no-color")
	tf.run(t, dir, cliConfig, "apply", "-input=false", "-no-color", "-auto-approve")
	if got, want := strings.TrimSpace(tf.run(t, dir, cliConfig, "output", "-raw", "versions")), s.Version+" "+s.Version; got != want {
		t.Errorf("outpost_kubernetes_agent installed chart_version and app_version %q, want %q: a release installs its own version", got, want)
	}
	if want := "terraform-provider-outpost/" + s.Version; !contains(rec.seen(), want) {
		t.Errorf("the provider called the orchestrator with User-Agents %q, want %q", rec.seen(), want)
	}

	// Both releases: the same chart and version, the same objects.
	for _, sd := range []side{viaHelm, viaProvider} {
		var list []struct {
			Chart      string `json:"chart"`
			AppVersion string `json:"app_version"`
			Status     string `json:"status"`
		}
		if err := json.Unmarshal([]byte(helm.run(t, "list", "--namespace", sd.ns, "--output", "json")), &list); err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].Chart != "outpost-agent-"+s.Version || list[0].AppVersion != s.Version || list[0].Status != "deployed" {
			t.Errorf("helm list -n %s: %+v, want one deployed outpost-agent-%s with app version %s", sd.ns, list, s.Version, s.Version)
		}
	}
	neutral := func(sd side) *strings.Replacer {
		return strings.NewReplacer(sd.ns, "NAMESPACE", sd.runner, "RUNNER", front.URL, "API_URL")
	}
	// The pods' checksum of the agent's configuration file hashes the file with each release's
	// own namespace in it, so it differs by construction; the ConfigMaps themselves are compared
	// below, with their namespaces made neutral.
	checksum := regexp.MustCompile(`(checksum/config: )[0-9a-f]{64}`)
	manifest := func(sd side) string {
		m := helm.run(t, "get", "manifest", "outpost-agent", "--namespace", sd.ns)
		return checksum.ReplaceAllString(neutral(sd).Replace(m), "${1}CHECKSUM")
	}
	fromHelm := manifestObjects(t, manifest(viaHelm))
	fromProvider := manifestObjects(t, manifest(viaProvider))
	if len(fromHelm) < 5 {
		t.Fatalf("the helm CLI's release has only %d objects: %v", len(fromHelm), sortedKeys(fromHelm))
	}
	for _, k := range sortedKeys(fromHelm) {
		if _, ok := fromProvider[k]; !ok {
			t.Errorf("%s: installed by the helm CLI, not by the provider", k)
		}
	}
	for _, k := range sortedKeys(fromProvider) {
		h, ok := fromHelm[k]
		switch {
		case !ok:
			t.Errorf("%s: installed by the provider, not by the helm CLI", k)
		case !reflect.DeepEqual(h, fromProvider[k]):
			a, _ := yaml.Marshal(h)
			b, _ := yaml.Marshal(fromProvider[k])
			t.Errorf("%s differs:\n--- helm CLI from the OCI chart ---\n%s\n--- provider ---\n%s", k, a, b)
		}
	}
	t.Logf("compared %d objects of each release: %s", len(fromProvider), strings.Join(sortedKeys(fromProvider), ", "))
	// And the objects are really there: the agent Deployments run the snapshot's image.
	for _, sd := range []side{viaHelm, viaProvider} {
		d, err := c.Client().AppsV1().Deployments(sd.ns).Get(ctx, "outpost-agent", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := d.Spec.Template.Spec.Containers[0].Image, "ghcr.io/outpost-dev/outpost-agent:"+s.Version; got != want {
			t.Errorf("the agent Deployment in %s runs %s, want %s", sd.ns, got, want)
		}
	}
	tf.run(t, dir, cliConfig, "destroy", "-input=false", "-no-color", "-auto-approve")
	helm.run(t, "uninstall", "outpost-agent", "--namespace", viaHelm.ns)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// manifestObjects parses a release manifest into its objects by "Kind namespace/name".
func manifestObjects(t *testing.T, manifest string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range strings.Split(manifest, "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("manifest document %q: %v", doc, err)
		}
		if len(obj) == 0 {
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		k := fmt.Sprintf("%v %v/%v", obj["kind"], meta["namespace"], meta["name"])
		if _, dup := out[k]; dup {
			t.Fatalf("the manifest holds %s twice", k)
		}
		out[k] = obj
	}
	return out
}

func createNamespace(t *testing.T, c *testbed.Cluster, name string) {
	t.Helper()
	cs := c.Client()
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", name, err)
		}
	})
}
