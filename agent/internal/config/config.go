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

	"github.com/spf13/pflag"
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

// EnvName is the environment variable of a flag: --kube-qps → OUTPOST_KUBE_QPS.
func EnvName(flagName string) string {
	return flagenv.Name(EnvPrefix, flagName)
}

// flagSet binds the flags to c's fields, each with c's value as its default.
func (c *Config) flagSet(out io.Writer, keys map[string]string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("outpost-agent", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, "Usage: outpost-agent [flags]\n\nSettings come from the file --config names (keys like the chart's values), then the\nenvironment, then these flags, each winning over the one before.\n\nFlags:")
		fs.PrintDefaults()
	}
	b := binder{fs: fs, keys: keys}
	b.str(&c.File, "config", "", "YAML configuration file, keys named like the chart's values (the chart mounts one from its ConfigMap)")
	b.str(&c.APIURL, "api-url", "apiUrl", "orchestrator base URL (https://, or http:// to loopback)")
	b.boolean(&c.InsecureAllowHTTP, "insecure-allow-http", "insecureAllowHttp", "allow an http:// --api-url that is not loopback: signed requests and job tokens then cross the network unencrypted")
	b.str(&c.OrgID, "org-id", "orgId", "organisation id")
	b.str(&c.RunnerID, "runner-id", "runnerId", "runner id")
	b.str(&c.PrivateKey.File, "private-key-file", "privateKey.file", "PEM ed25519 private key of the runner (read again every 10s, so a rotated key is picked up)")
	b.str(&c.PrivateKey.ExistingSecret, "private-key-secret", "privateKey.existingSecret", "Secret in --namespace holding the runner's private key, read and watched through the Kubernetes API (wins over --private-key-file)")
	b.str(&c.PrivateKey.SecretKey, "private-key-secret-key", "privateKey.secretKey", "data key of the private key in --private-key-secret")
	b.str(&c.Executor, "executor", "executor", "kubernetes | process")
	b.str(&c.CLI, "cli", "cli", "terraform | tofu | absolute path of the CLI the job runners run; empty: whichever of tofu and terraform the job image has")
	b.str(&c.Jobs.Image, "job-image", "jobs.image", "image of the Job's main container when the runner's pod template names none (it needs terraform or tofu)")
	b.str(&c.Jobs.AgentImage, "agent-image", "jobs.agentImage", "this agent's image; an init container of every job pod copies the job runner from it into the pod")
	b.str(&c.State.URL, "state-url", "state.url", "URL job runners use to reach the agent's state backend")
	b.str(&c.State.Listen, "state-listen", "state.listen", "listen address of the state backend in plain HTTP (empty: none; kept for job pods of the previous release, which use http://)")
	b.str(&c.State.TLS.Secret, "state-tls-secret", "state.tls.secret", "Secret in --namespace that keeps the state backend's CA (made on first start); set, the state backend is served with TLS on --state-tls-listen")
	b.str(&c.State.TLS.Listen, "state-tls-listen", "state.tls.listen", "listen address of the state backend with TLS")
	b.list(&c.State.TLS.Hosts, "state-tls-hosts", "state.tls.hosts", "comma-separated names of the state backend's serving certificate (the state Service's DNS names)")
	b.str(&c.HealthListen, "health-listen", "healthListen", "listen address of /healthz, /readyz, /metrics")
	b.boolean(&c.LeaderElection.Enabled, "leader-elect", "leaderElection.enabled", "elect a leader with the leader Lease; only the leader polls")
	b.str(&c.LeaderElection.LeaseName, "lease-name", "leaderElection.leaseName", "name of the leader-election Lease")
	b.str(&c.Namespace, "namespace", "namespace", "the agent's own namespace (holds the leader Lease, which also keeps the connection record helm test reads)")
	b.str(&c.PodName, "pod-name", "podName", "the agent's pod name (leader identity, claim instance)")
	b.duration(&c.Jobs.StartupTimeout.Duration, "startup-timeout", "jobs.startupTimeout", "fail an attempt whose Job's pod does not start within this")
	b.str(&c.CABundleFile, "ca-bundle-file", "caBundleFile", "extra PEM CAs trusted for the orchestrator")
	b.fs.Float64Var(&c.KubeClient.QPS, "kube-qps", c.KubeClient.QPS, b.usage("Kubernetes client QPS", "kube-qps", "kubeClient.qps"))
	b.integer(&c.KubeClient.Burst, "kube-burst", "kubeClient.burst", "Kubernetes client burst, at least; grown to 5 × the runner's max_concurrency")
	b.str(&c.LogLevel, "log-level", "logLevel", "debug | info | warn | error")
	b.str(&c.LogFormat, "log-format", "logFormat", "json | text")
	b.str(&c.Kubeconfig, "kubeconfig", "kubeconfig", "kubeconfig path, or a list like $KUBECONFIG (empty = in-cluster)")
	b.str(&c.Process.WorkDir, "work-dir", "process.workDir", "process executor: directory of the attempts' folders")
	b.str(&c.Process.AgentBinary, "agent-binary", "process.agentBinary", "process executor: the outpost-agent binary that runs the job runners (default: this one)")
	b.str(&c.Jobs.Namespace, "job-namespace", "jobs.namespace", "namespace of the runner's Jobs (= runner job.namespace); empty = all")
	b.str(&c.State.Namespace, "state-namespace", "state.namespace", "namespace of the kubernetes state storage; when set, the only one states are kept in (a claim naming another is refused); empty: from claims, bounded by RBAC")
	b.str(&c.State.EncryptionKeyFile, "state-encryption-key-file", "state.encryptionKeyFile", "file with a 32-byte key (raw or base64) that encrypts state chunks with AES-256-GCM (off when empty)")
	b.fs.Int64Var(&c.State.Limits.MaxBodyBytes, "state-max-body-bytes", c.State.Limits.MaxBodyBytes,
		b.usage("largest state upload the state backend takes (bodies are streamed: this bounds what is stored, not memory)", "state-max-body-bytes", "state.limits.maxBodyBytes"))
	b.integer(&c.State.Limits.MaxRequests, "state-max-requests", "state.limits.maxRequests", "state backend requests served at once; more wait up to 10s, then get 503")
	b.integer(&c.State.Versions.Keep, "state-versions-keep", "state.versions.keep", "versions of each state kept in the cluster, the current one included")
	b.duration(&c.State.Versions.MaxAge.Duration, "state-versions-max-age", "state.versions.maxAge", "drop kept state versions older than this at the next write, never the current one (0: no age limit)")
	b.integer(&c.State.Limits.MaxRequestsPerJob, "state-max-requests-per-job", "state.limits.maxRequestsPerJob", "state backend requests of one job served at once; more get 429")
	b.fs.StringToStringVar(&c.Jobs.PodLabels, "job-pod-labels", c.Jobs.PodLabels, b.usage("extra job pod labels, e.g. team=infra,tier=iac", "job-pod-labels", "jobs.podLabels"))
	b.list(&c.Jobs.ImagePullSecrets, "job-image-pull-secrets", "jobs.imagePullSecrets", "comma-separated image pull Secrets for job pods")
	b.str(&c.Jobs.CASecret, "job-ca-secret", "jobs.caSecret", "Secret with a CA bundle mounted into job pods")
	b.str(&c.Jobs.CASecretKey, "job-ca-secret-key", "jobs.caSecretKey", "data key of the CA bundle in --job-ca-secret")
	b.str(&c.Jobs.ServiceAccount, "job-service-account", "jobs.serviceAccount", "the runner's job service account the chart prepared (checked against claims)")
	b.list(&c.Jobs.ForwardEnv, "job-forward-env", "jobs.forwardEnv", "comma-separated names of the agent's environment variables handed on to job pods (the runner's own env of the same name wins)")
	b.str(&c.Jobs.ProviderInstallation, "job-provider-installation", "jobs.providerInstallation", "provider_installation block of the job pods' CLI configuration (network or filesystem mirrors)")
	b.integer(&c.Jobs.History.Succeeded, "job-history-succeeded", "jobs.history.succeeded", "succeeded Jobs kept in the cluster after their result reached the orchestrator (0 deletes each at once)")
	b.integer(&c.Jobs.History.Failed, "job-history-failed", "jobs.history.failed", "failed or canceled Jobs kept in the cluster after their result reached the orchestrator (0 deletes each at once)")
	b.integer(&c.MaxConcurrency, "max-concurrency", "maxConcurrency", "cap below the runner's max_concurrency (0 = follow the orchestrator)")
	b.duration(&c.CancelGrace.Duration, "cancel-grace", "cancelGrace", "time a canceled attempt gets to stop")
	b.duration(&c.PollWait.Duration, "poll-wait", "pollWait", "long-poll hold time (at most 30s)")
	b.duration(&c.ShutdownTimeout.Duration, "shutdown-timeout", "shutdownTimeout", "time finished events get after SIGTERM")
	b.str(&c.Tracing.Endpoint, "trace-endpoint", "tracing.endpoint", "OpenTelemetry collector (OTLP/HTTP base URL, e.g. http://otel-collector:4318) for the agent's, the job runners' and the CLI's spans; empty = the standard OTEL_* variables, no tracing when unset")
	return fs
}

// binder defines flags over a Config's fields, each with the field's value as its default (so
// binding over a decoded file keeps the file's values), and records which setting of the file
// each flag sets, for error messages (Describe).
type binder struct {
	fs *pflag.FlagSet
	// keys, when set, receives the key of the file each flag sets.
	keys map[string]string
}

// usage records the flag of key and returns the flag's usage naming the key, so --help
// tells where each flag's setting goes in the file.
func (b binder) usage(text, flagName, key string) string {
	if key == "" {
		return text
	}
	if b.keys != nil {
		b.keys[key] = flagName
	}
	return text + "; file key " + key
}

func (b binder) str(p *string, name, key, usage string) {
	b.fs.StringVar(p, name, *p, b.usage(usage, name, key))
}

func (b binder) boolean(p *bool, name, key, usage string) {
	b.fs.BoolVar(p, name, *p, b.usage(usage, name, key))
}

func (b binder) integer(p *int, name, key, usage string) {
	b.fs.IntVar(p, name, *p, b.usage(usage, name, key))
}

func (b binder) duration(p *time.Duration, name, key, usage string) {
	b.fs.DurationVar(p, name, *p, b.usage(usage, name, key))
}

func (b binder) list(p *[]string, name, key, usage string) {
	b.fs.StringSliceVar(p, name, *p, b.usage(usage, name, key))
}

// flagOfKey maps a key of the file to the flag that sets it.
var flagOfKey = func() map[string]string {
	keys := map[string]string{}
	Defaults().flagSet(io.Discard, keys)
	return keys
}()
