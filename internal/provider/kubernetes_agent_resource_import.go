package provider

import (
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// setInputsFromValues fills the configurable attributes from a release's chart values, the
// reverse of chartValues, for import. Values the chart leaves at its defaults map to the
// attributes' defaults. `values` stays null: what came from it cannot be told apart.
func (m *kubernetesAgentModel) setInputsFromValues(vals map[string]any) diag.Diagnostics {
	var diags diag.Diagnostics
	v := valuesView(vals)
	ns := m.Namespace.ValueString()

	m.RunnerID = v.str("runnerId", "")
	m.APIURL = v.str("apiUrl", "")
	m.OrgID = v.str("orgId", "")
	m.CLI = v.strOrNull("cli")
	m.LogLevel = v.str("logLevel", defaultLogLevel)
	m.Replicas = types.Int64Value(defaultReplicas)
	if n, ok := v["replicaCount"].(float64); ok {
		m.Replicas = types.Int64Value(int64(n))
	} else if n, ok := v["replicaCount"].(int64); ok {
		m.Replicas = types.Int64Value(n)
	}
	m.ImageRegistry = v.sub("global").strOrNull("imageRegistry")
	m.CreateNamespaces = types.BoolValue(false)
	m.WaitForConnection = types.BoolValue(true)
	m.Values = types.StringNull()

	pk := v.sub("privateKey")
	m.PrivateKeySecret = &privateKeySecretModel{Name: pk.str("existingSecret", ""), Key: pk.str("secretKey", secretKeyPrivate)}

	jobs := v.sub("jobs")
	m.JobNamespace = jobs.str("namespace", ns+"-jobs")
	m.JobPodPolicy = policyFromValues(v, &diags)
	m.NetworkPolicy = networkPolicyFromValues(v, &diags)
	sa := jobs.sub("serviceAccount")
	m.JobServiceAccount = sa.str("name", defaultJobServiceAccount)
	m.JobServiceAccountAnnotations = sa.strMap("annotations", &diags)
	m.JobPodLabels = jobs.strMap("podLabels", &diags)
	if img := jobs.sub("image"); len(img) > 0 {
		m.JobImage = &jobImageModel{Registry: img.strOrNull("registry"), Repository: img.strOrNull("repository"), Tag: img.strOrNull("tag"), Digest: img.strOrNull("digest")}
	}

	state := v.sub("state")
	m.ServeState = types.BoolValue(true)
	if b, ok := state["enabled"].(bool); ok {
		m.ServeState = types.BoolValue(b)
	}
	m.StateNamespace = state.str("namespace", ns+"-state")

	m.ServiceAccountAnnotations = v.sub("serviceAccount").strMap("annotations", &diags)
	m.NodeSelector = v.strMap("nodeSelector", &diags)
	if img := v.sub("image"); len(img) > 0 {
		m.Image = &agentImageModel{
			Registry: img.strOrNull("registry"), Repository: img.strOrNull("repository"), Tag: img.strOrNull("tag"),
			Digest: img.strOrNull("digest"), PullPolicy: img.strOrNull("pullPolicy"),
		}
	}
	m.setFromValues(v, &diags)
	return diags
}

// valuesView reads nested chart values leniently: missing or mistyped entries read as absent.
type valuesView map[string]any

func (v valuesView) sub(key string) valuesView {
	m, _ := v[key].(map[string]any)
	return m
}

func (v valuesView) str(key, def string) types.String {
	if s, ok := v[key].(string); ok && s != "" {
		return types.StringValue(s)
	}
	return types.StringValue(def)
}

func (v valuesView) strOrNull(key string) types.String {
	if s, ok := v[key].(string); ok && s != "" {
		return types.StringValue(s)
	}
	return types.StringNull()
}

func (v valuesView) strMap(key string, diags *diag.Diagnostics) types.Map {
	m := map[string]string{}
	if raw, ok := v[key].(map[string]any); ok {
		for k, e := range raw {
			if s, ok := e.(string); ok {
				m[k] = s
			}
		}
	}
	out, d := stringMapValue(m)
	diags.Append(d...)
	return out
}
