package main

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/config"
	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/health"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobtoken"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/keyring"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/kubeclient"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/metrics"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/session"
	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// The runner's key: where it comes from and how every part follows a rotation.

// followKeys moves everything keyed by the runner's key onto the ring's keys whenever they
// change: the signer (which signs with the newest key the orchestrator has registered), the
// seals of the Jobs and the state credentials (made with the newest key; those made with an
// older one still hold, so attempts started before a rotation run on); and it cuts the session's
// long poll, so the next one tells the orchestrator the new keys at once.
func followKeys(ring *keyring.Ring, signer *agentauth.Signer, exec runnable, tokens *jobtoken.Registry, sess *session.Session, m *metrics.Metrics, log *slog.Logger) {
	apply := func(ks []ed25519.PrivateKey) {
		signer.SetKeys(ks...)
		if e, ok := exec.(interface{ SetSealKeys([][]byte) }); ok {
			e.SetSealKeys(keyring.Derive(ks, kubeexec.SealKey))
		}
		tokens.SetKeys(keyring.Derive(ks, jobtoken.StateCredentialKey))
	}
	apply(ring.Keys())
	ring.Subscribe(func(ks []ed25519.PrivateKey) {
		apply(ks)
		sess.KeysChanged()
		m.KeyChanges.Inc()
		fps := make([]string, len(ks))
		for i, k := range ks {
			fps[i] = keyring.Fingerprint(k)
		}
		log.Info("the runner's key changed; signing with the newest key the orchestrator has registered", "key_fingerprints", fps)
	})
}

// keySource is where the runner's key comes from: its Secret through the Kubernetes API (the
// chart's way: a rotated key arrives within a second), else the key file.
func keySource(cfg *config.Config, kube kubeclient.Interface) keyring.Source {
	if cfg.PrivateKey.ExistingSecret != "" && kube != nil {
		return keyring.SecretSource{Client: kube.CoreV1(), Namespace: cfg.Namespace, Name: cfg.PrivateKey.ExistingSecret, Key: cfg.PrivateKey.SecretKey,
			Backoff: retry.Backoff{Base: time.Second, Max: keyRetryInterval}}
	}
	return keyring.FileSource{Path: cfg.PrivateKey.File, Interval: keyRetryInterval}
}

// runKeySource keeps the ring filled from src until ctx ends. Until the first key is read the
// readiness check "private_key" fails with the reason, which the log repeats; a later failure
// (the Secret deleted, a bad PEM written into it) leaves the keys held in use and is logged.
func runKeySource(ctx context.Context, src keyring.Source, ring *keyring.Ring, readiness *health.State, log *slog.Logger) {
	log = log.With("key_source", src.String())
	src.Run(ctx, ring, func(err error) {
		loaded := ring.Current() != nil
		switch {
		case err == nil:
			readiness.SetCheck("private_key", nil)
			log.Info("runner keys loaded", "key_fingerprints", ring.Fingerprints())
		case !loaded:
			readiness.SetCheck("private_key", err)
			log.Error("cannot load the runner's private key; waiting for it (readiness fails until then)", "err", err, "retry_every", keyRetryInterval.String())
		default:
			log.Error("cannot load the runner's private key again; going on with the keys held", "err", err, "key_fingerprints", ring.Fingerprints())
		}
	})
}
