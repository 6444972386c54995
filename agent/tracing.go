package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/config"
	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
)

// startTracing starts the agent's tracer provider from tracing.endpoint (--trace-endpoint) or
// the standard OTEL_* variables; off (the no-op provider, no exporter) when neither says
// where. The returned func flushes the spans still buffered.
func startTracing(ctx context.Context, cfg *config.Config, log *slog.Logger) (kubeexec.Tracing, func(), error) {
	s, err := tracing.Resolve(cfg.Tracing.Endpoint, os.Getenv)
	if err != nil {
		return kubeexec.Tracing{}, nil, fmt.Errorf("%w (check tracing.endpoint, --trace-endpoint, and the OTEL_* variables)", err)
	}
	tp, err := tracing.Start(ctx, "outpost-agent", s)
	if err != nil {
		return kubeexec.Tracing{}, nil, err
	}
	if s.Enabled() {
		log.Info("tracing: spans of claims, Job creations, job runners and their CLI go to the collector", "traces_to", s.String())
	}
	stop := func() {
		flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(flushCtx); err != nil {
			log.Warn("traces not all exported at shutdown", "err", err)
		}
	}
	return kubeexec.Tracing{Settings: s, Provider: tp}, stop, nil
}
