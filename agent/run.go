package main

import (
	"context"
	"crypto/tls"
	"errors"
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

	"github.com/spf13/pflag"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/config"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/health"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/keyring"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/leader"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/metrics"
	"github.com/outpost-dev/terraform-provider-outpost/internal/connguard"
	"github.com/outpost-dev/terraform-provider-outpost/internal/gctarget"
)

// keyRetryInterval is how often the key file is read again, and the longest wait before the key
// Secret is read again after the API failed.
const keyRetryInterval = 10 * time.Second

// orchestratorTimeout bounds one request to the orchestrator; it covers the 30 s long poll with
// room.
const orchestratorTimeout = 90 * time.Second

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
	cfg, err := config.Parse(args, os.Getenv, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "outpost-agent: %v\n", err)
		return exitConfigError
	}
	gctarget.Apply(os.Getenv)
	log := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if err := cfg.Validate(); err != nil {
		log.Error("invalid configuration; fix it and restart", "err", err)
		fmt.Fprintf(stderr, "outpost-agent: invalid configuration:\n  %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return exitConfigError
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("agent stopped", "err", err)
		return exitRuntime
	}
	log.Info("agent stopped")
	return exitOK
}

// newLogger builds the logger (JSON, or text with format "text") and routes client-go's klog
// into it, so one log stream with one format comes out of the agent.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if format == config.LogFormatText {
		h = slog.NewTextHandler(w, opts)
	}
	log := slog.New(h)
	slog.SetDefault(log)
	klog.SetSlogLogger(log.With("source", "client-go"))
	return log
}

// run wires the agent's parts together. Health and metrics are served first, so that /readyz
// explains a wait for the private key; everything that needs the key starts once it is read.
func run(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	m := metrics.New(config.Version)
	limiter := newLimiter(cfg)
	kube, err := newKubeClient(cfg, limiter)
	if err != nil {
		return err
	}
	var kubeCheck func(context.Context) error
	if kube != nil {
		kubeCheck = func(ctx context.Context) error {
			_, err := kube.CoreV1().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		}
	}
	readiness := health.NewState(cfg.PollWait.Duration, kubeCheck)
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(gctx)
	g.Go(func() error {
		return serve(gctx, "health", cfg.HealthListen, health.Handler(readiness, m.Registry), healthServerLimits, log, nil)
	})
	ring := keyring.New()
	src := keySource(cfg, kube)
	g.Go(func() error { runKeySource(gctx, src, ring, readiness, log); return nil })
	select {
	case <-ring.Loaded():
	case <-gctx.Done():
		if ctx.Err() != nil {
			log.Info("agent stopped before its private key could be read")
		}
		return wait(ctx, g)
	}
	stls, err := loadStateTLS(gctx, cfg, kube, log)
	if err != nil {
		cancel()
		_ = g.Wait()
		return err
	}
	traces, stopTracing, err := startTracing(ctx, cfg, log)
	if err != nil {
		cancel()
		_ = g.Wait()
		return err
	}
	defer stopTracing()
	p, err := assemble(cfg, log, kube, limiter, readiness, m, ring, stls, traces)
	if err != nil {
		cancel()
		_ = g.Wait()
		return err
	}

	g.Go(func() error { return p.exec.Run(gctx) })
	if p.state != nil {
		defer p.state.Close()
		if cfg.State.Listen != "" {
			g.Go(func() error {
				return serve(gctx, "state backend", cfg.State.Listen, p.state, stateServerLimits, log, nil)
			})
		}
		if stls != nil {
			g.Go(func() error {
				return serve(gctx, "state backend (TLS)", cfg.State.TLS.Listen, p.state, stateServerLimits, log, stls.server)
			})
		}
	}
	if cfg.LeaderElection.Enabled {
		g.Go(func() error {
			return leader.Run(gctx, leader.Options{Client: kube, Namespace: cfg.Namespace, LeaseName: cfg.LeaderElection.LeaseName,
				Identity: cfg.Instance(), Logger: log, OnChange: func(v bool) {
					readiness.SetLeader(v)
					m.Leader.Set(boolFloat(v))
					if v {
						// Until the session has registered the grants of the attempts it takes
						// over, an unknown credential may be one of them: 503, not 401.
						p.tokens.Adopting()
					}
					p.forwarder.SetLeading(v)
					if !v {
						// The attempts are the next leader's: a standby authorises nothing and
						// renews no state lock.
						p.tokens.Clear()
					}
				}, OnNewLeader: p.forwarder.SetLeader}, p.lead)
		})
	} else {
		readiness.SetLeader(true)
		m.Leader.Set(1)
		g.Go(func() error { p.lead(gctx); return nil })
	}
	return wait(ctx, g)
}

// wait waits for the agent's parts; their ending because the agent was stopped is no error.
func wait(ctx context.Context, g *errgroup.Group) error {
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
		return err
	}
	return nil
}

// serverLimits bound what clients can make one of the agent's HTTP servers hold: connections,
// header size, and how long a request may take to arrive, to be answered, and to sit idle. Job
// pods reach both servers (the NetworkPolicy lets them reach the agent), so a slow or greedy
// client must not tie the agent up.
type serverLimits struct {
	connections                   int
	headerBytes                   int
	readHeader, read, write, idle time.Duration
	// guard, when set, shares the connections between clients (package connguard) instead of
	// letting the first comers hold them.
	guard *connguard.Limits
}

var (
	// stateServerLimits let a 64 MiB state upload or download take minutes on a slow link.
	// Job pods run code the cluster owner does not control: a job without a credential keeps
	// no connection beyond its answer, and one that holds connections idle (or never finishes
	// its headers) gives them up to whoever needs one; one job keeps at most 4 open.
	stateServerLimits = serverLimits{connections: 64, headerBytes: 64 << 10,
		readHeader: 10 * time.Second, read: 5 * time.Minute, write: 5 * time.Minute, idle: 90 * time.Second,
		guard: &connguard.Limits{MaxConns: 64, MaxUnauthenticated: 32, MaxPerIdentity: 4}}
	healthServerLimits = serverLimits{connections: 16, headerBytes: 16 << 10,
		readHeader: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second, idle: 60 * time.Second}
)

// serve runs an HTTP server within limits until ctx ends, then gives open requests a few seconds.
// With tlsCfg it serves HTTPS only.
func serve(ctx context.Context, name, addr string, h http.Handler, lim serverLimits, log *slog.Logger, tlsCfg *tls.Config) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: listen on %s: %w", name, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read, WriteTimeout: lim.write,
		IdleTimeout: lim.idle, MaxHeaderBytes: lim.headerBytes}
	if lim.guard != nil {
		connguard.Install(srv)
		ln = connguard.Listen(ln, *lim.guard)
	} else {
		ln = netutil.LimitListener(ln, lim.connections)
	}
	if tlsCfg != nil {
		// Over the guard, which counts the TCP connections (connguard.Install unwraps TLS).
		ln = tls.NewListener(ln, tlsCfg)
	}
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
