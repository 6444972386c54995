// Package statebackend serves Terraform/OpenTofu state over the CLIs' built-in `http` backend
// protocol, on top of package statestore (Secrets + Leases). The agent runs it in the cluster so
// that job pods of either CLI reach their state over HTTP with a state credential and need no
// Kubernetes permissions at all (the stock `kubernetes` backend needs list/get/update on every
// Secret of the namespace).
//
// Protocol (what Terraform 1.11's and OpenTofu's internal/backend/remote-state/http/client.go
// send and accept), on /v1/states/{key} where {key} is the URL-path-escaped state key:
//
//	GET     200 + state body; 204 when there is no state (both CLIs treat 204 and 404 as
//	        "no state"; 404 is kept for unknown routes)
//	POST    write (PUT accepted too); `?ID=<lock id>` when the CLI holds the lock. 200 on
//	        success; 400 not a state; 409 lock lost or concurrent write; 413 too large;
//	        423 locked by someone else (body: the holder's lock info)
//	DELETE  200 (also when absent); 423 while locked
//	LOCK    body = lock info JSON; 200 on success; 423 + the current holder's lock info JSON
//	        on conflict (the CLIs parse it and print "already locked: ID=…" with the info)
//	UNLOCK  body = lock info JSON with the ID: 200 when released (or not locked); 409 +
//	        current lock info when another ID or another holder holds it. An empty body (what
//	        Terraform's `force-unlock` sends) is refused with 403: job runners never
//	        force-unlock; an operator runs `outpost-agent state force-unlock` in the cluster.
//	        OpenTofu's force-unlock sends {"ID": <the id given>}, which only unlocks a lock of
//	        the caller's own attempt.
//
// Least privilege: the Authorizer says who the caller is (the lock holder, one attempt) and
// whether it may only read (a plan). A plan reads its state and nothing else: its LOCK and
// UNLOCK are answered 200 and take nothing (a plan never writes, and the state it reads is one
// whole generation, so a lock would protect nothing; it would only let untrusted plan code hold
// the applies off), and POST, PUT and DELETE answer it 403. Locks are bound to their holder: a
// write or an unlock with another holder's lock ID is refused, and a 409 or 423 answer shows
// other holders only what the agent itself knows of the lock (its holder, operation and time),
// never the lock ID or the free text (Who, Info, Path) the holder's CLI sent.
//
// Authentication is HTTP basic auth (the CLIs' username/password, or TF_HTTP_USERNAME /
// TF_HTTP_PASSWORD), checked per request by an Authorizer that also decides which state keys
// the caller may touch and names the lock holder.
//
// Lock lifetime: a state lock (a Lease) expires unless renewed, and the CLIs never renew, so the
// Handler renews every lock it granted while its holder is alive, and stops when the holder
// unlocks, when the Authorizer (implementing HolderLiveness) reports the holder gone, or when the
// Handler is closed. A lock whose holder died therefore expires one lock duration later and the
// next run proceeds; force-unlock works at any time. See HolderLiveness.
package statebackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobtoken"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/accesslog"
	"github.com/outpost-dev/terraform-provider-outpost/internal/connguard"
)

// PathPrefix is where the handler serves states: PathPrefix + url.PathEscape(key).
const PathPrefix = "/v1/states/"

// Defaults of the handler options.
const (
	DefaultMaxBodyBytes = 64 << 20
	DefaultMaxLockHold  = 12 * time.Hour
	maxLockBodyBytes    = 64 << 10
)

// Authorizer authenticates a request and authorises it for one state key. The agent implements it
// with state credentials (jobtoken.Registry): username = deployment id, password = the attempt's
// state credential (never its job token), and a job runner may only touch the state key of its own
// claim. The returned access names the lock holder and the writer in the state history
// ("job/<id>/<attempt>") and says whether the caller may only read. Its errors select the HTTP status:
// jobtoken.ErrUnauthenticated → 401 (CLI: "requires auth"), jobtoken.ErrForbidden → 403 (CLI:
// "invalid auth"); any other error → 503, because the authorizer could not decide, so the CLI
// retries.
type Authorizer interface {
	Authorize(ctx context.Context, username, password, stateKey string) (jobtoken.Access, error)
}

// HolderLiveness is optionally implemented by the Authorizer. When it is, the handler asks it
// before every lock renewal and stops renewing the state locks of a holder reported gone (its
// attempt finished, failed, was canceled or lost its job lease), so the lock expires one lock
// duration later. Without it, locks are renewed until they are unlocked or held for
// DefaultMaxLockHold.
type HolderLiveness interface {
	HolderAlive(ctx context.Context, holder string) (bool, error)
}

// Option configures a Handler beyond its defaults (tests shorten the renewal interval and the
// body limit).
type Option func(*Handler)

// withLimiter shares one limiter between the handlers of a Server.
func withLimiter(l *limiter) Option { return func(h *Handler) { h.limits = l } }

// Handler is the http.Handler of the state backend.
type Handler struct {
	store      *statestore.Store
	authz      Authorizer
	liveness   HolderLiveness
	log        *slog.Logger
	limits     *limiter
	renewEvery time.Duration
	reporter   StateReporter
	reports    *reports // nil without a reporter
	pods       AttemptPods
	runner     string // the runner whose locks the sweep may release (WithAttemptPods)
	sweepEvery time.Duration

	baseCtx  context.Context
	stop     context.CancelFunc
	mu       sync.Mutex
	renewals map[string]*renewal // by state key
	wg       sync.WaitGroup
}

// NewHandler returns the state backend over store. Call Close when shutting down to stop the
// lock renewals (the locks then expire on their own).
func NewHandler(store *statestore.Store, authz Authorizer, logger *slog.Logger, opts ...Option) *Handler {
	if logger == nil {
		logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Handler{
		store: store, authz: authz, log: logger,
		limits: newLimiter(Limits{}), renewEvery: store.LockDuration() / 3, sweepEvery: LockSweepEvery,
		baseCtx: ctx, stop: cancel, renewals: map[string]*renewal{},
	}
	if l, ok := authz.(HolderLiveness); ok {
		h.liveness = l
	}
	for _, o := range opts {
		o(h)
	}
	if h.pods != nil {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.runLockSweep(ctx)
		}()
	}
	if h.reporter != nil {
		h.reports = newReports()
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.runReports(ctx)
		}()
	}
	return h
}

// Close stops every lock renewal and waits for the renewal goroutines to end. Locks are not
// released: a new agent (or the same one after a restart, see ResumeRenewals) can keep renewing
// them; otherwise they expire.
func (h *Handler) Close() {
	h.mu.Lock()
	h.stop()
	h.mu.Unlock()
	h.wg.Wait()
}

// ServeHTTP implements the http backend protocol (see the package documentation).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &accesslog.Recorder{ResponseWriter: w}
	var key, holder string
	defer func() {
		h.log.LogAttrs(r.Context(), slog.LevelDebug, "state request", slog.String("method", r.Method),
			slog.String("state_key", key), slog.String("holder", holder), slog.Int("status", rw.Status),
			slog.Int64("bytes_out", rw.Bytes), slog.Duration("duration", time.Since(start)))
		if r.Method != http.MethodGet && r.Method != http.MethodHead && rw.Status/100 == 2 && !strings.HasPrefix(r.URL.EscapedPath(), PlanPathPrefix) {
			h.stateChanged(key) // a write, a delete, a lock or an unlock: the orchestrator hears of it
		}
	}()
	escaped := r.URL.EscapedPath()
	prefix := PathPrefix
	if strings.HasPrefix(escaped, PlanPathPrefix) {
		prefix = PlanPathPrefix
	}
	if !strings.HasPrefix(escaped, prefix) {
		writeError(rw, http.StatusNotFound, "not_found", "no such route; states live under "+PathPrefix+"{url-escaped key}")
		return
	}
	k, err := url.PathUnescape(strings.TrimPrefix(escaped, prefix))
	if err == nil {
		err = statestore.ValidateKey(k)
	}
	if err != nil {
		writeError(rw, http.StatusBadRequest, "invalid_key", err.Error())
		return
	}
	key = k

	user, pass, ok := r.BasicAuth()
	if !ok {
		rw.Header().Set("WWW-Authenticate", `Basic realm="outpost-state", charset="UTF-8"`)
		writeError(rw, http.StatusUnauthorized, "unauthenticated", "basic authentication required (the backend's username/password or TF_HTTP_USERNAME/TF_HTTP_PASSWORD)")
		return
	}
	access, err := h.authz.Authorize(r.Context(), user, pass, key)
	holder = access.Holder
	switch {
	case errors.Is(err, jobtoken.ErrUnauthenticated):
		rw.Header().Set("WWW-Authenticate", `Basic realm="outpost-state", charset="UTF-8"`)
		writeError(rw, http.StatusUnauthorized, "unauthenticated", "invalid credentials")
		return
	case errors.Is(err, jobtoken.ErrForbidden):
		writeError(rw, http.StatusForbidden, "forbidden", fmt.Sprintf("not allowed to access state %q", key))
		return
	case errors.Is(err, jobtoken.ErrAdopting):
		rw.Header().Set("Retry-After", "1")
		writeError(rw, http.StatusServiceUnavailable, "taking_over", err.Error())
		return
	case err != nil:
		h.log.LogAttrs(r.Context(), slog.LevelError, "state authorization failed", slog.String("state_key", key), slog.Any("err", err))
		writeError(rw, http.StatusServiceUnavailable, "authorizer_unavailable", "could not check credentials; retry")
		return
	}
	// The connection is this job's from now on: a refused one is closed after its answer, so no
	// client without a credential keeps a connection (package connguard).
	connguard.Authenticated(r.Context(), holder)

	release, why := h.limits.admit(r.Context(), holder)
	switch why {
	case jobBusy:
		rw.Header().Set("Retry-After", "1")
		writeError(rw, http.StatusTooManyRequests, "too_many_requests", fmt.Sprintf("at most %d requests of one job at a time", h.limits.l.MaxRequestsPerJob))
		return
	case serverBusy:
		rw.Header().Set("Retry-After", "2")
		writeError(rw, http.StatusServiceUnavailable, "busy", "the state backend is busy; retry")
		return
	case gone:
		return
	}
	defer release()
	// A turn is held at most RequestTimeout: the body must have arrived and the answer gone
	// out by then, else the connection is cut and the turn goes to the next request.
	deadline := time.Now().Add(h.limits.l.RequestTimeout)
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	defer cancel()
	r = r.WithContext(ctx)

	if prefix == PlanPathPrefix {
		h.plan(rw, r, key, access)
		return
	}
	switch r.Method {
	case http.MethodGet:
		h.get(rw, r, key)
	case http.MethodPost, http.MethodPut, http.MethodDelete:
		if access.ReadOnly {
			writeError(rw, http.StatusForbidden, "read_only", fmt.Sprintf("a plan may only read state %q and take and release its own lock; writing and deleting state is for apply and destroy", key))
			return
		}
		if r.Method == http.MethodDelete {
			h.delete(rw, r, key, holder)
		} else {
			h.put(rw, r, key, holder)
		}
	case "LOCK":
		h.lock(rw, r, key, holder, access.ReadOnly)
	case "UNLOCK":
		h.unlock(rw, r, key, holder, access.ReadOnly)
	default:
		rw.Header().Set("Allow", "GET, POST, PUT, DELETE, LOCK, UNLOCK")
		writeError(rw, http.StatusMethodNotAllowed, "method_not_allowed", "method "+r.Method+" not supported")
	}
}
