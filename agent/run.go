package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/config"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/process"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/health"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/leader"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/session"
	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

func version() string { return "outpost-agent " + config.Version }

// runnable is an executor with its watch loop.
type runnable interface {
	executor.Executor
	Run(ctx context.Context) error
}

// runAgent runs the agent until SIGTERM/SIGINT. Bad flags exit with code 2 and one clear message,
// because a restart cannot fix them. An unreadable key file does not exit: the Secret may not be
// mounted yet or is being rotated, and exiting would turn that into a crash loop that hides the
// message. The agent waits for a readable key instead, saying why on /readyz and in its log.
func runAgent(args []string, stderr io.Writer) int {
	cfg, err := config.Parse(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "outpost-agent: %v\n", err)
		return exitConfigError
	}
	log := newLogger(stderr, cfg.LogLevel)
	if err := cfg.Validate(); err != nil {
		log.Error("invalid configuration; fix it and restart", "err", err)
		fmt.Fprintf(stderr, "outpost-agent: invalid configuration:\n  %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return exitConfigError
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	key, err := waitForKey(ctx, cfg, log, keyRetryInterval)
	if err != nil {
		log.Info("agent stopped before its private key could be read")
		return exitOK
	}
	if err := run(ctx, cfg, log, agentauth.NewSigner(cfg.OrgID, cfg.RunnerID, key)); err != nil {
		log.Error("agent stopped", "err", err)
		return exitRuntime
	}
	log.Info("agent stopped")
	return exitOK
}

// newLogger builds the JSON logger and routes client-go's klog into it, so one log stream with
// one format comes out of the agent.
func newLogger(w io.Writer, level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	log := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv}))
	slog.SetDefault(log)
	klog.SetSlogLogger(log.With("source", "client-go"))
	return log
}

func run(ctx context.Context, cfg *config.Config, log *slog.Logger, signer *agentauth.Signer) error {
	metrics := health.NewMetrics(config.Version)
	httpClient, retryAfter, err := orchestratorHTTPClient(cfg)
	if err != nil {
		return err
	}
	client, err := api.NewAgentClient(cfg.APIURL, signer, api.WithHTTPClient(httpClient),
		api.WithRequestHook(metrics.RequestHook), api.WithUserAgent("outpost-agent/"+config.Version))
	if err != nil {
		return err
	}
	kube, err := kubeClient(cfg)
	if err != nil {
		return err
	}
	exec, err := newExecutor(cfg, kube, log)
	if err != nil {
		return err
	}
	var kubeCheck func(context.Context) error
	if kube != nil {
		kubeCheck = func(ctx context.Context) error {
			_, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		}
	}
	state := health.NewState(cfg.PollWait, kubeCheck)
	claims := session.NewClaims()
	sess := session.New(session.Options{
		Client: client, Executor: exec, Claims: claims, Metrics: metrics, Health: state, Logger: log,
		Instance: cfg.Instance(), Version: config.Version, MaxConcurrency: cfg.MaxConcurrency,
		PollWait: cfg.PollWait, CancelGrace: cfg.CancelGrace, FinalTimeout: cfg.ShutdownTimeout,
		RetryAfter: retryAfter,
	})
	log.Info("agent starting", "version", config.Version, "runner", cfg.RunnerID, "org", cfg.OrgID,
		"executor", cfg.Executor, "instance", cfg.Instance(), "key_fingerprint", signer.Fingerprint(), "leader_elect", cfg.LeaderElect)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return exec.Run(gctx) })
	g.Go(func() error { return serve(gctx, "health", cfg.HealthListen, health.Handler(state, metrics), log) })
	var forwarder *leaderForwarder
	if sb := stateHandler(cfg, kube, claims, log); sb != nil {
		defer sb.Close()
		if cfg.LeaderElect {
			forwarder = newLeaderForwarder(kube, cfg.Namespace, cfg.Instance(), cfg.StateListen)
			sb.forwarder = forwarder
		}
		g.Go(func() error { return serve(gctx, "state backend", cfg.StateListen, sb, log) })
	}
	work := func(lctx context.Context) { runSession(lctx, sess, log) }
	if cfg.LeaderElect {
		g.Go(func() error {
			return leader.Run(gctx, leader.Options{Client: kube, Namespace: cfg.Namespace, LeaseName: cfg.LeaseName,
				Identity: cfg.Instance(), Logger: log, OnChange: func(v bool) {
					state.SetLeader(v)
					metrics.Leader.Set(boolFloat(v))
					if forwarder != nil {
						forwarder.SetLeading(v)
					}
				}, OnNewLeader: func(id string) {
					if forwarder != nil {
						forwarder.SetLeader(id)
					}
				}}, work)
		})
	} else {
		state.SetLeader(true)
		metrics.Leader.Set(1)
		g.Go(func() error { work(gctx); return nil })
	}
	err = g.Wait()
	if errors.Is(err, context.Canceled) || ctx.Err() != nil {
		return nil
	}
	return err
}

// runSession keeps a session running while ctx lasts; a session that fails (the executor could
// not list its jobs) is restarted after a pause instead of taking the agent down.
func runSession(ctx context.Context, s *session.Session, log *slog.Logger) {
	back := session.Backoff{Base: time.Second, Max: 30 * time.Second}
	for ctx.Err() == nil {
		if err := s.Run(ctx); err != nil && ctx.Err() == nil {
			wait := back.Next(0)
			log.Error("session failed; restarting it", "err", err, "wait", wait.String())
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

func newExecutor(cfg *config.Config, kube kubernetes.Interface, log *slog.Logger) (runnable, error) {
	if cfg.Executor == config.ExecutorProcess {
		return process.New(process.Options{WorkDir: cfg.WorkDir, AgentBinary: cfg.AgentBinary, APIURL: cfg.APIURL,
			StateURL: cfg.StateURL, CLI: cfg.CLI, CABundle: cfg.CABundleFile, Logger: log})
	}
	return kubeexec.New(kubeexec.Options{Client: kube, Namespace: cfg.JobNamespace, ServiceAccount: cfg.JobServiceAccount, StartupTimeout: cfg.StartupTimeout, Logger: log,
		Pod: kubeexec.PodOptions{RunnerID: cfg.RunnerID, Image: cfg.JobImage, APIURL: cfg.APIURL, StateURL: cfg.StateURL, CLI: cfg.CLI,
			PodLabels: cfg.JobPodLabels, ImagePullSecrets: cfg.JobImagePullSecrets, CASecret: cfg.JobCASecret, CASecretKey: cfg.JobCASecretKey, CancelGrace: cfg.CancelGrace}}), nil
}

// serve runs an HTTP server until ctx ends, then gives open requests a few seconds.
func serve(ctx context.Context, name, addr string, h http.Handler, log *slog.Logger) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: listen on %s: %w", name, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Info("listening", "server", name, "addr", ln.Addr().String())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func boolFloat(v bool) float64 {
	if v {
		return 1
	}
	return 0
}
