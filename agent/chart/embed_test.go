package chart_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/lint/support"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
)

// TestLoad checks the embedded chart: its identity matches the Go constants, and it holds every
// file of the chart directory (a file added to the chart but not to the go:embed line would
// otherwise be missing from the provider only).
func TestLoad(t *testing.T) {
	c, err := agentchart.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("the embedded chart is invalid: %v", err)
	}
	md := c.Metadata
	if md.Name != agentchart.Name || md.Version != agentchart.Version || md.AppVersion != agentchart.AppVersion || md.APIVersion != chart.APIVersionV2 {
		t.Errorf("Chart.yaml says %s %s (app %s, apiVersion %s); the Go constants say %s %s (app %s, apiVersion v2)",
			md.Name, md.Version, md.AppVersion, md.APIVersion, agentchart.Name, agentchart.Version, agentchart.AppVersion)
	}
	if c.Schema == nil {
		t.Error("the embedded chart has no values.schema.json")
	}

	dir, err := loader.LoadDir(".")
	if err != nil {
		t.Fatalf("loading the chart directory: %v", err)
	}
	if got, want := rawNames(c), rawNames(dir); !slices.Equal(got, want) {
		t.Errorf("embedded chart files %v, chart directory files %v: update the go:embed line in embed.go (or .helmignore)", got, want)
	}

	// Load hands out independent copies.
	again, err := agentchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	c.Values["replicaCount"] = 7
	if again.Values["replicaCount"] == 7 {
		t.Error("two Load calls share their values")
	}
}

func rawNames(c *chart.Chart) []string {
	var names []string
	for _, f := range c.Raw {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	return names
}

// TestLint runs Helm's linter in strict mode over the embedded chart, written to disk the way
// `helm lint` sees a chart, with the minimal values and with every optional feature on.
func TestLint(t *testing.T) {
	dir := t.TempDir()
	err := fs.WalkDir(agentchart.Files(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, "outpost-agent", filepath.FromSlash(name))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := fs.ReadFile(agentchart.Files(), name)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatalf("writing the embedded chart: %v", err)
	}

	for name, overrides := range map[string]string{
		"required values only": "",
		"every feature": `
jobs:
  namespace: outpost-jobs
  podLabels: {azure.workload.identity/use: "true"}
  serviceAccount: {annotations: {azure.workload.identity/client-id: "00000000-0000-0000-0000-000000000001"}}
  image: {repository: ghcr.io/acme/runner, tag: "1.0"}
  rbac: {rules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]}
  resources: {requests: {cpu: "1", memory: 1Gi}, limits: {memory: 4Gi}}
  forwardEnv: [AWS_REGION]
  history: {succeeded: 3, failed: 5}
  pluginCache: {persistentVolumeClaim: {claimName: tf-plugins}}
  providerInstallation: 'provider_installation { network_mirror { url = "https://mirror.corp/" } }'
state: {namespace: outpost-state}
proxy: {httpsProxy: "http://proxy.corp:3128", noProxy: [git.corp]}
caBundle: {existingSecret: corp-ca}
imagePullSecrets: [ghcr-pull]
global: {imageRegistry: mirror.corp}
networkPolicy: {enabled: true}
podDisruptionBudget: {minAvailable: 1}
tests: {maxAge: 90s, wait: 30s, resources: {limits: {memory: 32Mi}}}
extraEnv: [{name: FOO, value: bar}, {name: AWS_REGION, value: eu-west-1}]
extraVolumes: [{name: corp-files, configMap: {name: corp}}]
extraVolumeMounts: [{name: corp-files, mountPath: /etc/corp, readOnly: true}]
logFormat: text
`,
	} {
		t.Run(name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = releaseNamespace
			lint.KubeVersion = kubeVersion
			res := lint.Run([]string{filepath.Join(dir, "outpost-agent")}, mergeValues(t, overrides))
			if res.TotalChartsLinted != 1 {
				t.Errorf("linted %d charts, want 1", res.TotalChartsLinted)
			}
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("lint: %s", m.Error())
				} else {
					t.Logf("lint: %s", m.Error())
				}
			}
			for _, err := range res.Errors {
				t.Errorf("lint error: %v", err)
			}
		})
	}
}
