package config

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// Validate checks the configuration and names every bad value with what to do about it, so a
// misconfigured agent exits once with a useful message instead of crash-looping on a vague one.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &FieldError{Key: key, Err: fmt.Errorf(format, args...)})
	}
	if c.APIURL == "" {
		bad("apiUrl", "required: the orchestrator's base URL, e.g. https://orchestrator.example.com")
	} else if u, err := url.Parse(c.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("apiUrl", "%q is not an absolute http(s) URL", c.APIURL)
	} else if err := client.CheckPlainHTTP(c.APIURL, c.InsecureAllowHTTP, "insecureAllowHttp: true (the chart value, or --insecure-allow-http)"); err != nil {
		bad("apiUrl", "%v", err)
	}
	if err := api.ValidateID("org_id", c.OrgID); err != nil || c.OrgID == "" {
		bad("orgId", "%q must be the organisation id (a DNS-1123 label)", c.OrgID)
	}
	if err := api.ValidateID("runner_id", c.RunnerID); err != nil || c.RunnerID == "" {
		bad("runnerId", "%q must be the runner id registered with the orchestrator (a DNS-1123 label)", c.RunnerID)
	}
	switch {
	case c.PrivateKey.ExistingSecret != "" && c.Namespace == "":
		bad("privateKey.existingSecret", "needs --namespace, the namespace of the Secret (the agent's own)")
	case c.PrivateKey.ExistingSecret != "":
		if msgs := validation.IsDNS1123Subdomain(c.PrivateKey.ExistingSecret); len(msgs) > 0 {
			bad("privateKey.existingSecret", "%q is not a Secret name: %s", c.PrivateKey.ExistingSecret, strings.Join(msgs, "; "))
		}
	case c.PrivateKey.File == "":
		bad("privateKey.file", "required (or --private-key-secret): path of the mounted private key (Secret key private-key.pem)")
	}
	if c.State.TLS.Secret != "" {
		switch {
		case c.Namespace == "":
			bad("state.tls.secret", "needs --namespace, the namespace of the Secret (the agent's own)")
		case len(validation.IsDNS1123Subdomain(c.State.TLS.Secret)) > 0:
			bad("state.tls.secret", "%q is not a Secret name", c.State.TLS.Secret)
		case len(c.State.TLS.Hosts) == 0:
			bad("state.tls.hosts", "required with --state-tls-secret: the state Service's DNS names, which the serving certificate is for")
		}
	}
	switch c.Executor {
	case ExecutorKubernetes:
		if c.Jobs.Image == "" {
			bad("jobs.image", "required with --executor=kubernetes: the default image of the Job's main container, one with terraform or tofu (e.g. ghcr.io/outpost-dev/outpost-job)")
		}
		if c.Jobs.AgentImage == "" {
			bad("jobs.agentImage", "required with --executor=kubernetes: the agent's own image, from which job pods copy the job runner (e.g. ghcr.io/outpost-dev/outpost-agent)")
		}
		if c.Jobs.Namespace != "" {
			if msgs := validation.IsDNS1123Label(c.Jobs.Namespace); len(msgs) > 0 {
				bad("jobs.namespace", "%q is not a namespace name: %s", c.Jobs.Namespace, strings.Join(msgs, "; "))
			}
		}
		if c.Jobs.CASecret != "" {
			if msgs := validation.IsDNS1123Subdomain(c.Jobs.CASecret); len(msgs) > 0 {
				bad("jobs.caSecret", "%q is not a Secret name: %s", c.Jobs.CASecret, strings.Join(msgs, "; "))
			}
		}
		if msgs := validation.IsConfigMapKey(c.Jobs.CASecretKey); c.Jobs.CASecret != "" && len(msgs) > 0 {
			bad("jobs.caSecretKey", "%q is not a Secret data key: %s", c.Jobs.CASecretKey, strings.Join(msgs, "; "))
		}
		for _, s := range c.Jobs.ImagePullSecrets {
			if msgs := validation.IsDNS1123Subdomain(s); len(msgs) > 0 {
				bad("jobs.imagePullSecrets", "%q is not a Secret name: %s", s, strings.Join(msgs, "; "))
			}
		}
		if err := kubeexec.ValidatePolicy(&c.Jobs.Policy); err != nil {
			bad("jobs.policy", "%v", err)
		}
		for _, name := range slices.Sorted(maps.Keys(c.Jobs.Options.ForwardEnv)) {
			switch {
			case len(validation.IsEnvVarName(name)) > 0:
				bad("jobs.forwardEnv", "%q is not an environment variable name", name)
			case strings.HasPrefix(strings.ToUpper(name), "OUTPOST_"):
				bad("jobs.forwardEnv", "%q: variables under OUTPOST_ are the agent's own settings and never reach job pods; rename it", name)
			case slices.Contains(ProxyVariables, strings.ToUpper(name)):
				bad("jobs.forwardEnv", "%q: the proxy variables reach job pods already (chart values proxy.*); remove it", name)
			}
		}
		for key, n := range map[string]int{"jobs.history.succeeded": c.Jobs.History.Succeeded, "jobs.history.failed": c.Jobs.History.Failed} {
			if n < 0 || n > 1000 {
				bad(key, "%d is out of range; keep 0 to 1000 Jobs", n)
			}
		}
		if c.Jobs.ProviderInstallation != "" && !strings.Contains(c.Jobs.ProviderInstallation, "provider_installation") {
			bad("jobs.providerInstallation", "must be a provider_installation { ... } block of the CLI configuration")
		}
		if err := kubeexec.ValidateResources(c.Jobs.Resources); err != nil {
			bad("jobs.resources", "%v", err)
		}
		if c.Jobs.PinnedTemplate != "" {
			if _, err := podtemplate.Parse(c.Jobs.PinnedTemplate); err != nil {
				bad("jobs.podTemplate", "%v", err)
			}
		}
		for k, v := range c.Jobs.PodLabels {
			if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
				bad("jobs.podLabels", "label key %q: %s", k, strings.Join(msgs, "; "))
			}
			if strings.HasPrefix(k, "outpost.dev/") || k == "app.kubernetes.io/managed-by" {
				bad("jobs.podLabels", "label %q is set by the agent; remove it", k)
			}
			if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
				bad("jobs.podLabels", "value of %q: %s", k, strings.Join(msgs, "; "))
			}
		}
	case ExecutorProcess:
		if c.Process.WorkDir == "" {
			bad("process.workDir", "required with --executor=process: a directory for the attempts' folders")
		} else if !filepath.IsAbs(c.Process.WorkDir) {
			bad("process.workDir", "%q must be an absolute path", c.Process.WorkDir)
		}
		if c.Process.AgentBinary != "" && !filepath.IsAbs(c.Process.AgentBinary) {
			bad("process.agentBinary", "%q must be an absolute path", c.Process.AgentBinary)
		}
	default:
		bad("executor", "%q is not one of kubernetes, process", c.Executor)
	}
	if c.CLI != "" && c.CLI != "terraform" && c.CLI != "tofu" && !filepath.IsAbs(c.CLI) {
		bad("cli", "%q must be terraform, tofu, an absolute path, or empty (whichever of tofu and terraform the job image has)", c.CLI)
	}
	if c.State.URL != "" {
		if u, err := url.Parse(c.State.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("state.url", "%q is not an absolute http(s) URL", c.State.URL)
		}
	}
	if c.LeaderElection.Enabled {
		if c.Namespace == "" {
			bad("namespace", "required with leader election: the agent's namespace (downward API metadata.namespace), or set --leader-elect=false")
		}
		if c.PodName == "" {
			bad("podName", "required with leader election: the agent's pod name (downward API metadata.name)")
		}
		if msgs := validation.IsDNS1123Subdomain(c.LeaderElection.LeaseName); len(msgs) > 0 {
			bad("leaderElection.leaseName", "%q: %s", c.LeaderElection.LeaseName, strings.Join(msgs, "; "))
		}
	}
	positive := func(name string, d time.Duration, least time.Duration) {
		if d < least {
			bad(name, "%s is too short; use at least %s", d, least)
		}
	}
	positive("jobs.startupTimeout", c.Jobs.StartupTimeout.Duration, time.Second)
	positive("cancelGrace", c.CancelGrace.Duration, time.Second)
	positive("shutdownTimeout", c.ShutdownTimeout.Duration, time.Second)
	positive("pollWait", c.PollWait.Duration, time.Second)
	if c.PollWait.Duration > 30*time.Second {
		bad("pollWait", "%s is longer than the orchestrator's 30s maximum", c.PollWait.Duration)
	}
	if c.KubeClient.QPS <= 0 {
		bad("kubeClient.qps", "%v must be positive", c.KubeClient.QPS)
	}
	if c.KubeClient.Burst <= 0 {
		bad("kubeClient.burst", "%d must be positive", c.KubeClient.Burst)
	}
	for _, l := range []struct {
		key string
		v   int64
	}{{"state.limits.maxBodyBytes", c.State.Limits.MaxBodyBytes}, {"state.limits.maxRequests", int64(c.State.Limits.MaxRequests)}, {"state.limits.maxRequestsPerJob", int64(c.State.Limits.MaxRequestsPerJob)}} {
		if l.v <= 0 {
			bad(l.key, "%d must be positive", l.v)
		}
	}
	if c.State.Versions.Keep < 1 || c.State.Versions.Keep > statestore.MaxKeepGenerations {
		bad("state.versions.keep", "%d is out of range; keep 1 to %d versions", c.State.Versions.Keep, statestore.MaxKeepGenerations)
	}
	if c.State.Versions.MaxAge.Duration < 0 {
		bad("state.versions.maxAge", "%s must be 0 (no age limit) or positive", c.State.Versions.MaxAge.Duration)
	}
	if c.MaxConcurrency < 0 {
		bad("maxConcurrency", "%d must be 0 (follow the orchestrator) or positive", c.MaxConcurrency)
	}
	if c.LogFormat != LogFormatJSON && c.LogFormat != LogFormatText {
		bad("logFormat", "%q is not one of json, text", c.LogFormat)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("logLevel", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	if c.CABundleFile != "" {
		if _, err := os.Stat(c.CABundleFile); err != nil {
			bad("caBundleFile", "cannot read %s: %v", c.CABundleFile, errors.Unwrap(err))
		}
	}
	if c.State.EncryptionKeyFile != "" {
		if _, err := c.LoadStateEncryptionKey(); err != nil {
			bad("state.encryptionKeyFile", "%v", err)
		}
	}
	return errors.Join(errs...)
}

// LoadStateEncryptionKey reads the state encryption key (statestore.ReadKeyFile); nil without a
// key file.
func (c *Config) LoadStateEncryptionKey() ([]byte, error) {
	return statestore.ReadKeyFile(c.State.EncryptionKeyFile)
}

// Instance names this agent process towards the orchestrator and in the leader Lease: the pod
// name, or the host name outside a pod.
func (c *Config) Instance() string {
	if c.PodName != "" {
		return c.PodName
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "outpost-agent"
	}
	return h
}
