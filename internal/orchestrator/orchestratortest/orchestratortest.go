// Package orchestratortest starts a real reference orchestrator for tests: real HTTP on a
// loopback port, a real bbolt database in a temporary directory. Tests of the client, the
// provider and the agent use it instead of mocks.
//
//	inst := orchestratortest.Start(t)
//	admin, _ := client.NewAdminClient(inst.URL, "acme", inst.AdminToken)
//	...
//	inst.Restart(t) // same data, same address: clients keep working
//
// The server is closed when the test ends.
package orchestratortest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/engines"
)

// Option adjusts the server's configuration before it starts.
type Option func(*settings)

// settings are what the options adjust: the server's configuration and how it is served.
type settings struct {
	cfg         orchestrator.Config
	limits      *orchestrator.HTTPLimits
	databaseURL string
}

// WithHTTPLimits serves the orchestrator as the command does (Server.HTTPServer within l:
// connection limits, timeouts), not from a bare httptest server.
func WithHTTPLimits(l orchestrator.HTTPLimits) Option {
	return func(s *settings) { s.limits = &l }
}

// WithClock replaces the server's clock (leases, token expiry, timestamps), so a test can move
// time instead of waiting. Call Instance.Server.Sweep after moving it to settle expired leases
// at once.
func WithClock(now func() time.Time) Option {
	return func(s *settings) { s.cfg.Now = now }
}

// WithRelease makes the server stand for another release: its version and the agent protocol
// versions it speaks.
func WithRelease(version string, protocols api.ProtocolRange) Option {
	return func(s *settings) { s.cfg.Version, s.cfg.AgentProtocols = version, protocols }
}

// WithData starts the server on an existing data directory with its admin token: another
// orchestrator's (an upgrade test starts this build's where the previous build's ran).
func WithData(dataDir, adminToken string) Option {
	return func(s *settings) { s.cfg.DataDir, s.cfg.AdminToken = dataDir, adminToken }
}

// WithQuotas replaces the per-organisation quotas (a benchmark that fills thousands of
// deployments needs a larger queue).
func WithQuotas(q store.Quotas) Option {
	return func(s *settings) { s.cfg.Quotas = q }
}

// WithDatabase keeps the records in the PostgreSQL database at url instead of the data
// directory; instances started with the same url and admin token (WithData) are replicas of
// one orchestrator.
func WithDatabase(url string) Option {
	return func(s *settings) { s.databaseURL = url }
}

// WithTracerProvider traces the server's enqueues with tp (the root span of each deployment's
// trace).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *settings) { s.cfg.TracerProvider = tp }
}

// Instance is a running orchestrator.
type Instance struct {
	// URL is the base URL, e.g. http://127.0.0.1:41234; it stays the same across Restart.
	URL string
	// AdminToken is the bearer token of the admin API.
	AdminToken string
	// DataDir is the server's data directory (a t.TempDir).
	DataDir string
	// Server is the running server; it changes on Restart.
	Server *orchestrator.Server

	mu     sync.Mutex
	cfg    orchestrator.Config
	limits *orchestrator.HTTPLimits
	http   *httptest.Server
	addr   string
	dbURL  string
}

// Start starts an orchestrator on a free loopback port with a fresh data directory. The
// background sweeper runs every 200 ms, so expired leases settle quickly in tests that use
// short leases.
func Start(t testing.TB, opts ...Option) *Instance {
	t.Helper()
	return StartOn(t, "127.0.0.1:0", opts...)
}

// StartOn is Start listening on addr, e.g. net.JoinHostPort(cluster.HostIP, "0") so that pods of
// the test bed's real node (the agent, job runners) reach the orchestrator.
func StartOn(t testing.TB, addr string, opts ...Option) *Instance {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("orchestratortest: admin token: %v", err)
	}
	set := settings{cfg: orchestrator.Config{
		DataDir:       t.TempDir(),
		AdminToken:    "test-admin-" + hex.EncodeToString(b),
		SweepInterval: 200 * time.Millisecond,
	}}
	for _, o := range opts {
		o(&set)
	}
	cfg := set.cfg
	inst := &Instance{AdminToken: cfg.AdminToken, DataDir: cfg.DataDir, cfg: cfg, limits: set.limits, dbURL: set.databaseURL}
	inst.start(t, addr)
	t.Cleanup(func() { inst.stop(t) })
	return inst
}

func (i *Instance) start(t testing.TB, addr string) {
	t.Helper()
	eng, err := engines.Open(t.Context(), engines.Options{DataDir: i.cfg.DataDir, DatabaseURL: i.dbURL, Logger: i.cfg.Logger})
	if err != nil {
		t.Fatalf("orchestratortest: open the database: %v", err)
	}
	cfg := i.cfg
	cfg.Engine = eng
	srv, err := orchestrator.New(cfg)
	if err != nil {
		t.Fatalf("orchestratortest: start orchestrator: %v", err)
	}
	var ln net.Listener
	// The old listener's port may take a moment to be free again after a restart.
	for deadline := time.Now().Add(5 * time.Second); ; {
		ln, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		_ = srv.Close()
		t.Fatalf("orchestratortest: listen on %s: %v", addr, err)
	}
	hs := httptest.NewUnstartedServer(srv.Handler())
	_ = hs.Listener.Close()
	hs.Listener = ln
	if i.limits != nil {
		hs.Config = srv.HTTPServer(*i.limits, nil)
		hs.Listener = orchestrator.Listener(ln, *i.limits)
	}
	hs.Start()
	i.mu.Lock()
	i.Server, i.http, i.addr, i.URL = srv, hs, ln.Addr().String(), hs.URL
	i.mu.Unlock()
}

func (i *Instance) stop(t testing.TB) {
	t.Helper()
	i.mu.Lock()
	srv, hs := i.Server, i.http
	i.Server, i.http = nil, nil
	i.mu.Unlock()
	if srv == nil {
		return
	}
	// Close first: it answers waiting long polls, so closing the HTTP server (which waits for
	// the answers to be written) does not wait out their 30 s.
	if err := srv.Close(); err != nil {
		t.Errorf("orchestratortest: close orchestrator: %v", err)
	}
	hs.Close()
}

// Restart closes the server, as a crash-free process restart would, and starts a new one on the
// same data directory and the same address, so clients holding URL keep working. Requests in
// flight during the restart fail (or are retried by the client).
func (i *Instance) Restart(t testing.TB) {
	t.Helper()
	i.mu.Lock()
	addr := i.addr
	i.mu.Unlock()
	i.stop(t)
	i.start(t, addr)
}

// Sweep settles expired leases now (see orchestrator.Server.Sweep).
func (i *Instance) Sweep(t testing.TB) {
	t.Helper()
	i.mu.Lock()
	srv := i.Server
	i.mu.Unlock()
	if err := srv.Sweep(context.Background()); err != nil {
		t.Fatalf("orchestratortest: sweep: %v", err)
	}
}
