// Package config reads the agent's configuration from flags, OUTPOST_* environment variables and
// an optional YAML file, in that order of precedence. The chart sets environment variables; people
// running the agent by hand use flags; a file suits long lists. Secrets never come from here: the
// private key is read from a mounted file and job tokens travel in Secrets.
package config

import (
	"flag"
	"fmt"
	corev1 "k8s.io/api/core/v1"
	"os"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

// Executors.
const (
	ExecutorKubernetes = "kubernetes"
	ExecutorProcess    = "process"
)

// DefaultPrivateKeyFile is where the chart mounts the key Secret (data key private-key.pem).
const DefaultPrivateKeyFile = "/etc/outpost/key/private-key.pem"

// Config is the agent's whole configuration.
type Config struct {
	APIURL         string
	OrgID          string
	RunnerID       string
	PrivateKeyFile string
	// PrivateKeySecret names the key Secret in Namespace that the agent reads (and watches)
	// through the Kubernetes API; when set, PrivateKeyFile is not read.
	PrivateKeySecret string
	// PrivateKeySecretKey is the data key of the private key in PrivateKeySecret.
	PrivateKeySecretKey string
	Executor            string
	// CLI is what the job runners run: terraform, tofu, an absolute path, or empty to let each job
	// runner take whichever of tofu and terraform the image of main has.
	CLI string
	// JobImage is the image of the Job's main container when the runner's pod template names none.
	JobImage string
	// AgentImage is the image of the job pods' init container that copies the job runner into the
	// pod: the agent's own image.
	AgentImage string
	StateURL   string
	// StateListen is the listen address of the state backend in plain HTTP; empty serves none.
	// It stays for the job pods an agent of the previous release started, which use
	// http:// (see StateTLSSecret).
	StateListen string
	// StateTLSSecret names the Secret in Namespace that keeps the state backend's CA; set, the
	// agent serves the state backend with TLS on StateTLSListen, with a certificate for
	// StateTLSHosts it issues from that CA, hands the CA to job pods and forwards over TLS.
	StateTLSSecret string
	StateTLSListen string
	// StateTLSHosts are the names (and addresses) the serving certificate is for: the state
	// Service's DNS names.
	StateTLSHosts  []string
	HealthListen   string
	LeaderElect    bool
	LeaseName      string
	Namespace      string
	PodName        string
	StartupTimeout time.Duration
	CABundleFile   string
	KubeQPS        float64
	KubeBurst      int
	LogLevel       string
	// LogFormat is json (one object a line, for log pipelines) or text (key=value, for people).
	LogFormat   string
	Kubeconfig  string
	WorkDir     string
	AgentBinary string

	// InsecureAllowHTTP allows an http:// APIURL that is not loopback: the agent's signed
	// requests and the job tokens would cross the network unencrypted. Named so that nobody
	// sets it by accident.
	InsecureAllowHTTP bool

	// StateNamespace is the namespace of the runner's kubernetes state storage (chart value
	// state.namespace); states of attempts whose claim does not name one (adopted before this
	// agent knew) are served from it. Empty: learned from claims.
	StateNamespace string
	// StateEncryptionKeyFile holds a 32-byte key (raw, or base64) that seals state chunks with
	// AES-256-GCM before they are stored; empty leaves them to the cluster's own encryption at
	// rest. Mounted from a Secret, never passed in an environment variable.
	StateEncryptionKeyFile string
	// StateMaxBodyBytes, StateMaxRequests and StateMaxRequestsPerJob bound the state backend
	// (statebackend.Limits): the largest upload, requests served at once, and at once per job.
	StateMaxBodyBytes      int64
	StateMaxRequests       int
	StateMaxRequestsPerJob int
	// JobNamespace is the namespace the executor watches for its Jobs. It must equal the runner's
	// job.namespace; empty watches every namespace (needs cluster-wide list/watch on Jobs).
	JobNamespace string
	// JobPodLabels are extra labels for job pods (JSON object), e.g. for NetworkPolicies.
	JobPodLabels map[string]string
	// JobImagePullSecrets are added to job pods.
	JobImagePullSecrets []string
	// JobCASecret names a Secret (in the job namespace) with ca.crt, mounted into job pods.
	JobCASecret string
	// JobCASecretKey is the data key of the bundle in JobCASecret.
	JobCASecretKey string
	// JobProxyEnv are the proxy variables (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) of the agent's own
	// environment, handed on to job pods so that the CLI and git use the same proxy. Not flags:
	// the chart sets them on the agent container for the agent itself too.
	JobProxyEnv map[string]string
	// JobServiceAccount is the job service account the chart made RBAC for; claims naming
	// another fail clearly. Empty: take the claim's.
	JobServiceAccount string
	// JobPodPolicy is the cluster owner's job pod policy (chart values jobs.policy.*): what job
	// pods may ask for beyond Pod Security "restricted". Its zero value refuses all of it.
	JobPodPolicy kubeexec.Policy
	// JobSecurity are the security defaults of job pods (chart values jobs.podSecurityContext and
	// jobs.securityContext), completed with Pod Security "restricted".
	JobSecurity kubeexec.SecurityDefaults
	// JobResources are the resources of main when neither the runner's pod template nor its
	// job.resources set any (chart value jobs.resources).
	JobResources corev1.ResourceRequirements
	// JobForwardEnv are the agent's own environment variables named by --job-forward-env (chart
	// value jobs.forwardEnv), by name, handed on to main unless the runner sets the same name.
	JobForwardEnv map[string]string
	// JobPluginCache is the volume of the job pods' provider plugin cache (chart value
	// jobs.pluginCache); nil: none.
	JobPluginCache *corev1.VolumeSource
	// JobProviderInstallation is a provider_installation block for the job pods' CLI (chart value
	// jobs.providerInstallation).
	JobProviderInstallation string
	// JobHistorySucceeded and JobHistoryFailed are how many finished Jobs of each outcome stay
	// in the cluster after their finished event was acknowledged (chart values jobs.history.*).
	JobHistorySucceeded int
	JobHistoryFailed    int
	// JobPodTemplate, when set, pins the pod template of every Job (chart value jobs.podTemplate):
	// the runner's template from the orchestrator is ignored.
	JobPodTemplate string
	// MaxConcurrency caps concurrent attempts below the runner's limit; 0 follows the orchestrator.
	MaxConcurrency int
	// CancelGrace is how long a canceled attempt's CLI may take to stop (release locks, push state).
	CancelGrace time.Duration
	// PollWait is the long-poll hold time asked of the orchestrator (≤ 30 s).
	PollWait time.Duration
	// ShutdownTimeout bounds the work that must finish after SIGTERM (finished events).
	ShutdownTimeout time.Duration
}

// Version is the agent's version (package internal/version: stamped by the release build, else
// what the go command recorded, else "dev").
var Version = version.Version

// Parse reads args (without the program name), the environment (getenv) and the file named by
// --config / OUTPOST_CONFIG. It does not validate; call Validate.
func Parse(args []string, getenv func(string) string) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet("outpost-agent", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var configFile, podLabels, pullSecrets, podPolicy, podSecurity, containerSecurity, resources, forwardEnv, pluginCache string
	fs.StringVar(&configFile, "config", "", "optional YAML file with the same keys as the flags (env OUTPOST_CONFIG)")
	fs.StringVar(&c.APIURL, "api-url", "", "orchestrator base URL (https://, or http:// to loopback)")
	fs.BoolVar(&c.InsecureAllowHTTP, "insecure-allow-http", false, "allow an http:// --api-url that is not loopback: signed requests and job tokens then cross the network unencrypted")
	fs.StringVar(&c.OrgID, "org-id", "", "organisation id")
	fs.StringVar(&c.RunnerID, "runner-id", "", "runner id")
	fs.StringVar(&c.PrivateKeyFile, "private-key-file", DefaultPrivateKeyFile, "PEM ed25519 private key of the runner (read again every 10s, so a rotated key is picked up)")
	fs.StringVar(&c.PrivateKeySecret, "private-key-secret", "", "Secret in --namespace holding the runner's private key, read and watched through the Kubernetes API (wins over --private-key-file)")
	fs.StringVar(&c.PrivateKeySecretKey, "private-key-secret-key", "private-key.pem", "data key of the private key in --private-key-secret")
	fs.StringVar(&c.Executor, "executor", ExecutorKubernetes, "kubernetes | process")
	fs.StringVar(&c.CLI, "cli", "", "terraform | tofu | absolute path of the CLI the job runners run; empty: whichever of tofu and terraform the job image has")
	fs.StringVar(&c.JobImage, "job-image", "", "image of the Job's main container when the runner's pod template names none (it needs terraform or tofu)")
	fs.StringVar(&c.AgentImage, "agent-image", "", "this agent's image; an init container of every job pod copies the job runner from it into the pod")
	fs.StringVar(&c.StateURL, "state-url", "", "URL job runners use to reach the agent's state backend")
	fs.StringVar(&c.StateListen, "state-listen", ":8080", "listen address of the state backend in plain HTTP (empty: none; kept for job pods of the previous release, which use http://)")
	fs.StringVar(&c.StateTLSSecret, "state-tls-secret", "", "Secret in --namespace that keeps the state backend's CA (made on first start); set, the state backend is served with TLS on --state-tls-listen")
	fs.StringVar(&c.StateTLSListen, "state-tls-listen", ":8443", "listen address of the state backend with TLS")
	var stateTLSHosts string
	fs.StringVar(&stateTLSHosts, "state-tls-hosts", "", "comma-separated names of the state backend's serving certificate (the state Service's DNS names)")
	fs.StringVar(&c.HealthListen, "health-listen", ":9090", "listen address of /healthz, /readyz, /metrics")
	fs.BoolVar(&c.LeaderElect, "leader-elect", true, "elect a leader with the leader Lease; only the leader polls")
	fs.StringVar(&c.LeaseName, "lease-name", "outpost-agent", "name of the leader-election Lease")
	fs.StringVar(&c.Namespace, "namespace", "", "the agent's own namespace (holds the leader Lease, which also keeps the connection record helm test reads)")
	fs.StringVar(&c.PodName, "pod-name", "", "the agent's pod name (leader identity, claim instance)")
	fs.DurationVar(&c.StartupTimeout, "startup-timeout", 180*time.Second, "fail an attempt whose Job's pod does not start within this")
	fs.StringVar(&c.CABundleFile, "ca-bundle-file", "", "extra PEM CAs trusted for the orchestrator")
	fs.Float64Var(&c.KubeQPS, "kube-qps", 50, "Kubernetes client QPS")
	fs.IntVar(&c.KubeBurst, "kube-burst", 100, "Kubernetes client burst, at least; grown to 5 × the runner's max_concurrency")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug | info | warn | error")
	fs.StringVar(&c.LogFormat, "log-format", LogFormatJSON, "json | text")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig path, or a list like $KUBECONFIG (empty = in-cluster)")
	fs.StringVar(&c.WorkDir, "work-dir", "", "process executor: directory of the attempts' folders")
	fs.StringVar(&c.AgentBinary, "agent-binary", "", "process executor: the outpost-agent binary that runs the job runners (default: this one)")
	fs.StringVar(&c.JobNamespace, "job-namespace", "", "namespace of the runner's Jobs (= runner job.namespace); empty = all")
	fs.StringVar(&c.StateNamespace, "state-namespace", "", "namespace of the kubernetes state storage (default: from claims)")
	fs.StringVar(&c.StateEncryptionKeyFile, "state-encryption-key-file", "", "file with a 32-byte key (raw or base64) that encrypts state chunks with AES-256-GCM (off when empty)")
	fs.Int64Var(&c.StateMaxBodyBytes, "state-max-body-bytes", 64<<20, "largest state upload the state backend takes (bodies are streamed: this bounds what is stored, not memory)")
	fs.IntVar(&c.StateMaxRequests, "state-max-requests", 4, "state backend requests served at once; more wait up to 10s, then get 503")
	fs.IntVar(&c.StateMaxRequestsPerJob, "state-max-requests-per-job", 2, "state backend requests of one job served at once; more get 429")
	fs.StringVar(&podLabels, "job-pod-labels", "", "extra job pod labels as a JSON object")
	fs.StringVar(&pullSecrets, "job-image-pull-secrets", "", "comma-separated image pull Secrets for job pods")
	fs.StringVar(&c.JobCASecret, "job-ca-secret", "", "Secret with a CA bundle mounted into job pods")
	fs.StringVar(&c.JobCASecretKey, "job-ca-secret-key", "ca.crt", "data key of the CA bundle in --job-ca-secret")
	fs.StringVar(&c.JobServiceAccount, "job-service-account", "", "the runner's job service account the chart prepared (checked against claims)")
	fs.StringVar(&podPolicy, "job-pod-policy", "", "job pod policy as a JSON object (chart values jobs.policy.*); empty refuses everything beyond Pod Security restricted")
	fs.StringVar(&podSecurity, "job-pod-security-context", "", "security defaults of job pods, a PodSecurityContext as JSON (completed with Pod Security restricted)")
	fs.StringVar(&containerSecurity, "job-security-context", "", "security defaults of every container of job pods, a SecurityContext as JSON (completed with Pod Security restricted)")
	fs.StringVar(&resources, "job-resources", DefaultJobResources, "resources of the Job's main container when neither the runner's pod template nor its job.resources set any (ResourceRequirements as JSON; {} for none)")
	fs.StringVar(&forwardEnv, "job-forward-env", "", "comma-separated names of the agent's environment variables handed on to job pods (the runner's own env of the same name wins)")
	fs.StringVar(&pluginCache, "job-plugin-cache", "", "volume of the job pods' provider plugin cache, a Kubernetes VolumeSource as JSON (e.g. {\"persistentVolumeClaim\":{\"claimName\":\"tf-plugins\"}}); empty: none")
	fs.StringVar(&c.JobProviderInstallation, "job-provider-installation", "", "provider_installation block of the job pods' CLI configuration (network or filesystem mirrors)")
	fs.IntVar(&c.JobHistorySucceeded, "job-history-succeeded", 10, "succeeded Jobs kept in the cluster after their result reached the orchestrator (0 deletes each at once)")
	fs.IntVar(&c.JobHistoryFailed, "job-history-failed", 10, "failed or canceled Jobs kept in the cluster after their result reached the orchestrator (0 deletes each at once)")
	fs.StringVar(&c.JobPodTemplate, "job-pod-template", "", "pins the pod template of every Job (JSON PodTemplateSpec); the runner's template is then ignored")
	fs.IntVar(&c.MaxConcurrency, "max-concurrency", 0, "cap below the runner's max_concurrency (0 = follow the orchestrator)")
	fs.DurationVar(&c.CancelGrace, "cancel-grace", 120*time.Second, "time a canceled attempt gets to stop")
	fs.DurationVar(&c.PollWait, "poll-wait", 30*time.Second, "long-poll hold time (at most 30s)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 20*time.Second, "time finished events get after SIGTERM")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; subcommands are `job`, `inject`, `state` and `check-connection`, flags start with --", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["config"] {
		configFile = getenv("OUTPOST_CONFIG")
	}
	file := map[string]string{}
	if configFile != "" {
		var err error
		if file, err = readFile(configFile); err != nil {
			return nil, err
		}
	}
	var setErr error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || f.Name == "config" || setErr != nil {
			return
		}
		env := EnvName(f.Name)
		if v, ok := lookup(getenv, env); ok {
			if err := fs.Set(f.Name, v); err != nil {
				setErr = fmt.Errorf("%s=%q: %w", env, v, err)
			}
			return
		}
		if v, ok := file[f.Name]; ok {
			if err := fs.Set(f.Name, v); err != nil {
				setErr = fmt.Errorf("%s: %s: %q: %w", configFile, f.Name, v, err)
			}
		}
	})
	if setErr != nil {
		return nil, setErr
	}
	c.JobProxyEnv = proxyEnv(getenv)
	if podLabels != "" {
		if err := yaml.Unmarshal([]byte(podLabels), &c.JobPodLabels); err != nil {
			return nil, fmt.Errorf("--job-pod-labels (OUTPOST_JOB_POD_LABELS) must be a JSON object of strings like {\"team\":\"infra\"}: %w", err)
		}
	}
	for _, o := range []struct {
		flag, raw string
		into      any
	}{{"job-pod-policy", podPolicy, &c.JobPodPolicy}, {"job-pod-security-context", podSecurity, &c.JobSecurity.Pod},
		{"job-security-context", containerSecurity, &c.JobSecurity.Container}, {"job-resources", resources, &c.JobResources}} {
		if strings.TrimSpace(o.raw) == "" {
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(o.raw), o.into); err != nil {
			return nil, fmt.Errorf("--%s (%s): %w", o.flag, EnvName(o.flag), err)
		}
	}
	c.JobSecurity = c.JobSecurity.WithRestricted()
	c.JobForwardEnv = forwardedEnv(forwardEnv, getenv)
	if t := strings.TrimSpace(pluginCache); t != "" && t != "{}" {
		c.JobPluginCache = &corev1.VolumeSource{}
		if err := yaml.UnmarshalStrict([]byte(t), c.JobPluginCache); err != nil {
			return nil, fmt.Errorf("--job-plugin-cache (%s) must be a Kubernetes VolumeSource as JSON: %w", EnvName("job-plugin-cache"), err)
		}
	}
	if strings.HasPrefix(strings.TrimSpace(pullSecrets), "[") {
		if err := yaml.Unmarshal([]byte(pullSecrets), &c.JobImagePullSecrets); err != nil {
			return nil, fmt.Errorf("job-image-pull-secrets must be a list of Secret names: %w", err)
		}
		pullSecrets = ""
	}
	for _, s := range strings.Split(pullSecrets, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.JobImagePullSecrets = append(c.JobImagePullSecrets, s)
		}
	}
	for _, h := range strings.Split(stateTLSHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			c.StateTLSHosts = append(c.StateTLSHosts, h)
		}
	}
	return c, nil
}

// Log formats of --log-format.
const (
	LogFormatJSON = "json"
	LogFormatText = "text"
)

// DefaultJobResources are the resources of a Terraform/OpenTofu run when nobody says otherwise: a
// request a plan of a few hundred resources fits in, and a memory limit that stops a runaway
// provider before it takes the node's memory. No CPU limit: throttling only slows a run down.
const DefaultJobResources = `{"requests":{"cpu":"250m","memory":"512Mi"},"limits":{"memory":"2Gi"}}`

// forwardedEnv reads the agent's variables named in the comma-separated list. A name the agent's
// environment does not hold stays with an empty value (so Validate sees every name); job pods
// get only the variables that have a value.
func forwardedEnv(list string, getenv func(string) string) map[string]string {
	out := map[string]string{}
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name != "" {
			out[name] = getenv(name)
		}
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
	return "OUTPOST_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func lookup(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

// readFile reads a flat YAML map whose keys are flag names.
func readFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("config file %s is not a YAML map of flag names to values: %w", path, err)
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		switch x := v.(type) {
		case string:
			out[k] = x
		case bool:
			out[k] = strconv.FormatBool(x)
		case float64:
			out[k] = strconv.FormatFloat(x, 'f', -1, 64)
		case map[string]any, []any:
			b, err := yaml.Marshal(x)
			if err != nil {
				return nil, fmt.Errorf("config file %s: %s: %w", path, k, err)
			}
			j, err := yaml.YAMLToJSON(b)
			if err != nil {
				return nil, fmt.Errorf("config file %s: %s: %w", path, k, err)
			}
			out[k] = string(j)
		default:
			out[k] = fmt.Sprint(x)
		}
	}
	return out, nil
}
