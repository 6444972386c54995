package chart_test

import (
	"strings"
	"testing"
)

// TestInvalidValuesRefused checks that bad values stop an install before anything reaches the
// cluster, with a message that names the value: the schema's for types, names, enums and unknown
// keys, the templates' for combinations the schema cannot express.
func TestInvalidValuesRefused(t *testing.T) {
	tests := []struct {
		name, values string
		want         []string // substrings of the error
	}{
		// Required values.
		{name: "missing runnerId", values: "runnerId: null",
			want: []string{"at '': missing property 'runnerId'"}},
		{name: "missing apiUrl and orgId", values: "apiUrl: null\norgId: null",
			want: []string{"missing properties 'apiUrl', 'orgId'"}},
		{name: "missing private key Secret", values: "privateKey: {existingSecret: null}",
			want: []string{"at '/privateKey': missing property 'existingSecret'"}},
		{name: "empty runnerId", values: `runnerId: ""`,
			want: []string{"at '/runnerId'", "does not match pattern"}},
		// Types.
		{name: "replicaCount is not a number", values: "replicaCount: two",
			want: []string{"at '/replicaCount'", "got string, want integer"}},
		{name: "job pod label is a boolean", values: "jobs: {podLabels: {azure.workload.identity/use: true}}",
			want: []string{"at '/jobs/podLabels/azure.workload.identity~1use'", "got boolean, want string"}},
		{name: "annotations are not a map", values: "serviceAccount: {annotations: [a]}",
			want: []string{"at '/serviceAccount/annotations'", "got array, want object"}},
		{name: "networkPolicy.enabled is a string", values: `networkPolicy: {enabled: "yes"}`,
			want: []string{"at '/networkPolicy/enabled'", "got string, want boolean"}},
		{name: "networkPolicy.metricsFrom is not a list of peers", values: `networkPolicy: {metricsFrom: {namespaceSelector: {}}}`,
			want: []string{"at '/networkPolicy/metricsFrom'", "got object, want array"}},
		{name: "networkPolicy.metricsFrom holds an empty peer (everyone)", values: `networkPolicy: {metricsFrom: [{}]}`,
			want: []string{"at '/networkPolicy/metricsFrom/0'", "minProperties"}},
		// Unknown keys.
		{name: "unknown top-level key", values: "replicas: 3",
			want: []string{"at '': additional properties 'replicas' not allowed"}},
		{name: "unknown nested key", values: "jobs: {serviceAccountName: terraform}",
			want: []string{"at '/jobs': additional properties 'serviceAccountName' not allowed"}},
		// Patterns and enums.
		{name: "jobs namespace is not a DNS label", values: "jobs: {namespace: Outpost_Jobs}",
			want: []string{"at '/jobs/namespace'", "'Outpost_Jobs' does not match pattern"}},
		{name: "state namespace too long", values: "state: {namespace: " + strings.Repeat("a", 64) + "}",
			want: []string{"at '/state/namespace'", "maxLength"}},
		{name: "job ServiceAccount name", values: "jobs: {serviceAccount: {name: Terraform}}",
			want: []string{"at '/jobs/serviceAccount/name'"}},
		{name: "apiUrl without scheme", values: "apiUrl: outpost.example.com",
			want: []string{"at '/apiUrl'", "does not match pattern"}},
		{name: "unknown CLI", values: "cli: terragrunt",
			want: []string{"at '/cli'", "'terraform', 'tofu'"}},
		{name: "relative CLI path", values: "cli: bin/tofu",
			want: []string{"at '/cli'"}},
		{name: "job image without repository", values: `jobs: {image: {repository: ""}}`,
			want: []string{"at '/jobs/image/repository'"}},
		{name: "unknown pull policy", values: "image: {pullPolicy: Sometimes}",
			want: []string{"at '/image/pullPolicy'"}},
		{name: "digest without algorithm", values: "image: {digest: 0123abcd}",
			want: []string{"at '/image/digest'"}},
		{name: "proxy without scheme", values: "proxy: {httpsProxy: proxy.corp:3128}",
			want: []string{"at '/proxy/httpsProxy'"}},
		{name: "startup timeout not a duration", values: "jobs: {startupTimeout: 3 minutes}",
			want: []string{"at '/jobs/startupTimeout'"}},
		{name: "PDB budget not a number or percentage", values: "podDisruptionBudget: {maxUnavailable: half}",
			want: []string{"at '/podDisruptionBudget/maxUnavailable'"}},
		{name: "zero replicas", values: "replicaCount: 0",
			want: []string{"at '/replicaCount'", "minimum"}},
		{name: "extraEnv entry without name", values: "extraEnv: [{value: x}]",
			want: []string{"at '/extraEnv/0': missing property 'name'"}},
		{name: "blocked CIDR", values: "networkPolicy: {blockedCIDRs: [metadata]}",
			want: []string{"at '/networkPolicy/blockedCIDRs/0'"}},
		{name: "job resources not a quantity", values: "jobs: {resources: {limits: {memory: lots}}}",
			want: []string{"at '/jobs/resources/limits/memory'"}},
		{name: "job resources unknown key", values: "jobs: {resources: {limit: {memory: 1Gi}}}",
			want: []string{"at '/jobs/resources': additional properties 'limit' not allowed"}},
		{name: "forwarded agent setting", values: "jobs: {forwardEnv: [OUTPOST_API_URL]}",
			want: []string{"at '/jobs/forwardEnv/0'"}},
		{name: "forwarded proxy variable", values: "jobs: {forwardEnv: [https_proxy]}",
			want: []string{"at '/jobs/forwardEnv/0'"}},
		{name: "negative job history", values: "jobs: {history: {failed: -1}}",
			want: []string{"at '/jobs/history/failed'", "minimum"}},
		{name: "unknown log format", values: "logFormat: logfmt",
			want: []string{"at '/logFormat'", "'json', 'text'"}},
		{name: "extra volume named like the chart's", values: "extraVolumes: [{name: private-key, emptyDir: {}}]",
			want: []string{"at '/extraVolumes/0/name'"}},
		{name: "extra mount without a path", values: "extraVolumeMounts: [{name: x}]",
			want: []string{"at '/extraVolumeMounts/0': missing property 'mountPath'"}},
		{name: "extra mount with a relative path", values: "extraVolumeMounts: [{name: x, mountPath: etc/x}]",
			want: []string{"at '/extraVolumeMounts/0/mountPath'"}},
		{name: "plugin cache with two volume types", values: "jobs: {pluginCache: {emptyDir: {}, persistentVolumeClaim: {claimName: x}}}",
			want: []string{"at '/jobs/pluginCache'"}},
		{name: "provider installation without its block", values: `jobs: {providerInstallation: "network_mirror { url = \"https://m/\" }"}`,
			want: []string{"at '/jobs/providerInstallation'"}},
		// Combinations checked by the templates.
		{name: "several replicas without leader election", values: "leaderElection: {enabled: false}",
			want: []string{"leaderElection.enabled=false needs replicaCount=1"}},
		{name: "existing agent ServiceAccount without a name", values: "serviceAccount: {create: false}",
			want: []string{"serviceAccount.name is required when serviceAccount.create is false"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(t, tc.values, renderOptions{})
			if err == nil {
				t.Fatalf("values %q were accepted", tc.values)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %q:\n%v", want, err)
				}
			}
		})
	}
}

// TestRequiredWithoutSchema checks that the templates refuse missing required values on their own,
// for installs that skip schema validation.
func TestRequiredWithoutSchema(t *testing.T) {
	for value, want := range map[string]string{
		"apiUrl: null":                       "apiUrl is required",
		"orgId: null":                        "orgId is required",
		"runnerId: null":                     "runnerId is required",
		"privateKey: {existingSecret: null}": "privateKey.existingSecret is required",
	} {
		_, err := renderChart(t, value, renderOptions{skipSchemaValidation: true})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s without schema validation: error %v, want one containing %q", value, err, want)
		}
	}
}
