package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

// kubernetesConfigModel maps the provider's kubernetes block.
type kubernetesConfigModel struct {
	ConfigPath           types.String         `tfsdk:"config_path"`
	ConfigContext        types.String         `tfsdk:"config_context"`
	Host                 types.String         `tfsdk:"host"`
	ClusterCACertificate types.String         `tfsdk:"cluster_ca_certificate"`
	Token                types.String         `tfsdk:"token"`
	ClientCertificate    types.String         `tfsdk:"client_certificate"`
	ClientKey            types.String         `tfsdk:"client_key"`
	Insecure             types.Bool           `tfsdk:"insecure"`
	Exec                 *kubernetesExecModel `tfsdk:"exec"`
}

// kubernetesExecModel maps kubernetes.exec, a client-go credential plugin.
type kubernetesExecModel struct {
	APIVersion types.String `tfsdk:"api_version"`
	Command    types.String `tfsdk:"command"`
	Args       types.List   `tfsdk:"args"` //< string
	Env        types.Map    `tfsdk:"env"`  //< string
}

func kubernetesConfigBlock() schema.SingleNestedBlock {
	return schema.SingleNestedBlock{
		MarkdownDescription: "The Kubernetes cluster the agent is installed into and the key pair Secrets are written to. " +
			"Only resources that touch the cluster (`outpost_kubernetes_agent`, `outpost_key_pair` with `kubernetes_secret`) " +
			"connect, and only when they need to. Without this block the provider reads the kubeconfig named by `" +
			envKubeConfigPath + "`, or uses the in-cluster configuration when it runs in a Pod.",
		Attributes: map[string]schema.Attribute{
			"config_path": schema.StringAttribute{
				MarkdownDescription: "Path of a kubeconfig file. Falls back to the `" + envKubeConfigPath + "` environment variable.",
				Optional:            true,
			},
			"config_context": schema.StringAttribute{
				MarkdownDescription: "Context of the kubeconfig to use instead of its current context.",
				Optional:            true,
			},
			"host": schema.StringAttribute{
				MarkdownDescription: "URL of the Kubernetes API server, e.g. `https://203.0.113.10:6443`. Overrides the kubeconfig's server.",
				Optional:            true,
			},
			"cluster_ca_certificate": schema.StringAttribute{
				MarkdownDescription: "PEM-encoded root certificates of the API server.",
				Optional:            true,
			},
			"token": schema.StringAttribute{
				MarkdownDescription: "Bearer token to authenticate to the API server.",
				Optional:            true,
				Sensitive:           true,
			},
			"client_certificate": schema.StringAttribute{
				MarkdownDescription: "PEM-encoded client certificate for TLS authentication.",
				Optional:            true,
			},
			"client_key": schema.StringAttribute{
				MarkdownDescription: "PEM-encoded private key of `client_certificate`.",
				Optional:            true,
				Sensitive:           true,
			},
			"insecure": schema.BoolAttribute{
				MarkdownDescription: "Skip verification of the API server's certificate. For test clusters only.",
				Optional:            true,
			},
		},
		Blocks: map[string]schema.Block{
			"exec": schema.SingleNestedBlock{
				MarkdownDescription: "A client-go credential plugin that prints a token, such as `aws eks get-token` or `gke-gcloud-auth-plugin`.",
				Attributes: map[string]schema.Attribute{
					"api_version": schema.StringAttribute{
						MarkdownDescription: "API version of the ExecCredential the plugin prints, e.g. `client.authentication.k8s.io/v1beta1`.",
						Optional:            true,
					},
					"command": schema.StringAttribute{
						MarkdownDescription: "Command to run.",
						Optional:            true,
					},
					"args": schema.ListAttribute{
						MarkdownDescription: "Arguments of the command.",
						ElementType:         types.StringType,
						Optional:            true,
					},
					"env": schema.MapAttribute{
						MarkdownDescription: "Extra environment variables of the command.",
						ElementType:         types.StringType,
						Optional:            true,
					},
				},
			},
		},
	}
}

var pathKubernetesExecCommand = path.Root("kubernetes").AtName("exec").AtName("command")

// kubeSettings is the resolved kubernetes block: plain values, env fallbacks applied.
type kubeSettings struct {
	configPath, configContext, host, caCert, token, clientCert, clientKey string
	insecure                                                              bool
	exec                                                                  *clientcmdapi.ExecConfig
}

// kubeConnector builds the cluster clients on first use and caches them. Resources share one
// connector, so it is safe for concurrent use.
type kubeConnector struct {
	settings kubeSettings
	// unknown names kubernetes attributes that were unknown at Configure time.
	unknown []string

	mu   sync.Mutex
	conn *kubeConn
}

// kubeConn is a connected cluster: the REST config (for Helm) and a typed clientset.
type kubeConn struct {
	restConfig *rest.Config
	clientset  kubernetes.Interface
}

func newKubeConnector(m *kubernetesConfigModel) (*kubeConnector, diag.Diagnostics) {
	var diags diag.Diagnostics
	k := &kubeConnector{}
	s := &k.settings
	s.configPath = os.Getenv(envKubeConfigPath)
	if m == nil {
		return k, nil
	}
	str := func(name string, v types.String, target *string) {
		switch {
		case v.IsUnknown():
			k.unknown = append(k.unknown, name)
		case !v.IsNull():
			*target = v.ValueString()
		}
	}
	str("config_path", m.ConfigPath, &s.configPath)
	str("config_context", m.ConfigContext, &s.configContext)
	str("host", m.Host, &s.host)
	str("cluster_ca_certificate", m.ClusterCACertificate, &s.caCert)
	str("token", m.Token, &s.token)
	str("client_certificate", m.ClientCertificate, &s.clientCert)
	str("client_key", m.ClientKey, &s.clientKey)
	switch {
	case m.Insecure.IsUnknown():
		k.unknown = append(k.unknown, "insecure")
	default:
		s.insecure = m.Insecure.ValueBool()
	}
	if e := m.Exec; e != nil {
		exec := &clientcmdapi.ExecConfig{InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
		str("exec.api_version", e.APIVersion, &exec.APIVersion)
		str("exec.command", e.Command, &exec.Command)
		if e.Args.IsUnknown() || containsUnknown(e.Args.Elements()) {
			k.unknown = append(k.unknown, "exec.args")
		} else {
			for _, v := range e.Args.Elements() {
				if s, ok := v.(types.String); ok {
					exec.Args = append(exec.Args, s.ValueString())
				}
			}
		}
		if e.Env.IsUnknown() || containsUnknownMap(e.Env.Elements()) {
			k.unknown = append(k.unknown, "exec.env")
		} else {
			for name, v := range e.Env.Elements() {
				if s, ok := v.(types.String); ok {
					exec.Env = append(exec.Env, clientcmdapi.ExecEnvVar{Name: name, Value: s.ValueString()})
				}
			}
		}
		if exec.Command == "" && !e.Command.IsUnknown() {
			diags.AddAttributeError(pathKubernetesExecCommand, "Missing Exec Command",
				"The kubernetes.exec block needs a command, e.g. command = \"aws\" with args = [\"eks\", \"get-token\", ...].")
			return nil, diags
		}
		s.exec = exec
	}
	return k, diags
}

func containsUnknown(vs []attr.Value) bool {
	for _, v := range vs {
		if v.IsUnknown() {
			return true
		}
	}
	return false
}

func containsUnknownMap(vs map[string]attr.Value) bool {
	for _, v := range vs {
		if v.IsUnknown() {
			return true
		}
	}
	return false
}

// connect returns the cluster clients, building them on the first call.
func (k *kubeConnector) connect(ctx context.Context) (*kubeConn, diag.Diagnostics) {
	var diags diag.Diagnostics
	if len(k.unknown) > 0 {
		diags.AddError("Unknown Kubernetes Configuration",
			fmt.Sprintf("The provider's kubernetes block has values that are not known yet (%s), but this operation needs the cluster. "+
				"Apply the resources those values come from first (terraform apply -target=...), or set them statically.",
				strings.Join(k.unknown, ", ")))
		return nil, diags
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conn != nil {
		return k.conn, nil
	}
	cfg, err := k.settings.restConfig()
	if err != nil {
		diags.AddError("Unable to Configure Kubernetes Client",
			"The provider could not build a Kubernetes client from its kubernetes block. Set kubernetes { config_path = \"...\" } "+
				"(or the "+envKubeConfigPath+" environment variable), or host with credentials (token, client_certificate and client_key, or exec).\n\n"+
				"Original error: "+err.Error())
		return nil, diags
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		diags.AddError("Unable to Configure Kubernetes Client",
			"The Kubernetes clientset could not be created from the provider's kubernetes block.\n\nOriginal error: "+err.Error())
		return nil, diags
	}
	tflog.Debug(ctx, "connected the kubernetes client", map[string]any{"kubernetes_host": cfg.Host})
	k.conn = &kubeConn{restConfig: cfg, clientset: cs}
	return k.conn, nil
}

// restConfig turns the settings into a client-go REST config, kubeconfig file first, explicit
// attributes overriding it (the same precedence as the kubernetes and helm providers).
func (s kubeSettings) restConfig() (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{}
	if s.configPath != "" {
		p, err := expandHome(s.configPath)
		if err != nil {
			return nil, err
		}
		rules.ExplicitPath = p
	}
	overrides := &clientcmd.ConfigOverrides{}
	overrides.CurrentContext = s.configContext
	overrides.ClusterInfo.Server = s.host
	if s.caCert != "" {
		overrides.ClusterInfo.CertificateAuthorityData = []byte(s.caCert)
	}
	overrides.ClusterInfo.InsecureSkipTLSVerify = s.insecure
	overrides.AuthInfo.Token = s.token
	if s.clientCert != "" {
		overrides.AuthInfo.ClientCertificateData = []byte(s.clientCert)
	}
	if s.clientKey != "" {
		overrides.AuthInfo.ClientKeyData = []byte(s.clientKey)
	}
	overrides.AuthInfo.Exec = s.exec
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "terraform-provider-outpost/" + version.Version
	// Warnings would go to klog (the plugin's stderr); none of them is actionable for a user here.
	cfg.WarningHandler = rest.NoWarnings{}
	return cfg, nil
}

func expandHome(p string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("expand %q: %w", p, err)
	}
	return filepath.Join(home, strings.TrimPrefix(p, "~")), nil
}
