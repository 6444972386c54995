package provider

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/zclconf/go-cty/cty"
)

// The typed settings of outpost_kubernetes_agent for the Jobs and the network, each a chart
// value of agent/chart/values.yaml: proxy, CA bundle, job history, plugin cache, provider
// installation, the environment allow-list and the Jobs' default resources; and the agent pods'
// tolerations, environment and resources in the shapes the runner's job block uses. They win
// over the same keys in `values` (see chartValues).

// agentJobsModel holds those attributes (embedded in kubernetesAgentModel).
type agentJobsModel struct {
	Proxy                *proxyModel                `tfsdk:"proxy"`
	CABundle             *caBundleModel             `tfsdk:"ca_bundle"`
	JobHistory           *jobHistoryModel           `tfsdk:"job_history"`
	PluginCache          *pluginCacheModel          `tfsdk:"plugin_cache"`
	ProviderInstallation *providerInstallationModel `tfsdk:"provider_installation"`
	ForwardEnv           types.List                 `tfsdk:"forward_env"`   //< string
	JobResources         types.Object               `tfsdk:"job_resources"` //< resourcesModel
	Tolerations          types.List                 `tfsdk:"tolerations"`   //< jobTolerationModel
	ExtraEnv             types.List                 `tfsdk:"extra_env"`     //< jobEnvModel
	Resources            types.Object               `tfsdk:"resources"`     //< resourcesModel
}

type proxyModel struct {
	HTTP    types.String `tfsdk:"http"`
	HTTPS   types.String `tfsdk:"https"`
	NoProxy types.List   `tfsdk:"no_proxy"` //< string
}

type caBundleModel struct {
	PEM        types.String `tfsdk:"pem"`
	SecretName types.String `tfsdk:"secret_name"`
	SecretKey  types.String `tfsdk:"secret_key"`
}

type jobHistoryModel struct {
	Succeeded types.Int64 `tfsdk:"succeeded"`
	Failed    types.Int64 `tfsdk:"failed"`
}

type pluginCacheModel struct {
	ClaimName types.String `tfsdk:"claim_name"`
	Volume    types.String `tfsdk:"volume"`
}

type providerInstallationModel struct {
	NetworkMirror    *networkMirrorModel    `tfsdk:"network_mirror"`
	FilesystemMirror *filesystemMirrorModel `tfsdk:"filesystem_mirror"`
	Direct           *directModel           `tfsdk:"direct"`
}

type networkMirrorModel struct {
	URL     types.String `tfsdk:"url"`
	Include types.List   `tfsdk:"include"` //< string
	Exclude types.List   `tfsdk:"exclude"` //< string
}

type filesystemMirrorModel struct {
	Path    types.String `tfsdk:"path"`
	Include types.List   `tfsdk:"include"` //< string
	Exclude types.List   `tfsdk:"exclude"` //< string
}

type directModel struct {
	Include types.List `tfsdk:"include"` //< string
	Exclude types.List `tfsdk:"exclude"` //< string
}

// Limits of the chart's schema.
const maxJobHistory = 1000

var (
	proxyURLPattern = regexp.MustCompile(`^(https?|socks5h?)://[^\s]+$`)
	noProxyPattern  = regexp.MustCompile(`^[^\s,]+$`)
	// forwardEnvRefused are the variables the agent sets on job pods itself.
	forwardEnvRefused = regexp.MustCompile(`^(?i)(outpost_|(https?|no)_proxy$)`)
)

// agentJobsAttributes are the attributes of agentJobsModel that are not blocks.
func agentJobsAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"forward_env": schema.ListAttribute{
			MarkdownDescription: "Names of the agent's own environment variables (set them with `extra_env`) handed on to the `main` " +
				"container of every job pod, e.g. `[\"AWS_REGION\", \"TF_REGISTRY_CLIENT_TIMEOUT\"]` (chart value `jobs.forwardEnv`). " +
				"A variable the runner sets itself wins. `OUTPOST_*` and the proxy variables are refused: set those with `proxy`.",
			ElementType: types.StringType,
			Optional:    true,
			Validators: []validator.List{listvalidator.SizeAtLeast(1), listvalidator.UniqueValues(), listvalidator.ValueStringsAre(
				stringvalidator.RegexMatches(envNamePattern, "must be an environment variable name"),
				stringCheck{summary: "Variable Not Forwardable", description: "not OUTPOST_* nor a proxy variable", check: func(s string) error {
					if forwardEnvRefused.MatchString(s) {
						return fmt.Errorf("%s is set by the agent itself; the proxy variables come from the proxy block", s)
					}
					return nil
				}})},
		},
		"job_resources": resourcesAttribute("Resources of the Jobs' `main` container (where Terraform/OpenTofu runs) when neither the " +
			"runner's pod template nor its `job.resources` set any (chart value `jobs.resources`), merged key by key into the chart's " +
			"defaults: requests `250m` CPU and `512Mi` memory, a `2Gi` memory limit."),
		"tolerations": tolerationsAttribute("Taints the agent pods tolerate (chart value `tolerations`), in the shape of the runner's " +
			"`job.tolerations`."),
		"extra_env": envAttribute("Extra environment variables of the agent (chart value `extraEnv`), in the shape of the runner's `job.env`: "+
			"a literal `value`, or a key of a Secret or ConfigMap in `namespace`. They come after the chart's own, so they win; for a proxy "+
			"use `proxy`, which job pods get too. List names in `forward_env` to hand them on to job pods.",
			func(kind string) string { return "in `namespace`" }),
		"resources": resourcesAttribute("Resources of the agent container (chart value `resources`), in the shape of the runner's " +
			"`job.resources`, merged key by key into the chart's defaults: requests `50m` CPU and `128Mi` memory, a `256Mi` memory limit."),
	}
}

// agentJobsBlocks are the blocks of agentJobsModel.
func agentJobsBlocks() map[string]schema.Block {
	strList := func(desc string) schema.ListAttribute {
		return schema.ListAttribute{MarkdownDescription: desc, ElementType: types.StringType, Optional: true,
			Validators: []validator.List{listvalidator.SizeAtLeast(1), listvalidator.ValueStringsAre(stringvalidator.LengthAtLeast(1))}}
	}
	patterns := func(what string) map[string]schema.Attribute {
		return map[string]schema.Attribute{
			"include": strList("Provider address patterns installed " + what + ", e.g. `[\"registry.terraform.io/hashicorp/*\"]`. Unset: all."),
			"exclude": strList("Provider address patterns never installed " + what + "."),
		}
	}
	mirror := func(desc, location, locationDesc string, check validator.String) schema.SingleNestedBlock {
		attrs := patterns("from it")
		attrs[location] = schema.StringAttribute{MarkdownDescription: locationDesc + " Required in the block.", Optional: true,
			Validators: []validator.String{check}}
		return schema.SingleNestedBlock{MarkdownDescription: desc, Attributes: attrs, Validators: []validator.Object{blockRequires(location)}}
	}
	return map[string]schema.Block{
		"proxy": schema.SingleNestedBlock{
			MarkdownDescription: "The HTTP(S) proxy of the agent and its job pods (chart values `proxy.*`). The agent sets `HTTPS_PROXY`, " +
				"`HTTP_PROXY` and `NO_PROXY` and hands them to the `main` container of every job pod (also in lower case), so " +
				"Terraform/OpenTofu, the providers and git use it. `NO_PROXY` always gets the cluster's own addresses (`.svc`, " +
				"`.cluster.local`, the private ranges, `localhost`, the API server's Service address) besides `no_proxy`. A runner " +
				"whose pod template sets a proxy variable on `main` keeps its own.",
			Attributes: map[string]schema.Attribute{
				"https": schema.StringAttribute{MarkdownDescription: "Proxy for HTTPS requests (`HTTPS_PROXY`), e.g. `http://proxy.corp:3128`.",
					Optional: true, Validators: []validator.String{stringvalidator.RegexMatches(proxyURLPattern, "must be an http://, https:// or socks5:// URL")}},
				"http": schema.StringAttribute{MarkdownDescription: "Proxy for plain HTTP requests (`HTTP_PROXY`).",
					Optional: true, Validators: []validator.String{stringvalidator.RegexMatches(proxyURLPattern, "must be an http://, https:// or socks5:// URL")}},
				"no_proxy": schema.ListAttribute{MarkdownDescription: "Further hosts, domains (`.corp`) and CIDRs that bypass the proxy (`NO_PROXY`).",
					ElementType: types.StringType, Optional: true,
					Validators: []validator.List{listvalidator.SizeAtLeast(1), listvalidator.ValueStringsAre(stringvalidator.RegexMatches(noProxyPattern,
						"must be one host, domain or CIDR, without spaces or commas"))}},
			},
			Validators: []validator.Object{blockRequiresOne("https", "http")},
		},
		"ca_bundle": schema.SingleNestedBlock{
			MarkdownDescription: "Extra CA certificates (chart values `caBundle.*`), added to the system roots of the agent and of job pods " +
				"(Terraform/OpenTofu, git), e.g. for a TLS-intercepting proxy, a private registry or a private orchestrator CA. Give the " +
				"certificates (`pem`: the chart writes them into a Secret in `namespace` and `job_namespace`), or the name of a Secret you " +
				"keep in both namespaces (`secret_name`).",
			Attributes: map[string]schema.Attribute{
				"pem": schema.StringAttribute{MarkdownDescription: "One or more PEM certificates (`-----BEGIN CERTIFICATE-----`), e.g. " +
					"`file(\"corp-ca.pem\")`. Text outside the certificates is dropped.",
					Optional: true, Validators: []validator.String{caPEMValidator(),
						stringvalidator.ConflictsWith(path.MatchRelative().AtParent().AtName("secret_name"))}},
				"secret_name": schema.StringAttribute{MarkdownDescription: "An existing Secret holding the PEM bundle, in `namespace` and in `job_namespace`.",
					Optional: true, Validators: []validator.String{secretNameValidator()}},
				"secret_key": schema.StringAttribute{MarkdownDescription: "Data key of the bundle in `secret_name`'s Secret. Defaults to `ca.crt`.",
					Optional: true, Validators: []validator.String{stringvalidator.LengthAtLeast(1),
						stringvalidator.AlsoRequires(path.MatchRelative().AtParent().AtName("secret_name"))}},
			},
			Validators: []validator.Object{blockRequiresOne("pem", "secret_name")},
		},
		"job_history": schema.SingleNestedBlock{
			MarkdownDescription: "How many finished Jobs stay in `job_namespace` after their result reached the orchestrator, for " +
				"`kubectl get jobs,pods -l outpost.dev/history` and `kubectl logs` (chart values `jobs.history.*`); older ones are " +
				"deleted, and every kept Job goes a week after it finished. `0` deletes each Job as soon as its result is in.",
			Attributes: map[string]schema.Attribute{
				"succeeded": schema.Int64Attribute{MarkdownDescription: fmt.Sprintf("Succeeded Jobs kept, 0 to %d. Defaults to 10.", maxJobHistory),
					Optional: true, Validators: []validator.Int64{int64validator.Between(0, maxJobHistory)}},
				"failed": schema.Int64Attribute{MarkdownDescription: fmt.Sprintf("Failed or canceled Jobs kept, 0 to %d. Defaults to 10.", maxJobHistory),
					Optional: true, Validators: []validator.Int64{int64validator.Between(0, maxJobHistory)}},
			},
		},
		"plugin_cache": schema.SingleNestedBlock{
			MarkdownDescription: "A volume shared by the job pods as the CLI's provider plugin cache (chart value `jobs.pluginCache`): " +
				"each run links the providers an earlier run put there instead of downloading them again. Its type must pass the " +
				"job pod policy (`persistentVolumeClaim` does).",
			Attributes: map[string]schema.Attribute{
				"claim_name": schema.StringAttribute{MarkdownDescription: "A PersistentVolumeClaim in `job_namespace`, ReadWriteMany when " +
					"Jobs run on several nodes.", Optional: true, Validators: []validator.String{secretNameValidator(),
					stringvalidator.ConflictsWith(path.MatchRelative().AtParent().AtName("volume"))}},
				"volume": schema.StringAttribute{MarkdownDescription: "Any other Kubernetes `VolumeSource` with one volume type, as JSON " +
					"(`jsonencode({ nfs = { server = \"nfs.corp\", path = \"/tf-plugins\" } })`).",
					Optional: true, Validators: []validator.String{volumeSourceValidator()}},
			},
			Validators: []validator.Object{blockRequiresOne("claim_name", "volume")},
		},
		"provider_installation": schema.SingleNestedBlock{
			MarkdownDescription: "Where the job pods' Terraform/OpenTofu install providers from (the `provider_installation` block of " +
				"their CLI configuration, chart value `jobs.providerInstallation`), for clusters without access to the public " +
				"registries. Terraform and OpenTofu read the same block. With a mirror and no `direct` block, providers come from the " +
				"mirror only.",
			Blocks: map[string]schema.Block{
				"network_mirror": mirror("A provider network mirror.", "url",
					"Base URL of the mirror (`https://`, ending in `/`), e.g. `https://mirror.corp/terraform/providers/`.",
					stringvalidator.RegexMatches(regexp.MustCompile(`^https://[^\s"]+/$`), "must be an https:// URL ending in /")),
				"filesystem_mirror": mirror("A directory of providers in the job pods (mount it with the runner's `job.volumes` and "+
					"`job.volume_mounts`).", "path", "Absolute path of the directory in the `main` container.",
					stringvalidator.RegexMatches(regexp.MustCompile(`^/[^"\s]*$`), "must be an absolute path")),
				"direct": schema.SingleNestedBlock{
					MarkdownDescription: "Install from the providers' own registries too (for the providers `include` names, or all but `exclude`).",
					Attributes:          patterns("from their registries"),
				},
			},
			Validators: []validator.Object{blockRequiresOne("network_mirror", "filesystem_mirror", "direct")},
		},
	}
}

// chartValues puts the settings into the chart values v (the ones under jobs into jobs).
func (m agentJobsModel) chartValues(r *valuesReader, v, jobs map[string]any) {
	if p := m.Proxy; p != nil {
		v["proxy"] = nonEmpty(map[string]any{"httpsProxy": r.str(p.HTTPS), "httpProxy": r.str(p.HTTP), "noProxy": r.strList(p.NoProxy)})
	}
	if c := m.CABundle; c != nil {
		v["caBundle"] = nonEmpty(map[string]any{"pem": r.caPEM(c.PEM), "existingSecret": r.str(c.SecretName), "secretKey": r.str(c.SecretKey)})
	}
	if h := m.JobHistory; h != nil {
		jobs["history"] = nonEmpty(map[string]any{"succeeded": r.int(h.Succeeded), "failed": r.int(h.Failed)})
	}
	if c := m.PluginCache; c != nil {
		if name, ok := r.str(c.ClaimName).(string); ok {
			jobs["pluginCache"] = map[string]any{"persistentVolumeClaim": map[string]any{"claimName": name}}
		} else {
			jobs["pluginCache"] = r.jsonObject("plugin_cache.volume", c.Volume)
		}
	}
	if p := m.ProviderInstallation; p != nil {
		jobs["providerInstallation"] = p.hcl(r)
	}
	jobs["forwardEnv"] = r.strList(m.ForwardEnv)
	jobs["resources"] = r.resources(m.JobResources)
	v["tolerations"] = r.tolerations(m.Tolerations)
	v["extraEnv"] = r.env(m.ExtraEnv)
	v["resources"] = r.resources(m.Resources)
}

// hcl writes the provider_installation block of the CLI configuration.
func (p *providerInstallationModel) hcl(r *valuesReader) any {
	f := hclwrite.NewEmptyFile()
	root := f.Body().AppendNewBlock("provider_installation", nil).Body()
	patterns := func(b *hclwrite.Body, include, exclude types.List) {
		for _, l := range []struct {
			name string
			v    types.List
		}{{"include", include}, {"exclude", exclude}} {
			list, _ := r.strList(l.v).([]any)
			if len(list) == 0 {
				continue
			}
			vals := make([]cty.Value, len(list))
			for i, s := range list {
				vals[i] = cty.StringVal(s.(string)) //nolint:forcetypeassert // strList returns strings
			}
			b.SetAttributeValue(l.name, cty.ListVal(vals))
		}
	}
	mirror := func(block, attr string, location types.String, include, exclude types.List) {
		b := root.AppendNewBlock(block, nil).Body()
		if loc, ok := r.str(location).(string); ok {
			b.SetAttributeValue(attr, cty.StringVal(loc))
		}
		patterns(b, include, exclude)
	}
	if m := p.NetworkMirror; m != nil {
		mirror("network_mirror", "url", m.URL, m.Include, m.Exclude)
	}
	if m := p.FilesystemMirror; m != nil {
		mirror("filesystem_mirror", "path", m.Path, m.Include, m.Exclude)
	}
	if d := p.Direct; d != nil {
		patterns(root.AppendNewBlock("direct", nil).Body(), d.Include, d.Exclude)
	}
	return string(f.Bytes())
}

// caPEM reads a CA bundle into chart values: its certificates, re-encoded, without the text
// around them (the chart's schema takes certificates only).
func (r *valuesReader) caPEM(v types.String) any {
	s, ok := r.str(v).(string)
	if !ok {
		return nil
	}
	certs, err := parseCertificates(s)
	if err != nil {
		r.err = fmt.Errorf("ca_bundle.pem: %w", err)
		return nil
	}
	var b strings.Builder
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.String()
}

// parseCertificates reads every PEM certificate of s; other PEM blocks are an error.
func parseCertificates(s string) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := []byte(s)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("holds a %s block; only CERTIFICATE blocks belong in a CA bundle", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
	}
	return certs, nil
}

func caPEMValidator() validator.String {
	return stringCheck{summary: "Invalid CA Bundle", description: "must hold one or more PEM certificates", check: func(s string) error {
		_, err := parseCertificates(s)
		return err
	}}
}

// volumeSourceValidator checks a JSON object with exactly one volume type.
func volumeSourceValidator() validator.String {
	return stringCheck{summary: "Invalid Volume", description: "must be a JSON Kubernetes VolumeSource with one volume type", check: func(s string) error {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil || m == nil {
			return errors.New("not a JSON object; build it with jsonencode({ persistentVolumeClaim = { claimName = \"tf-plugins\" } })")
		}
		if len(m) != 1 {
			return fmt.Errorf("names %d volume types; a VolumeSource names exactly one (persistentVolumeClaim, nfs, csi, ...)", len(m))
		}
		return nil
	}}
}

// jsonObject reads a JSON object attribute into chart values (nil when unset).
func (r *valuesReader) jsonObject(name string, v types.String) any {
	s, ok := r.str(v).(string)
	if !ok {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		r.err = fmt.Errorf("%s: %w", name, err)
		return nil
	}
	return m
}

// tolerations turns the tolerations attribute into Kubernetes Toleration objects.
func (r *valuesReader) tolerations(v types.List) any {
	var list []jobTolerationModel
	if !r.listAs(v, &list) {
		return nil
	}
	out := make([]any, 0, len(list))
	for _, t := range list {
		o := nonEmpty(map[string]any{"key": r.str(t.Key), "operator": r.str(t.Operator), "value": r.str(t.Value), "effect": r.str(t.Effect),
			"tolerationSeconds": r.int(t.TolerationSeconds)})
		if o == nil {
			o = map[string]any{}
		}
		out = append(out, o)
	}
	return out
}

// env turns the env attribute into Kubernetes EnvVar objects.
func (r *valuesReader) env(v types.List) any {
	var list []jobEnvModel
	if !r.listAs(v, &list) {
		return nil
	}
	ref := func(k *jobKeyRefModel) any {
		if k == nil {
			return nil
		}
		o := map[string]any{"name": r.str(k.Name), "key": r.str(k.Key)}
		if b, ok := r.boolean(k.Optional).(bool); ok && b {
			o["optional"] = true
		}
		return o
	}
	out := make([]any, 0, len(list))
	for _, e := range list {
		o := map[string]any{"name": r.str(e.Name)}
		if from := nonEmpty(map[string]any{"secretKeyRef": ref(e.SecretKeyRef), "configMapKeyRef": ref(e.ConfigMapKeyRef)}); from != nil {
			o["valueFrom"] = from
		} else {
			o["value"] = e.Value.ValueString()
		}
		out = append(out, o)
	}
	return out
}

// resources turns a resources attribute into chart values.
func (r *valuesReader) resources(v types.Object) any {
	if v.IsUnknown() {
		r.unknown = true
		return nil
	}
	if v.IsNull() {
		return nil
	}
	var m resourcesModel
	if diags := v.As(context.Background(), &m, basetypes.ObjectAsOptions{}); diags.HasError() {
		r.unknown = true
		return nil
	}
	return nonEmpty(map[string]any{"requests": r.strMap(m.Requests), "limits": r.strMap(m.Limits)})
}

// listAs decodes a known list into target; false when it is null, empty or not known yet.
func (r *valuesReader) listAs(v types.List, target any) bool {
	if v.IsUnknown() {
		r.unknown = true
		return false
	}
	if v.IsNull() || len(v.Elements()) == 0 {
		return false
	}
	if diags := v.ElementsAs(context.Background(), target, false); diags.HasError() {
		r.unknown = true // an element not known yet
		return false
	}
	return true
}

// setFromValues fills the settings from an imported release's chart values.
func (m *agentJobsModel) setFromValues(v valuesView, diags *diag.Diagnostics) {
	if p := v.sub("proxy"); len(p) > 0 {
		noProxy := p["noProxy"]
		if s, ok := noProxy.(string); ok {
			var l []any
			for _, e := range strings.Split(s, ",") {
				if e = strings.TrimSpace(e); e != "" {
					l = append(l, e)
				}
			}
			noProxy = l
		}
		m.Proxy = &proxyModel{HTTP: p.strOrNull("httpProxy"), HTTPS: p.strOrNull("httpsProxy"), NoProxy: stringListFromValues(noProxy, diags)}
	}
	if c := v.sub("caBundle"); len(c) > 0 {
		m.CABundle = &caBundleModel{PEM: c.strOrNull("pem"), SecretName: c.strOrNull("existingSecret"), SecretKey: c.strOrNull("secretKey")}
	}
	jobs := v.sub("jobs")
	if h := jobs.sub("history"); len(h) > 0 {
		m.JobHistory = &jobHistoryModel{Succeeded: intOrNull(h["succeeded"]), Failed: intOrNull(h["failed"])}
	}
	if c := jobs.sub("pluginCache"); len(c) > 0 {
		m.PluginCache = &pluginCacheModel{ClaimName: types.StringNull(), Volume: types.StringNull()}
		if pvc := c.sub("persistentVolumeClaim"); len(c) == 1 && len(pvc) == 1 && pvc["claimName"] != nil {
			m.PluginCache.ClaimName = pvc.strOrNull("claimName")
		} else if b, err := json.Marshal(map[string]any(c)); err == nil {
			m.PluginCache.Volume = types.StringValue(string(b))
		}
	}
	if s, ok := jobs["providerInstallation"].(string); ok && strings.TrimSpace(s) != "" {
		m.ProviderInstallation = providerInstallationFromHCL(s, diags)
	}
	m.ForwardEnv = stringListFromValues(jobs["forwardEnv"], diags)
	m.JobResources = resourcesFromValues(jobs.sub("resources"), diags)
	m.Resources = resourcesFromValues(v.sub("resources"), diags)
	m.Tolerations = tolerationsFromValues(v["tolerations"], diags)
	m.ExtraEnv = envFromValues(v["extraEnv"], diags)
}

func intOrNull(v any) types.Int64 {
	switch n := v.(type) {
	case float64:
		return types.Int64Value(int64(n))
	case int64:
		return types.Int64Value(n)
	case int:
		return types.Int64Value(int64(n))
	case json.Number:
		if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			return types.Int64Value(i)
		}
	}
	return types.Int64Null()
}

// The framework types of the shared shapes, from their schema.
var (
	resourcesObjectType  = resourcesAttribute("").GetType().(types.ObjectType)                                     //nolint:forcetypeassert // a nested attribute's type
	tolerationObjectType = tolerationsAttribute("").GetType().(types.ListType).ElemType.(types.ObjectType)         //nolint:forcetypeassert // a nested attribute's type
	envObjectType        = envAttribute("", func(string) string { return "" }).GetType().(types.ListType).ElemType //nolint:forcetypeassert // a nested attribute's type
)

func resourcesFromValues(res valuesView, diags *diag.Diagnostics) types.Object {
	if len(res) == 0 {
		return types.ObjectNull(resourcesObjectType.AttrTypes)
	}
	o, d := types.ObjectValueFrom(context.Background(), resourcesObjectType.AttrTypes,
		resourcesModel{Requests: res.strMap("requests", diags), Limits: res.strMap("limits", diags)})
	diags.Append(d...)
	return o
}

func tolerationsFromValues(v any, diags *diag.Diagnostics) types.List {
	l, _ := v.([]any)
	if len(l) == 0 {
		return types.ListNull(tolerationObjectType)
	}
	out := make([]jobTolerationModel, 0, len(l))
	for _, e := range l {
		t := valuesView(asMap(e))
		out = append(out, jobTolerationModel{Key: t.strOrNull("key"), Operator: t.strOrNull("operator"), Value: t.strOrNull("value"),
			Effect: t.strOrNull("effect"), TolerationSeconds: intOrNull(t["tolerationSeconds"])})
	}
	list, d := types.ListValueFrom(context.Background(), tolerationObjectType, out)
	diags.Append(d...)
	return list
}

func envFromValues(v any, diags *diag.Diagnostics) types.List {
	l, _ := v.([]any)
	if len(l) == 0 {
		return types.ListNull(envObjectType)
	}
	ref := func(m valuesView) *jobKeyRefModel {
		if len(m) == 0 {
			return nil
		}
		opt, _ := m["optional"].(bool)
		return &jobKeyRefModel{Name: m.strOrNull("name"), Key: m.strOrNull("key"), Optional: types.BoolValue(opt)}
	}
	out := make([]jobEnvModel, 0, len(l))
	for _, e := range l {
		ev := valuesView(asMap(e))
		from := ev.sub("valueFrom")
		out = append(out, jobEnvModel{Name: ev.strOrNull("name"), Value: ev.strOrNull("value"),
			SecretKeyRef: ref(from.sub("secretKeyRef")), ConfigMapKeyRef: ref(from.sub("configMapKeyRef"))})
	}
	list, d := types.ListValueFrom(context.Background(), envObjectType, out)
	diags.Append(d...)
	return list
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// providerInstallationFromHCL reads a provider_installation block back into the typed block.
// Anything the block cannot say (other blocks, other attributes) makes it a diagnostic:
// import it, then set the block by hand.
func providerInstallationFromHCL(s string, diags *diag.Diagnostics) *providerInstallationModel {
	type patterns struct {
		URL     *string  `hcl:"url,optional"`
		Path    *string  `hcl:"path,optional"`
		Include []string `hcl:"include,optional"`
		Exclude []string `hcl:"exclude,optional"`
	}
	var doc struct {
		PI struct {
			Network    []patterns `hcl:"network_mirror,block"`
			Filesystem []patterns `hcl:"filesystem_mirror,block"`
			Direct     []patterns `hcl:"direct,block"`
		} `hcl:"provider_installation,block"`
	}
	f, d := hclsyntax.ParseConfig([]byte(s), "providerInstallation", hcl.InitialPos)
	if !d.HasErrors() {
		d = gohcl.DecodeBody(f.Body, nil, &doc)
	}
	pi := doc.PI
	if d.HasErrors() || len(pi.Network) > 1 || len(pi.Filesystem) > 1 || len(pi.Direct) > 1 {
		diags.AddAttributeWarning(path.Root("provider_installation"), "Provider Installation Not Imported",
			"The release's jobs.providerInstallation is not a block provider_installation can express (one network_mirror, "+
				"filesystem_mirror and direct each); set the block in the configuration.")
		return nil
	}
	list := func(l []string) types.List {
		if len(l) == 0 {
			return types.ListNull(types.StringType)
		}
		els := make([]attr.Value, len(l))
		for i, e := range l {
			els[i] = types.StringValue(e)
		}
		v, dd := types.ListValue(types.StringType, els)
		diags.Append(dd...)
		return v
	}
	out := &providerInstallationModel{}
	if len(pi.Network) == 1 {
		n := pi.Network[0]
		out.NetworkMirror = &networkMirrorModel{URL: types.StringPointerValue(n.URL), Include: list(n.Include), Exclude: list(n.Exclude)}
	}
	if len(pi.Filesystem) == 1 {
		f := pi.Filesystem[0]
		out.FilesystemMirror = &filesystemMirrorModel{Path: types.StringPointerValue(f.Path), Include: list(f.Include), Exclude: list(f.Exclude)}
	}
	if len(pi.Direct) == 1 {
		out.Direct = &directModel{Include: list(pi.Direct[0].Include), Exclude: list(pi.Direct[0].Exclude)}
	}
	return out
}

// blockRequiresOne checks that a present single nested block sets at least one of the named
// attributes or blocks.
func blockRequiresOne(names ...string) validator.Object {
	return blockRequiresOneValidator{names: names}
}

type blockRequiresOneValidator struct{ names []string }

func (v blockRequiresOneValidator) Description(ctx context.Context) string {
	return v.MarkdownDescription(ctx)
}

func (v blockRequiresOneValidator) MarkdownDescription(_ context.Context) string {
	return "when the block is set, at least one of " + strings.Join(v.names, ", ") + " must be set"
}

func (v blockRequiresOneValidator) ValidateObject(_ context.Context, req validator.ObjectRequest, resp *validator.ObjectResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	attrs := req.ConfigValue.Attributes()
	for _, n := range v.names {
		if a, ok := attrs[n]; !ok || !a.IsNull() {
			return
		}
	}
	resp.Diagnostics.AddAttributeError(req.Path, "Incomplete Block",
		fmt.Sprintf("The %s block sets nothing: set %s, or leave the block out for the chart's default.", req.Path, strings.Join(v.names, " or ")))
}
