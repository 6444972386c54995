package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/accesslog"
	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/connguard"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// authKind says who may call a route.
type authKind int

const (
	authNone  authKind = iota // /healthz, /metrics
	authAdmin                 // Authorization: Bearer <bootstrap admin token or organisation token>
	authAgent                 // Authorization: Outpost-Agent <EdDSA JWT>
	authJob                   // Authorization: Bearer opj_<job token>
)

// Body kinds of a route.
const (
	bodyNone  = ""
	bodyJSON  = "application/json"
	bodyOctet = "application/octet-stream"
)

// Body limits.
const (
	limitDefault    = 1 << 20
	limitDeployment = 16 << 20
	limitLogAppend  = 1 << 20
	// limitStateReport holds api.MaxReportedStates states of api.MaxReportedVersions versions.
	limitStateReport = 8 << 20
	// limitEventBatch holds api.MaxEventBatch events with the longest message and detail.
	limitEventBatch = api.MaxEventBatch * (2*maxEventMessageLen + 4<<10)
)

// route is one registered endpoint: its pattern, who may call it, what body it takes and its
// handler. The table of routes is the single place the API surface is defined.
type route struct {
	pattern string
	auth    authKind
	// bootstrap restricts an admin route to the bootstrap admin token (organisation tokens get
	// 403): the routes that manage organisation tokens.
	bootstrap bool
	// newOrg marks the admin routes that may be the first thing done in an organisation (they
	// create it); every other one refuses an organisation that does not exist (org_not_found).
	newOrg bool
	body   string
	limit  int64
	// replayInTx leaves reserving the agent token's id to the handler's own transaction
	// (agentauth.Verified.BindBody, call.replay): one commit instead of two on the pickup's path.
	replayInTx bool
	h          func(w http.ResponseWriter, r *http.Request, c *call) error
}

// call is what the middleware established before the handler runs.
type call struct {
	// body is the request body, read in full within the route's limit.
	body  []byte
	org   string             // admin routes
	admin principal          // admin routes
	agent agentauth.Identity // agent routes
	// replay is the agent token's id still to be reserved, on routes with replayInTx.
	replay *agentauth.Replay
	job    store.JobTokenPayload // job API routes
}

type infoKey struct{}

// reqInfo travels in the request context so the outer middleware can log and count what the
// inner layers learned (the route, who called).
type reqInfo struct {
	id        string
	route     string
	principal string
	// bodyRead is set once the body was read to its end; a request whose body was not (refused
	// before reading it, or cut off) gets its connection closed.
	bodyRead bool
}

func infoOf(ctx context.Context) *reqInfo {
	if i, ok := ctx.Value(infoKey{}).(*reqInfo); ok {
		return i
	}
	return &reqInfo{}
}

func requestID(ctx context.Context) string { return infoOf(ctx).id }
func routeOf(ctx context.Context) string   { return infoOf(ctx).route }

var validRequestID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

func newRequestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); validRequestID.MatchString(id) {
		return id
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// serveHTTP is the outer middleware: request id, panic recovery, shutdown gate, JSON answers
// for unknown routes, access log and request metrics. Access logs never hold credentials,
// bodies or log contents: only method, route, path, status, size, duration and principal.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	info := &reqInfo{id: newRequestID(r)}
	r = r.WithContext(context.WithValue(r.Context(), infoKey{}, info))
	sw := &accesslog.Recorder{ResponseWriter: w}
	sw.Header().Set("X-Request-Id", info.id)
	// The Date of every answer is the orchestrator's own clock, the one agent tokens are checked
	// against: an agent whose clock is off learns the difference from it (agentauth.Signer).
	sw.Header().Set("Date", s.cfg.Now().UTC().Format(http.TimeFormat))
	if r.ContentLength != 0 && r.ProtoMajor == 1 {
		// Until the body has been read to its end, the answer closes the connection: net/http
		// would otherwise read what is left of the body before answering, to reuse the
		// connection, which lets a client that trickles a body hold it and a goroutine for as
		// long as the read timeout. (HTTP/2 resets just the stream, and would take the header
		// as a reason to close the connection every other stream shares.)
		sw.Header().Set("Connection", "close")
		defer cutUnreadBody(sw, info)
	}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler { //nolint:errorlint // sentinel compared as net/http does
				panic(p)
			}
			s.log.Error("handler panicked", "request_id", info.id, "route", info.route, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if sw.Status == 0 {
				writeRefusal(sw, store.Refuse(api.CodeInternal,
					"internal error; the orchestrator log has the details under request id %s", info.id))
			}
		}
		routeLabel := info.route
		if routeLabel == "" {
			routeLabel = "unmatched"
		}
		code := sw.Status
		if code == 0 {
			code = http.StatusOK
		}
		d := time.Since(start)
		s.metrics.observe(routeLabel, code, d)
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
			slog.String("request_id", info.id), slog.String("method", r.Method), slog.String("route", routeLabel),
			slog.String("path", r.URL.Path), slog.Int("status", code), slog.Int64("bytes", sw.Bytes),
			slog.Float64("duration_ms", float64(d.Microseconds())/1000), slog.String("remote", r.RemoteAddr),
			slog.String("principal", info.principal))
	}()
	if !s.enter() {
		sw.Header().Set("Retry-After", "1")
		writeRefusal(sw, store.Refuse(api.CodeUnavailable, "the orchestrator is shutting down; retry shortly"))
		return
	}
	defer s.inFlight.Done()
	s.metrics.inFlight.Inc()
	defer s.metrics.inFlight.Dec()
	if h, pattern := s.mux.Handler(r); pattern == "" {
		s.notRouted(sw, r, h)
		return
	}
	s.mux.ServeHTTP(sw, r)
}

// cutUnreadBody ends the reading of a body the handler did not read to its end: the read
// deadline set to now makes net/http give up on the rest at once instead of waiting for it after
// the answer, so the connection closes right after the answer is written.
func cutUnreadBody(w http.ResponseWriter, info *reqInfo) {
	if !info.bodyRead {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
}

// headerCapture runs the mux's own 404/405 handler only to learn its status and Allow header.
type headerCapture struct {
	h    http.Header
	code int
}

func (c *headerCapture) Header() http.Header         { return c.h }
func (c *headerCapture) Write(b []byte) (int, error) { return len(b), nil }
func (c *headerCapture) WriteHeader(code int)        { c.code = code }

func (s *Server) notRouted(w http.ResponseWriter, r *http.Request, h http.Handler) {
	c := &headerCapture{h: http.Header{}}
	h.ServeHTTP(c, r)
	if c.code == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", c.h.Get("Allow"))
		writeRefusal(w, store.Refuse(codeMethodNotAllowed,
			"%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, c.h.Get("Allow")))
		return
	}
	if c.code >= 300 && c.code < 400 {
		h.ServeHTTP(w, r)
		return
	}
	writeRefusal(w, store.NotFound("no API route matches %s %s; see the OpenAPI document (internal/api/openapi.yaml)", r.Method, r.URL.Path))
}

// wrap is the per-route middleware: authentication, Content-Type, body limit, then the handler.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		infoOf(r.Context()).route = rt.pattern
		c := &call{}
		var err error
		if rt.auth == authAgent {
			// Agents' requests include the long polls, which park this goroutine: the token
			// checks run on a stack of their own (onFreshStack).
			onFreshStack(func() { err = s.prepare(w, r, rt, c) })
		} else {
			err = s.prepare(w, r, rt, c)
		}
		if err == nil {
			err = rt.h(w, r, c)
		}
		if err != nil {
			s.fail(w, r, err)
		}
	})
}

// fail answers with err and counts refused credentials.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if ref, ok := store.AsRefusal(err); ok && ref.AuthReason != "" {
		s.metrics.authFailures.WithLabelValues(ref.AuthReason).Inc()
		s.log.Warn("credentials refused", "request_id", requestID(r.Context()), "route", routeOf(r.Context()),
			"reason", ref.AuthReason, "remote", r.RemoteAddr)
	}
	writeError(w, r, s.log, err)
}

// prepare checks the credentials from the headers alone, and only then reads the body: a request
// without valid credentials never makes the orchestrator read (or wait for) a byte of it. The
// agent's token signs the body's hash, so its last two checks (the hash, then reserving the
// token id against replay) follow the read, bounded by the route's limit.
func (s *Server) prepare(w http.ResponseWriter, r *http.Request, rt route, c *call) error {
	info := infoOf(r.Context())
	var agentToken *agentauth.Verified
	switch rt.auth {
	case authAdmin:
		p, err := s.authenticateAdmin(r)
		if err != nil {
			return err
		}
		c.admin, info.principal = p, p.String()
		if strings.Contains(rt.pattern, "{org}") {
			c.org = r.PathValue("org")
			if err := p.reaches(c.org); err != nil {
				return err
			}
			if err := api.ValidateID("org", c.org); err != nil {
				return err
			}
			// An organisation token's organisation exists (the token is in it); the bootstrap
			// token reaches any name, so a mistyped one would read as an empty organisation.
			if p.bootstrap && !rt.newOrg {
				if err := s.store.CheckOrg(r.Context(), c.org); err != nil {
					return err
				}
			}
		}
		if rt.bootstrap && !p.bootstrap {
			return store.Refuse(api.CodeForbidden,
				"only the bootstrap admin token (--admin-token) manages organisation tokens; an organisation token cannot")
		}
		connguard.Authenticated(r.Context(), "admin "+p.String())
	case authAgent:
		v, err := s.verifier.VerifyHeaders(r.Context(), r, s.requestURL(r))
		if err != nil {
			s.noteKeyRefusal(r.Context(), err)
			return agentRefusal(err)
		}
		agentToken = v
	case authJob:
		raw, ok := bearer(r)
		if !ok {
			return &store.Refusal{Code: api.CodeUnauthorized, AuthReason: store.AuthReasonJobToken,
				Message: "missing job token: send Authorization: Bearer opj_<token> (the token from the claim)"}
		}
		payload, err := s.store.ParseJobToken(raw)
		if err != nil {
			return err
		}
		if rt.body != bodyNone {
			// A token of an attempt that was superseded or ended long ago gets no body read.
			if err := s.store.CheckJobGrant(r.Context(), payload, s.cfg.JobTokenGrace); err != nil {
				return err
			}
		}
		c.job = payload
		info.principal = fmt.Sprintf("job %s/%s#%d", payload.Org, payload.Deployment, payload.Attempt)
		connguard.Authenticated(r.Context(), info.principal)
	}
	if err := readBody(w, r, rt, c); err != nil {
		return err
	}
	if agentToken != nil {
		var id agentauth.Identity
		var err error
		if rt.replayInTx {
			var rp agentauth.Replay
			id, rp, err = agentToken.BindBody(c.body)
			c.replay = &rp
		} else {
			id, err = agentToken.Bind(r.Context(), c.body)
		}
		if err != nil {
			return agentRefusal(err)
		}
		c.agent = id
		info.principal = "runner " + id.Org + "/" + id.RunnerID
		connguard.Authenticated(r.Context(), info.principal)
	}
	return nil
}

// agentRefusal is the answer to a refused agent token: 401, or 503 when the check itself failed.
func agentRefusal(err error) error {
	var ae *agentauth.Error
	if !errors.As(err, &ae) {
		return err
	}
	if ae.Reason == agentauth.ReasonInternal {
		return &store.Refusal{Code: api.CodeUnavailable, Message: ae.Error(), AuthReason: string(ae.Reason)}
	}
	code := api.CodeUnauthorized
	if ae.Reason == agentauth.ReasonUnknownKey {
		// Typed, so an agent holding another key tries it at once (agentauth.Signer.Refused).
		code = api.CodeUnknownKey
	}
	return &store.Refusal{Code: code, Message: ae.Error(), AuthReason: string(ae.Reason)}
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// readBody checks the Content-Type and reads the whole body within the route's limit. Agent
// routes need the exact bytes before verification (the token signs their hash), and every other
// route decodes from the same buffer.
func readBody(w http.ResponseWriter, r *http.Request, rt route, c *call) error {
	if rt.body == bodyNone {
		return nil
	}
	if ct := r.Header.Get("Content-Type"); ct != "" || r.ContentLength != 0 {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != rt.body {
			return store.Refuse(api.CodeMediaType,
				"Content-Type must be %s for %s, got %q", rt.body, rt.pattern, ct)
		}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rt.limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooBig):
			return store.Refuse(api.CodeTooLarge,
				"request body is larger than the limit of %s for %s", humanBytes(rt.limit), rt.pattern)
		case errors.As(err, &netErr) && netErr.Timeout():
			return store.Refuse(api.CodeRequestTimeout,
				"the request body did not arrive within the orchestrator's read timeout; send it at once, not piece by piece")
		}
		return store.Refuse(api.CodeInvalid, "reading the request body failed: %v", err)
	}
	infoOf(r.Context()).bodyRead = true
	w.Header().Del("Connection")
	// The read timeout bounded the arrival of the request; from here on the connection is only
	// watched for the client going away, which a long poll must see for its whole 30 s.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if rt.body == bodyJSON && len(data) == 0 {
		return store.Invalid("", "request body is required: send a JSON object")
	}
	c.body = data
	return nil
}

func humanBytes(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	if n >= 1<<10 && n%(1<<10) == 0 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
