package main

// The parts of the agent that need the runner's key, and how each is built from the
// configuration: the cluster client and its rate limit, the state backend, the executor.

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/config"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/connection"
	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/process"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/health"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobtoken"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/keyring"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/kubeclient"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/metrics"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/session"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statebackend"
	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// lead is the work of the replica that leads (the only one without leader election) until ctx
// ends: the session, and the record of its connection on the Lease.
func (p *parts) lead(ctx context.Context) {
	if p.connection == nil {
		p.session.RunAndRestart(ctx)
		return
	}
	p.connection.Reset()
	done := make(chan struct{})
	go func() { defer close(done); p.connection.Run(ctx) }()
	p.session.RunAndRestart(ctx)
	<-done
}

// parts are what the agent runs once it has its key.
type parts struct {
	exec    runnable
	session *session.Session
	// state is nil when the agent has no cluster to keep states in.
	state *statebackend.Server
	// forwarder is set when leader election runs.
	forwarder *statebackend.Forwarder
	// tokens are the grants of the attempts this replica holds while it leads.
	tokens *jobtoken.Registry
	// connection records on the Lease whether polls reach the orchestrator; nil without a
	// cluster or a namespace.
	connection *connection.Recorder
}

// assemble builds the parts that need the runner's key; nothing runs yet.
func assemble(cfg *config.Config, log *slog.Logger, kube kubeclient.Interface, limiter *kubeclient.Limiter, readiness *health.State, m *metrics.Metrics, ring *keyring.Ring, stls *stateTLS, traces kubeexec.Tracing) (*parts, error) {
	signer := agentauth.NewSigner(cfg.OrgID, cfg.RunnerID, ring.Keys()...)
	httpClient, _, err := client.NewHTTPClient(cfg.CABundleFile, orchestratorTimeout)
	if err != nil {
		return nil, fmt.Errorf("--ca-bundle-file: %w", err)
	}
	opts := []client.Option{client.WithHTTPClient(httpClient), client.WithRequestHook(m.RequestHook), client.WithUserAgent("outpost-agent/" + config.Version)}
	if cfg.InsecureAllowHTTP {
		opts = append(opts, client.AllowInsecureHTTP())
	}
	orch, err := client.NewAgentClient(cfg.APIURL, signer, opts...)
	if err != nil {
		return nil, err
	}
	exec, err := newExecutor(cfg, kube, log, ring.Current(), stls.caPEM(), traces)
	if err != nil {
		return nil, err
	}
	tokens := jobtoken.New(jobtoken.StateCredentialKey(ring.Current()))
	p := &parts{exec: exec, tokens: tokens}
	if cfg.LeaderElection.Enabled {
		p.forwarder = statebackend.NewForwarder(kube, cfg.Namespace, cfg.Instance(), cfg.State.Listen)
		if stls != nil {
			p.forwarder.UseTLS(stls.client, cfg.State.TLS.Listen)
		}
	}
	var noStateBackend string
	// The kubernetes executor names the job pod of each state lock's holder.
	pods, _ := exec.(statebackend.AttemptPods)
	p.state, noStateBackend = newStateServer(cfg, kube, tokens, p.forwarder, orch, pods, log)
	var recorder session.ConnectionRecorder
	if kube != nil && cfg.Namespace != "" {
		p.connection = connection.NewRecorder(connection.RecorderOptions{Client: kube, Namespace: cfg.Namespace, LeaseName: cfg.LeaderElection.LeaseName,
			Identity: cfg.Instance(), Elected: cfg.LeaderElection.Enabled, URL: cfg.APIURL, Logger: log})
		recorder = p.connection
	}
	var plans session.PlanChecker
	// State operations the poll hands over are run by the state backend; an agent that serves
	// none answers each with why, instead of letting it expire.
	ops := statebackend.RefusedOperations(noStateBackend, orch, log)
	if p.state != nil {
		plans = p.state
		ops = p.state.Operations(orch)
	}
	p.session = session.New(session.Options{
		Client: orch, Executor: exec, Tokens: tokens, Metrics: m, Health: readiness, Connection: recorder, Logger: log,
		Instance: cfg.Instance(), Version: config.Version, MaxConcurrency: cfg.MaxConcurrency,
		PollWait: cfg.PollWait.Duration, CancelGrace: cfg.CancelGrace.Duration, FinalTimeout: cfg.ShutdownTimeout.Duration, NoStateBackend: noStateBackend, Plans: plans,
		StateOperations: ops, TracerProvider: traces.Provider,
		LimitChanged: func(n int) {
			limiter.SizeFor(n)
			log.Info("Kubernetes client burst sized for the runner's max_concurrency", "max_concurrency", n, "burst", limiter.Burst(), "qps", limiter.QPS())
		},
	})
	log.Info("agent starting", "version", config.Version, "runner", cfg.RunnerID, "org", cfg.OrgID,
		"executor", cfg.Executor, "instance", cfg.Instance(), "key_fingerprint", signer.Fingerprint(), "leader_elect", cfg.LeaderElection.Enabled)
	followKeys(ring, signer, exec, tokens, p.session, m, log)
	return p, nil
}

// newKubeClient connects to the cluster (package kubeclient). The process executor without
// leader election needs no cluster unless it serves Kubernetes state, so it gets nil when no
// kubeconfig was given.
func newKubeClient(cfg *config.Config, limiter *kubeclient.Limiter) (kubeclient.Interface, error) {
	if cfg.Kubeconfig == "" && cfg.Executor == config.ExecutorProcess && !cfg.LeaderElection.Enabled {
		return nil, nil
	}
	return kubeclient.New(kubeclient.Options{Kubeconfig: cfg.Kubeconfig, Limiter: limiter, UserAgent: "outpost-agent/" + config.Version})
}

// newLimiter is the agent's client-side rate limit: --kube-qps, and a burst of --kube-burst that
// grows to two writes per attempt the runner's max_concurrency lets start at once.
func newLimiter(cfg *config.Config) *kubeclient.Limiter {
	return kubeclient.NewLimiter(float32(cfg.KubeClient.QPS), cfg.KubeClient.Burst)
}

// newStateServer returns the state backend, or nil and why not (with the setting that would
// make the agent serve it) when the agent has no cluster to keep states in.
func newStateServer(cfg *config.Config, kube kubeclient.Interface, tokens *jobtoken.Registry, fw *statebackend.Forwarder, reporter statebackend.StateReporter, pods statebackend.AttemptPods, log *slog.Logger) (*statebackend.Server, string) {
	if kube == nil {
		why := fmt.Sprintf("the agent has no Kubernetes client to keep states in; give it one with --kubeconfig (%s), "+
			"or give the runner a state storage of type s3, gcs or azurerm", config.EnvName("kubeconfig"))
		log.Info("the state backend is not served: deployments with kubernetes state storage are refused", "why", why)
		return nil, why
	}
	key, err := cfg.LoadStateEncryptionKey()
	if err != nil {
		// Validate already checked the file; a change since then must not silently store
		// plaintext, so the backend is not served and the log says why.
		why := fmt.Sprintf("the state encryption key is unreadable (%v); fix --state-encryption-key-file (%s; the chart's state.encryption.existingSecret) and restart the agent",
			err, config.EnvName("state-encryption-key-file"))
		log.Error("state encryption key unreadable; the state backend is not served", "err", err)
		return nil, why
	}
	if key != nil {
		log.Info("state chunks are encrypted at rest with AES-256-GCM", "key_file", cfg.State.EncryptionKeyFile)
	}
	return statebackend.NewServer(statebackend.ServerOptions{Kube: kube, Tokens: tokens, Org: cfg.OrgID,
		FallbackNamespace: cfg.State.Namespace, EncryptionKey: key, Forwarder: fw, Reporter: reporter, Pods: pods, Runner: cfg.RunnerID, Logger: log,
		Limits: cfg.State.Limits, KeepVersions: cfg.State.Versions.Keep, MaxVersionAge: cfg.State.Versions.MaxAge.Duration}), ""
}

// newExecutor builds the executor from its section of the configuration, adding the runtime
// parts and the settings it shares with the rest of the agent.
func newExecutor(cfg *config.Config, kube kubeclient.Interface, log *slog.Logger, key ed25519.PrivateKey, stateCA string, traces kubeexec.Tracing) (runnable, error) {
	if cfg.Executor == config.ExecutorProcess {
		o := cfg.Process
		o.APIURL, o.InsecureAllowHTTP, o.StateURL, o.StateCA, o.CLI, o.CABundle, o.Logger = cfg.APIURL, cfg.InsecureAllowHTTP, cfg.State.URL, stateCA, cfg.CLI, cfg.CABundleFile, log
		o.Traces, o.TracerProvider = traces.Settings, traces.Provider
		return process.New(o)
	}
	o := cfg.Jobs.Options
	o.Client, o.Logger, o.OrgID, o.SealKey = kube, log, cfg.OrgID, kubeexec.SealKey(key)
	o.RunnerID, o.APIURL, o.InsecureAllowHTTP, o.StateURL, o.StateCA, o.CLI, o.CancelGrace = cfg.RunnerID, cfg.APIURL, cfg.InsecureAllowHTTP, cfg.State.URL, stateCA, cfg.CLI, cfg.CancelGrace.Duration
	o.Tracing = traces
	return kubeexec.New(o), nil
}
