package config

import (
	"encoding/base64"
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
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// Validate checks the configuration and names every bad value with what to do about it, so a
// misconfigured agent exits once with a useful message instead of crash-looping on a vague one.
func (c *Config) Validate() error {
	var errs []error
	bad := func(flagName, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s (%s): %s", flagName, EnvName(flagName), fmt.Sprintf(format, args...)))
	}
	if c.APIURL == "" {
		bad("api-url", "required: the orchestrator's base URL, e.g. https://orchestrator.example.com")
	} else if u, err := url.Parse(c.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("api-url", "%q is not an absolute http(s) URL", c.APIURL)
	} else if err := client.CheckPlainHTTP(c.APIURL, c.InsecureAllowHTTP, "--insecure-allow-http ("+EnvName("insecure-allow-http")+"=true)"); err != nil {
		bad("api-url", "%v", err)
	}
	if err := api.ValidateID("org_id", c.OrgID); err != nil || c.OrgID == "" {
		bad("org-id", "%q must be the organisation id (a DNS-1123 label)", c.OrgID)
	}
	if err := api.ValidateID("runner_id", c.RunnerID); err != nil || c.RunnerID == "" {
		bad("runner-id", "%q must be the runner id registered with the orchestrator (a DNS-1123 label)", c.RunnerID)
	}
	switch {
	case c.PrivateKeySecret != "" && c.Namespace == "":
		bad("private-key-secret", "needs --namespace, the namespace of the Secret (the agent's own)")
	case c.PrivateKeySecret != "":
		if msgs := validation.IsDNS1123Subdomain(c.PrivateKeySecret); len(msgs) > 0 {
			bad("private-key-secret", "%q is not a Secret name: %s", c.PrivateKeySecret, strings.Join(msgs, "; "))
		}
	case c.PrivateKeyFile == "":
		bad("private-key-file", "required (or --private-key-secret): path of the mounted private key (Secret key private-key.pem)")
	}
	if c.StateTLSSecret != "" {
		switch {
		case c.Namespace == "":
			bad("state-tls-secret", "needs --namespace, the namespace of the Secret (the agent's own)")
		case len(validation.IsDNS1123Subdomain(c.StateTLSSecret)) > 0:
			bad("state-tls-secret", "%q is not a Secret name", c.StateTLSSecret)
		case len(c.StateTLSHosts) == 0:
			bad("state-tls-hosts", "required with --state-tls-secret: the state Service's DNS names, which the serving certificate is for")
		}
	}
	switch c.Executor {
	case ExecutorKubernetes:
		if c.JobImage == "" {
			bad("job-image", "required with --executor=kubernetes: the default image of the Job's main container, one with terraform or tofu (e.g. ghcr.io/outpost-dev/outpost-job)")
		}
		if c.AgentImage == "" {
			bad("agent-image", "required with --executor=kubernetes: the agent's own image, from which job pods copy the job runner (e.g. ghcr.io/outpost-dev/outpost-agent)")
		}
		if c.JobNamespace != "" {
			if msgs := validation.IsDNS1123Label(c.JobNamespace); len(msgs) > 0 {
				bad("job-namespace", "%q is not a namespace name: %s", c.JobNamespace, strings.Join(msgs, "; "))
			}
		}
		if c.JobCASecret != "" {
			if msgs := validation.IsDNS1123Subdomain(c.JobCASecret); len(msgs) > 0 {
				bad("job-ca-secret", "%q is not a Secret name: %s", c.JobCASecret, strings.Join(msgs, "; "))
			}
		}
		if msgs := validation.IsConfigMapKey(c.JobCASecretKey); c.JobCASecret != "" && len(msgs) > 0 {
			bad("job-ca-secret-key", "%q is not a Secret data key: %s", c.JobCASecretKey, strings.Join(msgs, "; "))
		}
		for _, s := range c.JobImagePullSecrets {
			if msgs := validation.IsDNS1123Subdomain(s); len(msgs) > 0 {
				bad("job-image-pull-secrets", "%q is not a Secret name: %s", s, strings.Join(msgs, "; "))
			}
		}
		if err := kubeexec.ValidatePolicy(&c.JobPodPolicy); err != nil {
			bad("job-pod-policy", "%v", err)
		}
		for _, name := range slices.Sorted(maps.Keys(c.JobForwardEnv)) {
			switch {
			case len(validation.IsEnvVarName(name)) > 0:
				bad("job-forward-env", "%q is not an environment variable name", name)
			case strings.HasPrefix(strings.ToUpper(name), "OUTPOST_"):
				bad("job-forward-env", "%q: variables under OUTPOST_ are the agent's own settings and never reach job pods; rename it", name)
			case slices.Contains(ProxyVariables, strings.ToUpper(name)):
				bad("job-forward-env", "%q: the proxy variables reach job pods already (chart values proxy.*); remove it", name)
			}
		}
		for flag, n := range map[string]int{"job-history-succeeded": c.JobHistorySucceeded, "job-history-failed": c.JobHistoryFailed} {
			if n < 0 || n > 1000 {
				bad(flag, "%d is out of range; keep 0 to 1000 Jobs", n)
			}
		}
		if c.JobProviderInstallation != "" && !strings.Contains(c.JobProviderInstallation, "provider_installation") {
			bad("job-provider-installation", "must be a provider_installation { ... } block of the CLI configuration")
		}
		if err := kubeexec.ValidateResources(c.JobResources); err != nil {
			bad("job-resources", "%v", err)
		}
		if c.JobPodTemplate != "" {
			if _, err := podtemplate.Parse(c.JobPodTemplate); err != nil {
				bad("job-pod-template", "%v", err)
			}
		}
		for k, v := range c.JobPodLabels {
			if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
				bad("job-pod-labels", "label key %q: %s", k, strings.Join(msgs, "; "))
			}
			if strings.HasPrefix(k, "outpost.dev/") || k == "app.kubernetes.io/managed-by" {
				bad("job-pod-labels", "label %q is set by the agent; remove it", k)
			}
			if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
				bad("job-pod-labels", "value of %q: %s", k, strings.Join(msgs, "; "))
			}
		}
	case ExecutorProcess:
		if c.WorkDir == "" {
			bad("work-dir", "required with --executor=process: a directory for the attempts' folders")
		} else if !filepath.IsAbs(c.WorkDir) {
			bad("work-dir", "%q must be an absolute path", c.WorkDir)
		}
		if c.AgentBinary != "" && !filepath.IsAbs(c.AgentBinary) {
			bad("agent-binary", "%q must be an absolute path", c.AgentBinary)
		}
	default:
		bad("executor", "%q is not one of kubernetes, process", c.Executor)
	}
	if c.CLI != "" && c.CLI != "terraform" && c.CLI != "tofu" && !filepath.IsAbs(c.CLI) {
		bad("cli", "%q must be terraform, tofu, an absolute path, or empty (whichever of tofu and terraform the job image has)", c.CLI)
	}
	if c.StateURL != "" {
		if u, err := url.Parse(c.StateURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("state-url", "%q is not an absolute http(s) URL", c.StateURL)
		}
	}
	if c.LeaderElect {
		if c.Namespace == "" {
			bad("namespace", "required with leader election: the agent's namespace (downward API metadata.namespace), or set --leader-elect=false")
		}
		if c.PodName == "" {
			bad("pod-name", "required with leader election: the agent's pod name (downward API metadata.name)")
		}
		if msgs := validation.IsDNS1123Subdomain(c.LeaseName); len(msgs) > 0 {
			bad("lease-name", "%q: %s", c.LeaseName, strings.Join(msgs, "; "))
		}
	}
	positive := func(name string, d time.Duration, least time.Duration) {
		if d < least {
			bad(name, "%s is too short; use at least %s", d, least)
		}
	}
	positive("startup-timeout", c.StartupTimeout, time.Second)
	positive("cancel-grace", c.CancelGrace, time.Second)
	positive("shutdown-timeout", c.ShutdownTimeout, time.Second)
	positive("poll-wait", c.PollWait, time.Second)
	if c.PollWait > 30*time.Second {
		bad("poll-wait", "%s is longer than the orchestrator's 30s maximum", c.PollWait)
	}
	if c.KubeQPS <= 0 {
		bad("kube-qps", "%v must be positive", c.KubeQPS)
	}
	if c.KubeBurst <= 0 {
		bad("kube-burst", "%d must be positive", c.KubeBurst)
	}
	for _, l := range []struct {
		flag string
		v    int64
	}{{"state-max-body-bytes", c.StateMaxBodyBytes}, {"state-max-requests", int64(c.StateMaxRequests)}, {"state-max-requests-per-job", int64(c.StateMaxRequestsPerJob)}} {
		if l.v <= 0 {
			bad(l.flag, "%d must be positive", l.v)
		}
	}
	if c.MaxConcurrency < 0 {
		bad("max-concurrency", "%d must be 0 (follow the orchestrator) or positive", c.MaxConcurrency)
	}
	if c.LogFormat != LogFormatJSON && c.LogFormat != LogFormatText {
		bad("log-format", "%q is not one of json, text", c.LogFormat)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log-level", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	if c.CABundleFile != "" {
		if _, err := os.Stat(c.CABundleFile); err != nil {
			bad("ca-bundle-file", "cannot read %s: %v", c.CABundleFile, errors.Unwrap(err))
		}
	}
	if c.StateEncryptionKeyFile != "" {
		if _, err := c.LoadStateEncryptionKey(); err != nil {
			bad("state-encryption-key-file", "%v", err)
		}
	}
	return errors.Join(errs...)
}

// LoadStateEncryptionKey reads the state encryption key: exactly 32 bytes, given raw or as
// standard base64 (what `openssl rand -base64 32` prints). Nil without a key file.
func (c *Config) LoadStateEncryptionKey() ([]byte, error) {
	if c.StateEncryptionKeyFile == "" {
		return nil, nil
	}
	data, err := os.ReadFile(c.StateEncryptionKeyFile)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", c.StateEncryptionKeyFile, errors.Unwrap(err))
	}
	if len(data) == 32 {
		return data, nil
	}
	if key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data))); err == nil && len(key) == 32 {
		return key, nil
	}
	return nil, fmt.Errorf("%s must hold a 32-byte key, raw or base64 (create one with `openssl rand -base64 32`); it holds %d bytes", c.StateEncryptionKeyFile, len(data))
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
