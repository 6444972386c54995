// Command outpost-orchestrator runs the reference Outpost orchestrator: the admin, agent and job
// API over a bbolt database in a data directory, or over PostgreSQL (--database-url) for several
// replicas. `outpost-orchestrator token` manages the organisation tokens of a running one
// (token.go); `outpost-orchestrator migrate-store` copies a data directory into PostgreSQL
// (migrate.go).
//
// Every flag also reads an environment variable (OUTPOST_ORCHESTRATOR_*); a flag given on the
// command line wins. The admin token is the bootstrap token: it reaches every organisation and
// alone manages organisation tokens. Pass it through the environment rather than argv, so `ps`
// does not show it. Without one, a token is generated on first start and kept in
// <data-dir>/admin-token (mode 0600); its path, never its value, is logged.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/outpost-dev/terraform-provider-outpost/internal/gctarget"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/engines"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

func main() {
	gctarget.Apply(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "outpost-orchestrator:", err)
		os.Exit(1)
	}
}

// adminToken returns the configured token, or the one kept in the data directory, generating
// it on first start. Only the file's path is ever logged.
func adminToken(o *options, log *slog.Logger) (string, error) {
	if o.adminToken != "" {
		return o.adminToken, nil
	}
	path := filepath.Join(o.dataDir, "admin-token")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		log.Info("using the admin token kept in the data directory", "file", path)
		return strings.TrimSpace(string(b)), nil
	}
	if err := os.MkdirAll(o.dataDir, 0o700); err != nil {
		return "", fmt.Errorf("data directory %s cannot be created: %w", o.dataDir, err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate admin token: %w", err)
	}
	tok := hex.EncodeToString(b)
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("data directory %s is not writable (writing the admin token): %w", o.dataDir, err)
	}
	log.Info("generated an admin token; read it from the file", "file", path)
	return tok, nil
}

func listenError(addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		_, port, _ := net.SplitHostPort(addr)
		return fmt.Errorf("port %s is already in use (%s): another orchestrator or program listens there; stop it or pick another address with --listen or OUTPOST_ORCHESTRATOR_LISTEN, e.g. --listen 127.0.0.1:0 for any free port", port, addr)
	}
	if errors.Is(err, syscall.EACCES) {
		return fmt.Errorf("not allowed to listen on %s (ports below 1024 need privileges); pick a higher port with --listen: %w", addr, err)
	}
	return fmt.Errorf("listen on %s: %w (check --listen / OUTPOST_ORCHESTRATOR_LISTEN)", addr, err)
}

// run runs the command: `token …` manages organisation tokens, anything else serves.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, ready chan<- string) error {
	if len(args) > 0 && args[0] == "token" {
		return runToken(ctx, args[1:], getenv, os.Stdout, stderr)
	}
	if len(args) > 0 && args[0] == "migrate-store" {
		return runMigrateStore(ctx, args[1:], getenv, stderr)
	}
	return serve(ctx, args, getenv, stderr, ready)
}

// serve starts the orchestrator and serves until ctx ends. ready, when not nil, receives the
// bound address once the server accepts connections.
func serve(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, ready chan<- string) error {
	o, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	if o.printVersion {
		fmt.Println("outpost-orchestrator " + version.String())
		return nil
	}
	var h slog.Handler
	switch o.logFormat {
	case "json":
		h = slog.NewJSONHandler(stderr, nil)
	case "text":
		h = slog.NewTextHandler(stderr, nil)
	default:
		return fmt.Errorf("--log-format %q: use json or text", o.logFormat)
	}
	log := slog.New(h)
	logCap, err := parseSize(o.logCap)
	if err != nil {
		return err
	}
	if o.quotas.LogBytes, err = parseSize(o.maxLogBytes); err != nil {
		return fmt.Errorf("--max-log-bytes-per-org: %w", err)
	}
	tok, err := adminToken(o, log)
	if err != nil {
		return err
	}
	var certs *orchestrator.CertificateFiles
	if o.tlsCertFile != "" {
		if certs, err = orchestrator.LoadCertificateFiles(o.tlsCertFile, o.tlsKeyFile, log); err != nil {
			return fmt.Errorf("%w (check --tls-cert-file and --tls-key-file)", err)
		}
	}
	traces, err := tracing.Resolve(o.traceEndpoint, getenv)
	if err != nil {
		return fmt.Errorf("%w (check --trace-endpoint and the OTEL_* variables)", err)
	}
	tp, err := tracing.Start(ctx, "outpost-orchestrator", traces)
	if err != nil {
		return err
	}
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(flushCtx); err != nil {
			log.Warn("traces not all exported at shutdown", "err", err)
		}
	}()
	eng, err := engines.Open(ctx, engines.Options{DataDir: o.dataDir, DatabaseURL: o.databaseURL, InsecureTLS: o.databaseInsecureTLS, Logger: log})
	if err != nil {
		return err
	}
	srv, err := orchestrator.New(orchestrator.Config{
		Engine: eng, DataDir: o.dataDir, SigningSecretFile: o.signingSecretFile, AdminToken: tok, ExternalURL: o.externalURL, Logger: log,
		LogCapBytes: logCap, LeaseDuration: o.leaseDuration, Retention: o.retention, Quotas: o.quotas,
		TracerProvider: tp,
	})
	if err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", o.listen)
	if err != nil {
		_ = srv.Close()
		return listenError(o.listen, err)
	}
	hs := srv.HTTPServer(o.limits, slog.NewLogLogger(h, slog.LevelWarn))
	if certs != nil {
		hs.TLSConfig = certs.TLSConfig()
	}
	store := []any{"data_dir", o.dataDir}
	if o.databaseURL != "" {
		store = []any{"store", "postgresql"} // never the URL: it can hold a password
	}
	log.Info("orchestrator listening", append(store, "version", version.Version, "address", ln.Addr().String(), "tls", hs.TLSConfig != nil, "external_url", o.externalURL,
		"max_connections", o.limits.MaxConnections, "quotas", o.quotas.String(), "source_retention", retentionValue{&o.retention.Sources}.String(),
		"log_retention", retentionValue{&o.retention.Logs}.String(), "deployment_retention", retentionValue{&o.retention.Deployments}.String(),
		"traces_to", traces.String())...)
	if ready != nil {
		ready <- ln.Addr().String()
	}
	serveErr := make(chan error, 1)
	go func() {
		if hs.TLSConfig != nil {
			// The certificate comes from TLSConfig.GetCertificate, so it is reloaded on change.
			serveErr <- hs.ServeTLS(orchestrator.Listener(ln, o.limits), "", "")
			return
		}
		serveErr <- hs.Serve(orchestrator.Listener(ln, o.limits))
	}()
	select {
	case err := <-serveErr:
		_ = srv.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- hs.Shutdown(shutdownCtx) }()
	// Close answers the waiting long polls, so Shutdown does not wait out their 30 s.
	closeErr := srv.Close()
	if err := <-shut; err != nil {
		log.Warn("connections did not close in time", "err", err)
	}
	if closeErr != nil {
		return closeErr
	}
	log.Info("stopped")
	return nil
}
