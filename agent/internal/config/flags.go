package config

// The flags: each setting's flag and OUTPOST_* variable, bound to the field the file's key fills,
// with the file's key and the chart's value named in its usage.

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/outpost-dev/terraform-provider-outpost/internal/flagenv"
)

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
