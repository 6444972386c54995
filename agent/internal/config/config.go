// Package config reads the agent's configuration: a YAML file whose keys are named like the
// chart's values (the chart renders it into a ConfigMap from its values, see
// agent/chart/templates/_config.tpl), then OUTPOST_* environment variables, then flags, each
// winning over the one before; defaults sit below all three. The file decodes straight into
// typed structs, among them the executors' own options (kubeexec.Options under jobs,
// process.Options under process) and the state backend's Limits, so nothing is copied field by
// field on the way to the part that uses it. Validate checks the result once, and every error
// names the setting by its key in the file, its chart value and its flag.
//
// Secrets never come from here: the private key is read from its Secret or a mounted file, the
// state encryption key from a mounted file, and job tokens travel in Secrets.
package config

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/process"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statebackend"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/flagenv"
	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

// Executors.
const (
	ExecutorKubernetes = "kubernetes"
	ExecutorProcess    = "process"
)

// Log formats of --log-format.
const (
	LogFormatJSON = "json"
	LogFormatText = "text"
)

// DefaultPrivateKeyFile is where a key Secret mounted as a volume is found (data key
// private-key.pem).
const DefaultPrivateKeyFile = "/etc/outpost/key/private-key.pem"

// EnvPrefix starts the environment variable of every flag (EnvName).
const EnvPrefix = "OUTPOST_"

// Config is the agent's whole configuration. The json names are the keys of the configuration
// file; settings without one are not read from the file.
type Config struct {
	// File is the configuration file the settings were read from (--config, OUTPOST_CONFIG);
	// empty when there is none.
	File string `json:"-"`

	APIURL string `json:"apiUrl"`
	// InsecureAllowHTTP allows an http:// APIURL that is not loopback: the agent's signed
	// requests and the job tokens would cross the network unencrypted. Named so that nobody
	// sets it by accident.
	InsecureAllowHTTP bool   `json:"insecureAllowHttp"`
	OrgID             string `json:"orgId"`
	RunnerID          string `json:"runnerId"`
	// PrivateKey is where the runner's private key is read from.
	PrivateKey PrivateKey `json:"privateKey"`
	Executor   string     `json:"executor"`
	// CLI is what the job runners run: terraform, tofu, an absolute path, or empty to let each job
	// runner take whichever of tofu and terraform the image of main has.
	CLI      string `json:"cli"`
	LogLevel string `json:"logLevel"`
	// LogFormat is json (one object a line, for log pipelines) or text (key=value, for people).
	LogFormat string `json:"logFormat"`
	// Namespace is the agent's own namespace (the leader Lease, the key Secret); the chart sets
	// it from the downward API.
	Namespace string `json:"namespace"`
	// PodName is the agent's pod name (leader identity, claim instance); the chart sets it from
	// the downward API.
	PodName string `json:"podName"`
	// Kubeconfig is a kubeconfig path, or a list like $KUBECONFIG; empty is in-cluster.
	Kubeconfig     string         `json:"kubeconfig"`
	KubeClient     KubeClient     `json:"kubeClient"`
	LeaderElection LeaderElection `json:"leaderElection"`
	// HealthListen is the listen address of /healthz, /readyz and /metrics.
	HealthListen string `json:"healthListen"`
	// CABundleFile holds extra PEM CAs trusted for the orchestrator.
	CABundleFile string `json:"caBundleFile"`
	State        State  `json:"state"`
	// Jobs are the settings of the Kubernetes executor; the agent fills in its runtime parts.
	Jobs Jobs `json:"jobs"`
	// Process are the settings of the process executor.
	Process process.Options `json:"process"`
	// MaxConcurrency caps concurrent attempts below the runner's limit; 0 follows the orchestrator.
	MaxConcurrency int `json:"maxConcurrency"`
	// CancelGrace is how long a canceled attempt's CLI may take to stop (release locks, push state).
	CancelGrace metav1.Duration `json:"cancelGrace"`
	// PollWait is the long-poll hold time asked of the orchestrator (≤ 30 s).
	PollWait metav1.Duration `json:"pollWait"`
	// ShutdownTimeout bounds the work that must finish after SIGTERM (finished events).
	ShutdownTimeout metav1.Duration `json:"shutdownTimeout"`
	// Tracing says where the agent, its job runners and their CLI send their spans.
	Tracing Tracing `json:"tracing"`
}

// Tracing is the agent's OpenTelemetry tracing (package internal/tracing): off unless an
// endpoint is set here or in the standard OTEL_* variables.
type Tracing struct {
	// Endpoint is the OTLP/HTTP base URL of the collector (http://otel-collector:4318); the
	// agent's spans go there, and its job pods get it for the job runner's and the CLI's.
	Endpoint string `json:"endpoint"`
}

// PrivateKey says where the runner's private key is: its Secret, read and watched through the
// Kubernetes API (the chart's way), else a file.
type PrivateKey struct {
	// File is a PEM ed25519 private key, read again every 10 s so a rotated key is picked up.
	File string `json:"file"`
	// ExistingSecret names the key Secret in Namespace; when set, File is not read.
	ExistingSecret string `json:"existingSecret"`
	// SecretKey is the data key of the private key in ExistingSecret.
	SecretKey string `json:"secretKey"`
}

// KubeClient are the Kubernetes client's rate limits.
type KubeClient struct {
	QPS float64 `json:"qps"`
	// Burst is the least burst; the agent grows it to 5 × the runner's max_concurrency.
	Burst int `json:"burst"`
}

// LeaderElection elects the one replica that polls.
type LeaderElection struct {
	Enabled bool `json:"enabled"`
	// LeaseName names the leader Lease, which also keeps the connection record helm test reads.
	LeaseName string `json:"leaseName"`
}

// State are the settings of the state backend.
type State struct {
	// URL is where job runners reach the agent's state backend.
	URL string `json:"url"`
	// Listen is the listen address of the state backend in plain HTTP; empty serves none. It
	// stays for the job pods an agent of the previous release started, which use http://.
	Listen string `json:"listen"`
	// Namespace is the namespace of the runner's kubernetes state storage; states of attempts
	// whose claim does not name one (adopted before this agent knew) are served from it, and
	// when set no other namespace is served. Empty: learned from claims, bounded only by the
	// agent's RBAC.
	Namespace string `json:"namespace"`
	// EncryptionKeyFile holds a 32-byte key (raw, or base64) that seals state chunks with
	// AES-256-GCM before they are stored; empty leaves them to the cluster's own encryption at
	// rest. Mounted from a Secret, never written into the configuration itself.
	EncryptionKeyFile string              `json:"encryptionKeyFile"`
	Limits            statebackend.Limits `json:"limits"`
	TLS               StateTLS            `json:"tls"`
	Versions          StateVersions       `json:"versions"`
}

// StateVersions are how many versions of each state the agent keeps in the cluster, for history,
// show, diff and rollback (statestore.Options.KeepGenerations, MaxGenerationAge).
type StateVersions struct {
	// Keep is how many versions of a state are kept, the current one included (at least 1).
	Keep int `json:"keep"`
	// MaxAge, when not zero, also drops kept versions older than this at the next write (never
	// the current one).
	MaxAge metav1.Duration `json:"maxAge"`
}

// StateTLS serves the state backend with TLS.
type StateTLS struct {
	// Secret names the Secret in Namespace that keeps the state backend's CA; set, the agent
	// serves the state backend with TLS on Listen, with a certificate for Hosts it issues from
	// that CA, hands the CA to job pods and forwards over TLS.
	Secret string `json:"secret"`
	Listen string `json:"listen"`
	// Hosts are the names (and addresses) the serving certificate is for: the state Service's
	// DNS names.
	Hosts []string `json:"hosts"`
}

// Jobs are the Kubernetes executor's options as the cluster owner sets them, plus the two
// settings that take another shape in the file than in the executor.
type Jobs struct {
	kubeexec.Options
	// ForwardEnv names variables of the agent's own environment handed on to job pods; Parse
	// reads their values into Options.ForwardEnv.
	ForwardEnv []string `json:"forwardEnv"`
	// PodTemplate, when set, pins the pod template of every Job (a PodTemplateSpec); Parse puts
	// it into Options.PinnedTemplate.
	PodTemplate json.RawMessage `json:"podTemplate,omitempty"`
}

// Version is the agent's version (package internal/version: stamped by the release build, else
// what the go command recorded, else "dev").
var Version = version.Version

// DefaultJobResources are the resources of a Terraform/OpenTofu run when nobody says otherwise: a
// request a plan of a few hundred resources fits in, and a memory limit that stops a runaway
// provider before it takes the node's memory. No CPU limit: throttling only slows a run down.
func DefaultJobResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
	}
}

// Defaults is the configuration before the file, the environment and the flags.
func Defaults() *Config {
	c := &Config{
		PrivateKey:      PrivateKey{File: DefaultPrivateKeyFile, SecretKey: "private-key.pem"},
		Executor:        ExecutorKubernetes,
		LogLevel:        "info",
		LogFormat:       LogFormatJSON,
		KubeClient:      KubeClient{QPS: 50, Burst: 100},
		LeaderElection:  LeaderElection{Enabled: true, LeaseName: "outpost-agent"},
		HealthListen:    ":9090",
		CancelGrace:     metav1.Duration{Duration: 120 * time.Second},
		PollWait:        metav1.Duration{Duration: 30 * time.Second},
		ShutdownTimeout: metav1.Duration{Duration: 20 * time.Second},
		State: State{Listen: ":8080", TLS: StateTLS{Listen: ":8443"},
			Limits:   statebackend.Limits{MaxBodyBytes: 64 << 20, MaxRequests: 4, MaxRequestsPerJob: 2},
			Versions: StateVersions{Keep: statestore.DefaultKeepGenerations}},
	}
	c.Jobs.StartupTimeout.Duration = 180 * time.Second
	c.Jobs.CASecretKey = "ca.crt"
	c.Jobs.History = kubeexec.History{Succeeded: 10, Failed: 10}
	c.Jobs.Resources = DefaultJobResources()
	return c
}

// Parse reads the configuration file named by --config (or OUTPOST_CONFIG) over the defaults,
// then the environment (getenv) and args (without the program name) over the file. --help
// writes the flags to out. It does not validate; call Validate.
func Parse(args []string, getenv func(string) string, out io.Writer) (*Config, error) {
	// The flags are parsed twice: once to learn the file (and to report bad flags and
	// variables), then over the file's settings, so that they win over it.
	for _, name := range slices.Sorted(maps.Keys(removedVariables)) {
		if getenv(name) != "" {
			key := removedVariables[name]
			return nil, fmt.Errorf("%s is no longer read: set %s in the configuration file (--config), where the chart puts its value %s", name, key, ChartValue(key))
		}
	}
	probe := Defaults()
	fs := probe.flagSet(out, nil)
	if err := flagenv.Parse(fs, args, EnvPrefix, getenv); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; subcommands are `job`, `inject`, `state` and `check-connection`, flags start with --", fs.Arg(0))
	}
	c := Defaults()
	if probe.File != "" {
		data, err := os.ReadFile(probe.File)
		if err != nil {
			return nil, fmt.Errorf("read the configuration file (--config, %s): %w", EnvName("config"), err)
		}
		if err := c.Decode(data); err != nil {
			return nil, fmt.Errorf("configuration file %s: %w", probe.File, err)
		}
	}
	if err := flagenv.Parse(c.flagSet(io.Discard, nil), args, EnvPrefix, getenv); err != nil {
		return nil, err
	}
	c.complete(getenv)
	return c, nil
}

// removedVariables are the JSON-valued variables of earlier agents, now keys of the file; one
// left set (say by the chart's extraEnv) is refused rather than silently ignored.
var removedVariables = map[string]string{
	"OUTPOST_JOB_POD_POLICY": "jobs.policy", "OUTPOST_JOB_POD_SECURITY_CONTEXT": "jobs.podSecurityContext",
	"OUTPOST_JOB_SECURITY_CONTEXT": "jobs.securityContext", "OUTPOST_JOB_RESOURCES": "jobs.resources",
	"OUTPOST_JOB_PLUGIN_CACHE": "jobs.pluginCache", "OUTPOST_JOB_POD_TEMPLATE": "jobs.podTemplate",
}

// complete derives what the file, flags and environment give in another shape: trimmed lists,
// the forwarded and proxy variables' values, the pinned pod template as JSON.
func (c *Config) complete(getenv func(string) string) {
	c.State.TLS.Hosts = trimmed(c.State.TLS.Hosts)
	c.Jobs.ImagePullSecrets = trimmed(c.Jobs.ImagePullSecrets)
	c.Jobs.ForwardEnv = trimmed(c.Jobs.ForwardEnv)
	c.Jobs.Options.ForwardEnv = forwardedEnv(c.Jobs.ForwardEnv, getenv)
	c.Jobs.ProxyEnv = proxyEnv(getenv)
	if c.Jobs.PluginCache != nil && *c.Jobs.PluginCache == (corev1.VolumeSource{}) {
		c.Jobs.PluginCache = nil
	}
	c.Jobs.PinnedTemplate = ""
	if t := strings.TrimSpace(string(c.Jobs.PodTemplate)); t != "" && t != "{}" && t != "null" {
		c.Jobs.PinnedTemplate = t
	}
}

// trimmed drops empty entries and the spaces around the others (a list written "a, b,").
func trimmed(list []string) []string {
	var out []string
	for _, s := range list {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// forwardedEnv reads the agent's variables named in names. A name the agent's environment does
// not hold stays with an empty value (so Validate sees every name); job pods get only the
// variables that have a value.
func forwardedEnv(names []string, getenv func(string) string) map[string]string {
	out := map[string]string{}
	for _, name := range names {
		out[name] = getenv(name)
	}
	return out
}

// ProxyVariables are the proxy variables the agent hands on to job pods, upper case as the chart
// sets them; each is also read in lower case (curl and git read only that for HTTP).
var ProxyVariables = []string{"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"}

// proxyEnv reads the proxy variables, upper case first as Go's net/http does.
func proxyEnv(getenv func(string) string) map[string]string {
	out := map[string]string{}
	for _, name := range ProxyVariables {
		v := getenv(name)
		if v == "" {
			v = getenv(strings.ToLower(name))
		}
		if v != "" {
			out[name] = v
		}
	}
	return out
}
