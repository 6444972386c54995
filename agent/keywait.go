package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/config"
)

// keyRetryInterval is how often a missing or unreadable key file is read again.
const keyRetryInterval = 10 * time.Second

// waitForKey returns the runner's private key, waiting for the file to become readable. While it
// waits it serves /healthz (the process is fine) and /readyz (not ready, with the reason), so
// `kubectl describe pod` shows what is wrong instead of a CrashLoopBackOff.
func waitForKey(ctx context.Context, cfg *config.Config, log *slog.Logger, every time.Duration) (ed25519.PrivateKey, error) {
	key, err := cfg.LoadPrivateKey()
	if err == nil {
		return key, nil
	}
	log.Error("cannot load the runner's private key; waiting for a readable key file (mount the key Secret, or fix --private-key-file)",
		"err", err, "retry_every", every.String())

	var mu sync.Mutex
	lastErr := err
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		msg := lastErr.Error()
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": false, "checks": map[string]any{"private_key": map[string]any{"ok": false, "message": msg}}})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if ln, lerr := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.HealthListen); lerr == nil {
		go func() { _ = srv.Serve(ln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	} else {
		log.Warn("cannot serve health endpoints while waiting for the key", "listen", cfg.HealthListen, "err", lerr)
	}

	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		key, err := cfg.LoadPrivateKey()
		if err == nil {
			log.Info("private key loaded; starting", "file", cfg.PrivateKeyFile)
			return key, nil
		}
		mu.Lock()
		changed := err.Error() != lastErr.Error()
		lastErr = err
		mu.Unlock()
		if changed {
			log.Error("cannot load the runner's private key", "err", err)
		}
	}
}
