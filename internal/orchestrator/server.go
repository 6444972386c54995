// Package orchestrator is the reference Outpost orchestrator's HTTP face: the whole HTTP API
// (admin, agent and job sides: routes, handlers, authentication, limits, TLS, metrics) and the
// sweeper, over the rules of package store on a storage engine — a bbolt database in a data
// directory, or PostgreSQL for several replicas — so a restart loses nothing: not the queue, not
// the leases and fencing numbers, not the agent token ids already seen.
//
// It exists so that the provider, the agent and the end-to-end tests run against a real server
// rather than a mock, and so a small team can self-host it. Open an engine with
// store/engines.Open, start a server on it with New and serve Handler; package
// orchestratortest starts one on a loopback port for tests.
package orchestrator

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

// Defaults of Config.
const (
	DefaultLeaseDuration = 90 * time.Second
	DefaultLogCapBytes   = 16 << 20
	DefaultJobTokenGrace = 10 * time.Minute
	DefaultSweepInterval = 3 * time.Second
	// MaxPollWait is the longest a long poll is held open.
	MaxPollWait = 30 * time.Second
	// ConnectedWindow is how recent an agent's last authenticated request must be for its
	// runner to count as connected.
	ConnectedWindow = 60 * time.Second
	// MinAdminTokenLength keeps guessable admin tokens out.
	MinAdminTokenLength = 16
	// DefaultPurgeBatch is how many keys one purge transaction deletes at most.
	DefaultPurgeBatch = 1000
)

// Config configures a Server. Zero values take the defaults above.
type Config struct {
	// Engine is where the records live: bbolt in a data directory, or PostgreSQL for several
	// replicas (store/engines.Open opens the one a configuration names). The server closes it.
	Engine store.Engine
	// DataDir holds the signing secret file unless SigningSecretFile names another (and the
	// engine keeps no secret of its own).
	DataDir string
	// SigningSecretFile holds the secret that signs job tokens, apart from the database; empty
	// means SigningSecretFile in DataDir. It is created on first start unless it exists (a
	// mounted Secret, say).
	SigningSecretFile string
	// AdminToken is the bearer token of the admin API (at least MinAdminTokenLength characters).
	AdminToken string
	// ExternalURL is the base URL agents address (scheme://host[:port]); agent tokens are bound
	// to it. Empty derives it per request from the Host header and TLS, which suits a server
	// reached directly; set it behind a proxy that rewrites Host or terminates TLS.
	ExternalURL string
	// Logger receives access and error logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock of leases, token checks and timestamps; tests move it.
	Now func() time.Time
	// LeaseDuration is how long a claim or a poll's renewal keeps a job lease.
	LeaseDuration time.Duration
	// LogCapBytes is the most log bytes kept per deployment; beyond it the log ends with an
	// explicit truncation marker.
	LogCapBytes int64
	// JobTokenGrace is how long a job token stays valid after its deployment ended.
	JobTokenGrace time.Duration
	// SweepInterval is how often expired leases and token ids are swept and retention is
	// applied; negative disables the background sweeper (tests then call Sweep).
	SweepInterval time.Duration
	// Retention says how long ended deployments, their sources, logs and events are kept.
	Retention store.Retention
	// Quotas bound what one organisation can store.
	Quotas store.Quotas
	// PurgeBatch is the most keys one purge transaction deletes (DefaultPurgeBatch when zero),
	// so a large purge never holds the database's write lock for long.
	PurgeBatch int
	// Version is the orchestrator's release, told to agents and named when a poll is refused
	// (version.Version when empty).
	Version string
	// AgentProtocols is the range of agent protocol versions served (api.AgentProtocols() when
	// zero); tests narrow it to stand for another release.
	AgentProtocols api.ProtocolRange
	// TracerProvider makes the enqueue's span, the root of each deployment's trace (package
	// internal/tracing); nil traces nothing.
	TracerProvider trace.TracerProvider
}

// Server is a running orchestrator. It is safe for concurrent use.
type Server struct {
	cfg      Config
	tracer   trace.Tracer
	log      *slog.Logger
	store    *store.Store
	metrics  *metrics
	notify   *store.Notifier
	verifier *agentauth.Verifier
	mux      *http.ServeMux
	routes   []route
	external *url.URL
	admin    [sha256.Size]byte
	refusals refusalNotes

	mu        sync.Mutex
	closed    bool
	inFlight  sync.WaitGroup
	closing   chan struct{}
	sweepStop chan struct{}
	sweepDone chan struct{}
}

// New returns a server over cfg.Engine whose background sweeper is running. The server owns the
// engine from then on, also when New fails: Close (or the failure) closes it.
func New(cfg Config) (_ *Server, err error) {
	if cfg.Engine == nil {
		return nil, errors.New("no storage engine: open one (bbolt or PostgreSQL) and set Config.Engine")
	}
	defer func() {
		if err != nil {
			_ = cfg.Engine.Close()
		}
	}()
	eng := cfg.Engine
	if len(cfg.AdminToken) < MinAdminTokenLength {
		return nil, fmt.Errorf("admin token must be at least %d characters; use a long random value", MinAdminTokenLength)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.Version == "" {
		cfg.Version = version.Version
	}
	cfg.TracerProvider = tracing.OrOff(cfg.TracerProvider)
	if cfg.AgentProtocols == (api.ProtocolRange{}) {
		cfg.AgentProtocols = api.AgentProtocols()
	}
	if !cfg.AgentProtocols.Valid() {
		return nil, fmt.Errorf("agent protocol range %+v names no version", cfg.AgentProtocols)
	}
	if cfg.LogCapBytes <= 0 {
		cfg.LogCapBytes = DefaultLogCapBytes
	}
	if cfg.JobTokenGrace <= 0 {
		cfg.JobTokenGrace = DefaultJobTokenGrace
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	if cfg.PurgeBatch <= 0 {
		cfg.PurgeBatch = DefaultPurgeBatch
	}
	cfg.Retention = cfg.Retention.WithDefaults()
	if l := cfg.Retention.Logs; l >= 0 && l < cfg.JobTokenGrace {
		return nil, fmt.Errorf("log retention %s is shorter than the %s a job token stays valid after the end; keep logs at least that long", l, cfg.JobTokenGrace)
	}
	var external *url.URL
	if cfg.ExternalURL != "" {
		u, err := url.Parse(strings.TrimRight(cfg.ExternalURL, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" {
			return nil, fmt.Errorf("external URL %q must be scheme://host[:port] with scheme http or https and no path", cfg.ExternalURL)
		}
		external = u
	}
	// The secret signing job tokens lives apart from the database in a file, except on
	// PostgreSQL without --signing-secret-file: every replica must share it, and the database
	// is what they share (it is then as sensitive as a data directory; see SECURITY.md).
	legacy, _ := eng.(store.LegacySecrets) // an older bbolt database may still hold the secret
	var secret []byte
	switch {
	case cfg.SigningSecretFile != "":
		secret, err = store.OpenSigningSecret(cfg.SigningSecretFile, legacy, cfg.Logger)
	case eng.Secret() != nil:
		secret = eng.Secret()
	default:
		secret, err = store.OpenSigningSecret(filepath.Join(cfg.DataDir, store.SigningSecretFile), legacy, cfg.Logger)
	}
	if err != nil {
		return nil, err
	}
	st := store.New(eng, store.Options{Secret: secret, Now: cfg.Now, LogCap: cfg.LogCapBytes, Quotas: cfg.Quotas})
	s := &Server{
		cfg: cfg, log: cfg.Logger, store: st, notify: store.NewNotifier(), external: external,
		admin: sha256.Sum256([]byte(cfg.AdminToken)), closing: make(chan struct{}),
		tracer: cfg.TracerProvider.Tracer("github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator"),
	}
	s.notify.Publish = func(runner string) { eng.Wake(context.Background(), runner) }
	if l, ok := eng.(store.WakeListener); ok {
		l.Listen(s.notify)
	}
	s.metrics = newMetrics(st)
	s.verifier = &agentauth.Verifier{Keys: st.RunnerKeys, Replay: st.ReplayCache(), Now: cfg.Now}
	s.mux = http.NewServeMux()
	for _, rt := range s.routeTable() {
		s.routes = append(s.routes, rt)
		s.mux.Handle(rt.pattern, s.wrap(rt))
	}
	if err := s.mountConsole(); err != nil {
		return nil, err
	}
	if cfg.SweepInterval > 0 {
		s.sweepStop, s.sweepDone = make(chan struct{}), make(chan struct{})
		go s.sweepLoop(cfg.SweepInterval, s.sweepStop, s.sweepDone)
	}
	return s, nil
}

// Handler is the HTTP handler of the whole API, /healthz and /metrics included, and of the web
// console (package console) under /.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Close stops the sweeper, answers waiting long polls, waits (up to 10 s) for requests in
// flight and closes the database. Requests arriving after Close get 503.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	if s.sweepStop != nil {
		close(s.sweepStop)
		<-s.sweepDone
	}
	done := make(chan struct{})
	go func() { s.inFlight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.log.Warn("closing with requests still in flight")
	}
	if err := s.store.Close(); err != nil {
		return fmt.Errorf("close database: %w", err)
	}
	return nil
}

// enter registers a request in flight; false once the server is closing.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.inFlight.Add(1)
	return true
}

// requestURL is the absolute URL the agent addressed, which its token must name.
func (s *Server) requestURL(r *http.Request) string {
	if s.external != nil {
		return s.external.String() + r.URL.RequestURI()
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + r.URL.RequestURI()
}
