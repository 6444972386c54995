package statebackend

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/kubeclient"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobtoken"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

// ServerOptions configure a Server.
type ServerOptions struct {
	// Kube is the cluster the states are kept in.
	Kube kubeclient.Interface
	// Tokens authorise every request: deployment id + state credential, and only the state key of the
	// claim.
	Tokens *jobtoken.Registry
	// FallbackNamespace holds the states of attempts whose claim named no namespace (attempts
	// adopted before this agent knew it; --state-namespace), and when set it is the only
	// namespace states are kept in: a claim whose state storage names another is refused (the
	// namespace comes from the orchestrator, which must not reach Secrets beyond the one the
	// cluster owner gave the states). Empty: such attempts are refused, and any namespace the
	// agent's RBAC reaches is served.
	FallbackNamespace string
	// EncryptionKey seals state chunks at rest when set (--state-encryption-key-file).
	EncryptionKey []byte
	// Org scopes the states (statestore.Options.Scope): two organisations' agents can keep
	// states in one namespace.
	Org string
	// Limits bound the work in progress of every namespace together.
	Limits Limits
	// KeepVersions and MaxVersionAge say how many versions of each state are kept
	// (statestore.Options.KeepGenerations, MaxGenerationAge; zero: the store's defaults).
	KeepVersions  int
	MaxVersionAge time.Duration
	// Forwarder is set when leader election runs: a standby forwards to the leader.
	Forwarder *Forwarder
	// Reporter, when set, receives the versions' metadata and lock holders of every state the
	// server serves (never their contents), for the orchestrator.
	Reporter StateReporter
	// Pods, when set, names the job pod of each lock's holder and lets the handlers release the
	// locks whose pod is gone (see AttemptPods), of the locks granted for Runner.
	Pods   AttemptPods
	Runner string
	// Logger gets the server's and its handlers' logs (component=state).
	Logger *slog.Logger
}

// Server serves the Terraform/OpenTofu http state backend for runners whose state storage is of
// type kubernetes. The namespace of the states comes from each attempt's claim (the runner's
// state storage), so the server picks the store per request from the caller's deployment id and
// keeps one Handler per namespace.
type Server struct {
	o   ServerOptions
	log *slog.Logger

	limits *limiter

	mu       sync.Mutex
	handlers map[string]*Handler
}

// NewServer returns the state backend server, watching o.Tokens (see Added, Removed, Cleared).
// Call Close when shutting down.
func NewServer(o ServerOptions) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	log := o.Logger.With("component", "state")
	s := &Server{o: o, log: log, limits: newLimiter(o.Limits), handlers: map[string]*Handler{}}
	o.Tokens.Watch(s)
	return s
}

var _ jobtoken.Watcher = (*Server)(nil)

// Added implements jobtoken.Watcher: the handler of the attempt's state namespace exists from
// now on, so the state locks of attempts adopted after a failover are renewed at once (see
// ResumeRenewals), not only from their job runner's next request.
func (s *Server) Added(ns string) {
	if ns == "" || !s.serves(ns) {
		return
	}
	if _, err := s.handler(ns); err != nil {
		s.log.Error("state store", "namespace", ns, "err", err)
	}
}

// Removed implements jobtoken.Watcher: the locks a finished attempt still holds are released
// now instead of expiring one lock duration later.
func (s *Server) Removed(holder, ns string) {
	s.mu.Lock()
	h := s.handlers[ns]
	s.mu.Unlock()
	if h != nil {
		h.releaseHolder(holder)
	}
}

// Cleared implements jobtoken.Watcher: this replica lost leadership. Its handlers stop renewing
// (the new leader resumes the renewals of the attempts it adopts) and are dropped, so a later
// term starts from the Leases as they are then.
func (s *Server) Cleared() {
	s.mu.Lock()
	hs := s.handlers
	s.handlers = map[string]*Handler{}
	s.mu.Unlock()
	for _, h := range hs {
		h.Close()
	}
}

// ServeHTTP forwards to the leader from a standby, else serves from the caller's namespace.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.o.Forwarder != nil && s.o.Forwarder.forward(w, r) {
		return
	}
	user, _, ok := r.BasicAuth()
	ns := ""
	if ok {
		ns = s.o.Tokens.StateNamespace(user)
	}
	if ns == "" {
		ns = s.o.FallbackNamespace
	}
	if !s.serves(ns) {
		s.log.Warn("state request for a namespace this agent does not keep states in", "namespace", ns, "state_namespace", s.o.FallbackNamespace)
		writeError(w, http.StatusForbidden, "state_namespace", fmt.Sprintf("the runner's state storage names namespace %q, but this agent keeps states only in %q (--state-namespace); "+
			"point the state storage at %q, or install the agent with the state namespace %q", ns, s.o.FallbackNamespace, s.o.FallbackNamespace, ns))
		return
	}
	if ns == "" {
		// Unknown caller (or no state storage known yet): let the handler of any namespace
		// refuse it with the protocol's 401, or answer 401 here when none exists.
		w.Header().Set("WWW-Authenticate", `Basic realm="outpost-state"`)
		http.Error(w, "unknown deployment or wrong token", http.StatusUnauthorized)
		return
	}
	h, err := s.handler(ns)
	if err != nil {
		s.log.Error("state store", "namespace", ns, "err", err)
		http.Error(w, "state store unavailable", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

// serves reports whether states of namespace ns are kept here: any namespace when no
// --state-namespace is set, else that one alone.
func (s *Server) serves(ns string) bool {
	return s.o.FallbackNamespace == "" || ns == s.o.FallbackNamespace
}

func (s *Server) handler(ns string) (*Handler, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.handlers[ns]; h != nil {
		return h, nil
	}
	store, err := statestore.New(s.o.Kube, ns, statestore.Options{Logger: s.log, EncryptionKey: s.o.EncryptionKey, Scope: s.o.Org,
		KeepGenerations: s.o.KeepVersions, MaxGenerationAge: s.o.MaxVersionAge})
	if err != nil {
		return nil, err
	}
	opts := []Option{withLimiter(s.limits)}
	if s.o.Reporter != nil {
		opts = append(opts, WithReporter(s.o.Reporter))
	}
	if s.o.Pods != nil {
		opts = append(opts, WithAttemptPods(s.o.Pods, s.o.Runner))
	}
	h := NewHandler(store, s.o.Tokens, s.log, opts...)
	// Locks granted by an earlier agent process are renewed again while their attempts live.
	if n, err := h.ResumeRenewals(context.Background()); err != nil {
		s.log.Warn("resume lock renewals", "namespace", ns, "err", err)
	} else if n > 0 {
		s.log.Info("resumed lock renewals", "namespace", ns, "locks", n)
	}
	s.handlers[ns] = h
	return h, nil
}

// Close stops lock renewals; the locks then expire on their own.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.handlers {
		h.Close()
	}
}
