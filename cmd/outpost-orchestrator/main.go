// Command outpost-orchestrator runs the reference Outpost orchestrator: the admin, agent and job
// API over a bbolt database in a data directory.
//
// Every flag also reads an environment variable (OUTPOST_ORCHESTRATOR_*); a flag given on the
// command line wins. Pass the admin token through the environment rather than argv, so `ps`
// does not show it. Without one, a token is generated on first start and kept in
// <data-dir>/admin-token (mode 0600); its path, never its value, is logged.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator"
	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "outpost-orchestrator:", err)
		os.Exit(1)
	}
}

type options struct {
	listen, dataDir, adminToken, externalURL, logFormat, logCap string
	leaseDuration                                               time.Duration
	printVersion                                                bool
}

func parseFlags(args []string, getenv func(string) string, out io.Writer) (*options, error) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	o := &options{}
	fs := flag.NewFlagSet("outpost-orchestrator", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.listen, "listen", env("OUTPOST_ORCHESTRATOR_LISTEN", "127.0.0.1:8700"), "address to listen on (env OUTPOST_ORCHESTRATOR_LISTEN)")
	fs.StringVar(&o.dataDir, "data-dir", env("OUTPOST_ORCHESTRATOR_DATA_DIR", "./orchestrator-data"), "directory of the database (env OUTPOST_ORCHESTRATOR_DATA_DIR)")
	fs.StringVar(&o.adminToken, "admin-token", env("OUTPOST_ORCHESTRATOR_ADMIN_TOKEN", ""), "admin bearer token; prefer the env var OUTPOST_ORCHESTRATOR_ADMIN_TOKEN; empty = generate one into <data-dir>/admin-token")
	fs.StringVar(&o.externalURL, "external-url", env("OUTPOST_ORCHESTRATOR_EXTERNAL_URL", ""), "base URL agents use to reach this server, e.g. https://outpost.example.com; empty = taken from each request's Host (env OUTPOST_ORCHESTRATOR_EXTERNAL_URL)")
	fs.StringVar(&o.logFormat, "log-format", env("OUTPOST_ORCHESTRATOR_LOG_FORMAT", "text"), "log format: json or text (env OUTPOST_ORCHESTRATOR_LOG_FORMAT)")
	fs.StringVar(&o.logCap, "log-cap", env("OUTPOST_ORCHESTRATOR_LOG_CAP", "16MiB"), "most log bytes kept per deployment, e.g. 16MiB, 512KiB or 1048576 (env OUTPOST_ORCHESTRATOR_LOG_CAP)")
	lease := env("OUTPOST_ORCHESTRATOR_LEASE_DURATION", orchestrator.DefaultLeaseDuration.String())
	d, err := time.ParseDuration(lease)
	if err != nil {
		return nil, fmt.Errorf("OUTPOST_ORCHESTRATOR_LEASE_DURATION=%q is not a duration like 90s", lease)
	}
	fs.DurationVar(&o.leaseDuration, "lease-duration", d, "how long a claim or a poll's renewal keeps a job lease (env OUTPOST_ORCHESTRATOR_LEASE_DURATION)")
	fs.BoolVar(&o.printVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; see --help", fs.Arg(0))
	}
	return o, nil
}

// parseSize reads a byte count with an optional KiB/MiB/GiB suffix.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("--log-cap %q is not a positive size like 16MiB, 512KiB or 1048576", s)
	}
	return n * mult, nil
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

// run starts the orchestrator and serves until ctx ends. ready, when not nil, receives the
// bound address once the server accepts connections.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, ready chan<- string) error {
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
	tok, err := adminToken(o, log)
	if err != nil {
		return err
	}
	srv, err := orchestrator.New(orchestrator.Config{
		DataDir: o.dataDir, AdminToken: tok, ExternalURL: o.externalURL, Logger: log,
		LogCapBytes: logCap, LeaseDuration: o.leaseDuration,
	})
	if err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", o.listen)
	if err != nil {
		_ = srv.Close()
		return listenError(o.listen, err)
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		// Long polls hold a response up to 30 s.
		WriteTimeout: orchestrator.MaxPollWait + time.Minute,
		IdleTimeout:  2 * time.Minute,
		ErrorLog:     slog.NewLogLogger(h, slog.LevelWarn),
	}
	log.Info("orchestrator listening", "version", version.Version, "address", ln.Addr().String(), "data_dir", o.dataDir, "external_url", o.externalURL)
	if ready != nil {
		ready <- ln.Addr().String()
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
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
		log.Warn("connections did not close in time", "error", err.Error())
	}
	if closeErr != nil {
		return closeErr
	}
	log.Info("stopped")
	return nil
}
