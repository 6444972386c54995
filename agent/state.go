package main

import (
	"context"
	"log/slog"
	"net/http"
	"sync"

	"k8s.io/client-go/kubernetes"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/config"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/session"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statebackend"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

// stateBackend serves the Terraform/OpenTofu http state backend for runners whose state storage
// is kubernetes. The namespace of the states comes from each job's claim (the runner's state
// storage), so the backend picks the store per request from the caller's job id; jobs adopted
// without one use --state-namespace. Authorisation is the agent's claims: job id + job token,
// and only the claim's state key.
type stateBackend struct {
	kube     kubernetes.Interface
	claims   *session.Claims
	fallback string
	log      *slog.Logger

	// encryptionKey seals state chunks at rest when set (--state-encryption-key-file).
	encryptionKey []byte
	// forwarder is set when leader election runs: a standby forwards to the leader.
	forwarder *leaderForwarder

	mu       sync.Mutex
	handlers map[string]*statebackend.Handler
}

// stateHandler returns the state backend, or nil when the agent has no cluster to keep states in.
func stateHandler(cfg *config.Config, kube kubernetes.Interface, claims *session.Claims, log *slog.Logger) *stateBackend {
	if kube == nil {
		log.Info("no Kubernetes client; the state backend is not served (set --kubeconfig to serve it)")
		return nil
	}
	key, err := cfg.LoadStateEncryptionKey()
	if err != nil {
		// Validate already checked the file; a change since then must not silently store
		// plaintext, so the backend is not served and the log says why.
		log.Error("state encryption key unreadable; the state backend is not served", "err", err)
		return nil
	}
	if key != nil {
		log.Info("state chunks are encrypted at rest with AES-256-GCM", "key_file", cfg.StateEncryptionKeyFile)
	}
	return &stateBackend{kube: kube, claims: claims, fallback: cfg.StateNamespace, encryptionKey: key, log: log.With("component", "state"), handlers: map[string]*statebackend.Handler{}}
}

func (b *stateBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if b.forwarder != nil && b.forwarder.forward(w, r) {
		return
	}
	user, _, ok := r.BasicAuth()
	ns := ""
	if ok {
		ns = b.claims.StateNamespace(user)
	}
	if ns == "" {
		ns = b.fallback
	}
	if ns == "" {
		// Unknown caller (or no state storage known yet): let the handler of any namespace
		// refuse it with the protocol's 401, or answer 401 here when none exists.
		w.Header().Set("WWW-Authenticate", `Basic realm="outpost-state"`)
		http.Error(w, "unknown job or wrong token", http.StatusUnauthorized)
		return
	}
	h, err := b.handler(ns)
	if err != nil {
		b.log.Error("state store", "namespace", ns, "err", err)
		http.Error(w, "state store unavailable", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

func (b *stateBackend) handler(ns string) (*statebackend.Handler, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.handlers[ns]; h != nil {
		return h, nil
	}
	store, err := statestore.NewChecked(b.kube, ns, statestore.Options{Logger: b.log, EncryptionKey: b.encryptionKey})
	if err != nil {
		return nil, err
	}
	h := statebackend.NewHandler(store, b.claims, b.log)
	// Locks granted by an earlier agent process are renewed again while their jobs live.
	if n, err := h.ResumeRenewals(context.Background()); err != nil {
		b.log.Warn("resume lock renewals", "namespace", ns, "err", err)
	} else if n > 0 {
		b.log.Info("resumed lock renewals", "namespace", ns, "locks", n)
	}
	b.handlers[ns] = h
	return h, nil
}

// Close stops lock renewals; the locks then expire on their own.
func (b *stateBackend) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range b.handlers {
		h.Close()
	}
}
