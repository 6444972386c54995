package provider

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// minimalAgentModel is an agent model as ModifyPlan leaves it when only the required attributes
// are configured.
func minimalAgentModel() kubernetesAgentModel {
	return kubernetesAgentModel{
		Namespace:                    types.StringValue("outpost"),
		ReleaseName:                  types.StringValue(defaultReleaseName),
		RunnerID:                     types.StringValue("r1"),
		APIURL:                       types.StringValue("https://outpost.example.com"),
		OrgID:                        types.StringValue("acme"),
		CreateNamespaces:             types.BoolValue(false),
		JobNamespace:                 types.StringValue("outpost"),
		JobServiceAccount:            types.StringValue(defaultJobServiceAccount),
		JobServiceAccountAnnotations: types.MapNull(types.StringType),
		JobPodLabels:                 types.MapNull(types.StringType),
		ServiceAccountAnnotations:    types.MapNull(types.StringType),
		ServeState:                   types.BoolValue(true),
		StateNamespace:               types.StringValue("outpost"),
		CLI:                          types.StringValue("tofu"),
		LogLevel:                     types.StringValue(defaultLogLevel),
		Replicas:                     types.Int64Value(defaultReplicas),
		ImageRegistry:                types.StringNull(),
		NodeSelector:                 types.MapNull(types.StringType),
		Values:                       types.StringNull(),
		WaitForConnection:            types.BoolValue(true),
		PrivateKeySecret:             &privateKeySecretModel{Name: types.StringValue("key"), Key: types.StringValue(secretKeyPrivate)},
		agentJobsModel: agentJobsModel{
			ForwardEnv:   types.ListNull(types.StringType),
			JobResources: types.ObjectNull(resourcesObjectType.AttrTypes),
			Tolerations:  types.ListNull(tolerationObjectType),
			ExtraEnv:     types.ListNull(envObjectType),
			Resources:    types.ObjectNull(resourcesObjectType.AttrTypes),
		},
	}
}

func stringMap(t *testing.T, m map[string]string) types.Map {
	t.Helper()
	els := map[string]attr.Value{}
	for k, v := range m {
		els[k] = types.StringValue(v)
	}
	v, diags := types.MapValue(types.StringType, els)
	if diags.HasError() {
		t.Fatal(diags)
	}
	return v
}

func TestChartValuesMinimal(t *testing.T) {
	got, err := minimalAgentModel().chartValues()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiUrl": "https://outpost.example.com", "orgId": "acme", "runnerId": "r1",
		"cli": "tofu", "logLevel": "info", "replicaCount": int64(2),
		"privateKey": map[string]any{"existingSecret": "key", "secretKey": "private-key.pem"},
		"jobs":       map[string]any{"namespace": "outpost", "serviceAccount": map[string]any{"name": "outpost-job"}},
		"state":      map[string]any{"enabled": true, "namespace": "outpost"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("values\n got %#v\nwant %#v", got, want)
	}
	if err := validateChartValues(t.Context(), got, types.StringValue("outpost-system")); err != nil {
		t.Fatalf("the embedded chart refuses the minimal values: %v", err)
	}
}

func fullAgentModel(t *testing.T) kubernetesAgentModel {
	m := minimalAgentModel()
	m.JobNamespace = types.StringValue("jobs")
	m.JobServiceAccountAnnotations = stringMap(t, map[string]string{"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"})
	m.JobPodLabels = stringMap(t, map[string]string{"azure.workload.identity/use": "true"})
	m.ServiceAccountAnnotations = stringMap(t, map[string]string{"a": "b"})
	m.ServeState = types.BoolValue(false)
	m.CLI = types.StringValue("tofu")
	m.Replicas = types.Int64Value(1)
	m.ImageRegistry = types.StringValue("mirror.example.com")
	m.NodeSelector = stringMap(t, map[string]string{"kubernetes.io/os": "linux"})
	m.agentJobsModel = fullAgentJobs(t)
	m.Image = &agentImageModel{Registry: types.StringNull(), Repository: types.StringValue("repo/agent"), Tag: types.StringValue("1.2"), Digest: types.StringNull(), PullPolicy: types.StringValue("Always")}
	m.JobImage = &jobImageModel{Registry: types.StringNull(), Repository: types.StringValue("repo/job"), Tag: types.StringNull(), Digest: types.StringNull()}
	cidrs, _ := types.ListValue(types.StringType, []attr.Value{types.StringValue("169.254.169.254/32")})
	m.NetworkPolicy = &networkPolicyModel{Enabled: types.BoolValue(true), BlockedCIDRs: cidrs,
		MetricsFrom: types.StringValue(`[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`), ExtraEgress: types.StringNull()}
	return m
}

func TestChartValuesFull(t *testing.T) {
	m := fullAgentModel(t)
	m.Values = types.StringValue("logLevel: debug\njobs:\n  startupTimeout: 5m\nreplicaCount: null\n")
	got, err := m.chartValues()
	if err != nil {
		t.Fatal(err)
	}
	if err := validateChartValues(t.Context(), got, types.StringValue("outpost-system")); err != nil {
		t.Fatalf("the embedded chart refuses the values: %v", err)
	}
	jobs, _ := got["jobs"].(map[string]any)
	env, _ := got["extraEnv"].([]any)
	global, _ := got["global"].(map[string]any)
	var firstEnv map[string]any
	if len(env) > 0 {
		firstEnv, _ = env[0].(map[string]any)
	}
	switch {
	case got["logLevel"] != "debug":
		t.Errorf("values must win over attributes: logLevel %v", got["logLevel"])
	case jobs["startupTimeout"] != "5m" || jobs["namespace"] != "jobs":
		t.Errorf("values must merge into the attributes' maps: jobs %v", jobs)
	case got["replicaCount"] != nil:
		t.Errorf("a null in values must remove the key: replicaCount %v", got["replicaCount"])
	case len(env) != 2 || firstEnv["name"] != "AWS_REGION":
		t.Errorf("extraEnv must keep the order of extra_env: %v", env)
	case global["imageRegistry"] != "mirror.example.com":
		t.Errorf("global %v", global)
	}
	np, _ := got["networkPolicy"].(map[string]any)
	from, _ := np["metricsFrom"].([]any)
	if cidrs, _ := np["blockedCIDRs"].([]any); np["enabled"] != true || len(cidrs) != 1 || len(from) != 1 || np["extraEgress"] != nil {
		t.Errorf("network_policy became networkPolicy %v", np)
	}
}

func TestChartValuesUnknown(t *testing.T) {
	for name, mutate := range map[string]func(*kubernetesAgentModel){
		"runner id": func(m *kubernetesAgentModel) { m.RunnerID = types.StringUnknown() },
		"map":       func(m *kubernetesAgentModel) { m.JobPodLabels = types.MapUnknown(types.StringType) },
		"values":    func(m *kubernetesAgentModel) { m.Values = types.StringUnknown() },
		"map element": func(m *kubernetesAgentModel) {
			m.NodeSelector, _ = types.MapValue(types.StringType, map[string]attr.Value{"a": types.StringUnknown()})
		},
	} {
		m := minimalAgentModel()
		mutate(&m)
		if _, err := m.chartValues(); !errors.Is(err, errUnknownValues) {
			t.Errorf("%s unknown: got %v, want errUnknownValues", name, err)
		}
	}
}

func TestValidateChartValuesRefusesUnknownKeys(t *testing.T) {
	m := minimalAgentModel()
	m.Values = types.StringValue(`{"bogus": true}`)
	vals, err := m.chartValues()
	if err != nil {
		t.Fatal(err)
	}
	if err := validateChartValues(t.Context(), vals, types.StringValue("outpost-system")); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("want a schema error naming bogus, got %v", err)
	}
}

// TestImportRoundTrip checks that setInputsFromValues reads back every attribute chartValues
// wrote, which is what makes import verifiable.
func TestImportRoundTrip(t *testing.T) {
	for name, m := range map[string]kubernetesAgentModel{"minimal": minimalAgentModel(), "full": fullAgentModel(t)} {
		vals, err := m.chartValues()
		if err != nil {
			t.Fatal(err)
		}
		back := kubernetesAgentModel{Namespace: m.Namespace, ReleaseName: m.ReleaseName}
		if diags := back.setInputsFromValues(vals); diags.HasError() {
			t.Fatal(diags)
		}
		back.Values, back.WaitForConnection, back.CreateNamespaces = m.Values, m.WaitForConnection, m.CreateNamespaces
		if !reflect.DeepEqual(back, m) {
			t.Errorf("%s: imported\n%+v\nwant\n%+v", name, back, m)
		}
	}
}

func TestSeenSince(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	before, justBefore, after := start.Add(-time.Minute), start.Add(-2*time.Second), start.Add(time.Second)
	cases := []struct {
		last *time.Time
		want bool
	}{
		{nil, false},
		{&before, false},    // an earlier agent's last poll does not count
		{&justBefore, true}, // clock difference tolerated
		{&after, true},
	}
	for _, tc := range cases {
		if got := seenSince(tc.last, start); got != tc.want {
			t.Errorf("seenSince(%v) = %v, want %v", tc.last, got, tc.want)
		}
	}
}

// TestJobsPodSecurityLevel: the jobs namespace's label follows the level the agent checks job
// pods at: job_pod_policy.pod_security_level when set, else what the relaxations need (unsafe
// sysctls need privileged, as Pod Security's own check says).
func TestJobsPodSecurityLevel(t *testing.T) {
	for _, tc := range []struct {
		policy map[string]any
		want   string
	}{
		{nil, podSecurityRestricted},
		{map[string]any{"allowRunAsRoot": true}, podSecurityBaseline},
		{map[string]any{"allowedSysctls": []any{"net.ipv4.tcp_keepalive_time"}}, podSecurityRestricted},
		{map[string]any{"allowedSysctls": []any{"kernel.msgmax"}}, podSecurityPrivileged},
		{map[string]any{"allowRunAsRoot": true, "podSecurityLevel": "restricted"}, podSecurityRestricted},
		{map[string]any{"podSecurityLevel": "privileged"}, podSecurityPrivileged},
	} {
		if got := jobsPodSecurityLevel(map[string]any{"jobs": map[string]any{"policy": tc.policy}}); got != tc.want {
			t.Errorf("policy %v: level %s, want %s", tc.policy, got, tc.want)
		}
	}
}
