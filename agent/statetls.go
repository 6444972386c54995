package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/config"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/kubeclient"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statetls"
)

// stateTLS is the state backend's TLS (--state-tls-secret): the CA the replicas share, the
// server's configuration, and the configuration a standby forwards to the leader with.
type stateTLS struct {
	ca     *statetls.Authority
	server *tls.Config
	client *tls.Config
}

// caPEM is the CA job pods trust the state backend with; empty without TLS.
func (s *stateTLS) caPEM() string {
	if s == nil {
		return ""
	}
	return string(s.ca.PEM)
}

// loadStateTLS reads (or, on the first start, makes) the state backend's CA and issues the
// serving certificate; nil when --state-tls-secret is not set or the agent serves no state.
func loadStateTLS(ctx context.Context, cfg *config.Config, kube kubeclient.Interface, log *slog.Logger) (*stateTLS, error) {
	if cfg.State.TLS.Secret == "" || kube == nil {
		return nil, nil
	}
	ca, err := statetls.Load(ctx, kube.CoreV1().Secrets(cfg.Namespace), cfg.State.TLS.Secret)
	if err != nil {
		return nil, fmt.Errorf("the state backend's TLS (--state-tls-secret %s/%s): %w; the agent needs get and update on that Secret (the chart's Role grants them)",
			cfg.Namespace, cfg.State.TLS.Secret, err)
	}
	server, err := ca.ServerConfig(cfg.State.TLS.Hosts)
	if err != nil {
		return nil, err
	}
	log.Info("the state backend serves TLS", "addr", cfg.State.TLS.Listen, "hosts", cfg.State.TLS.Hosts, "ca_secret", cfg.State.TLS.Secret,
		"plain_http", cfg.State.Listen)
	// The forwarder dials the leader's pod IP; the certificate names the Service, so that is the
	// name it verifies.
	return &stateTLS{ca: ca, server: server, client: ca.ClientConfig(cfg.State.TLS.Hosts[0])}, nil
}
