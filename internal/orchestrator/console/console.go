// Package console is the orchestrator's web console: server-rendered pages (html/template) of an
// organisation's runners, deployments (with the live log), state keys and organisation tokens,
// served by outpost-orchestrator on the API's own listener under / while the API stays under
// /api/. The few live parts use htmx and its server-sent events extension, both vendored under
// static/ and embedded, so the console needs no CDN and no Node.
//
// Every page and stream reads the store (package store) the way the API's handlers do, so any
// replica serves any page and any stream: sessions live in the storage engine, and the live
// parts poll the store (a stream holds no database connection between its reads).
//
// Security: a browser signs in with an organisation token or the bootstrap admin token and gets
// a session cookie (HttpOnly, SameSite=Strict, Secure under TLS) naming a session kept in the
// engine, which expires and ends at sign-out or with the token's revocation; every POST carries
// the session's CSRF token; the Content-Security-Policy allows scripts from the console's own
// files only; html/template escapes every value; a session sees one organisation, and another
// organisation's pages answer 404. Sign-in attempts are rate-limited per client address.
package console

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

//go:embed static/*.js static/*.css static/*.LICENSE
var staticFiles embed.FS

// Defaults of Config.
const (
	DefaultSessionTTL = 12 * time.Hour
	// DefaultSignInsPerMinute is how many sign-in attempts one client address gets per minute.
	DefaultSignInsPerMinute = 10
	// DefaultPollInterval is how often a live part reads the store again.
	DefaultPollInterval = time.Second
	// maxStream is how long one event stream stays open; the browser reconnects (a log stream
	// resumes from its offset), so no stream outlives the server's write timeout.
	maxStream = 50 * time.Second
)

// Principal is who a token speaks for, as the HTTP face's authentication found it.
type Principal struct {
	// Admin is the bootstrap admin token: any organisation, and the organisation tokens.
	Admin bool
	// Org, TokenID and TokenHash name an organisation token.
	Org       string
	TokenID   string
	TokenHash []byte
}

// Config is what the console needs of the orchestrator. Store, Authenticate and Connected are
// required.
type Config struct {
	Store *store.Store
	// Authenticate checks a token typed at sign-in, exactly as the API checks a bearer token.
	Authenticate func(ctx context.Context, token string) (Principal, error)
	// Connected says whether a runner's agent counts as connected now (the API's runner view).
	Connected func(org string, r *api.Runner) bool
	// Wake wakes the long polls of a runner ("org/runner") after a cancel.
	Wake func(key string)
	// Version is the orchestrator's release, compared with each agent's.
	Version string
	// ExternalURL is the orchestrator's address as agents reach it (the --external-url), for the
	// connect page's snippets; empty uses the address the browser used.
	ExternalURL string
	// Now is the clock of sessions and "ago" texts.
	Now    func() time.Time
	Logger *slog.Logger
	// Closing is closed when the server shuts down; open streams end then.
	Closing <-chan struct{}
	// SessionTTL is how long a session lasts (DefaultSessionTTL when zero).
	SessionTTL time.Duration
	// SignInsPerMinute bounds sign-in attempts per client address (DefaultSignInsPerMinute).
	SignInsPerMinute int
	// PollInterval is how often live parts read the store (DefaultPollInterval).
	PollInterval time.Duration
}

// Console serves the web console.
type Console struct {
	cfg     Config
	pages   *pageTemplates
	limiter *limiter
	static  http.Handler
}

// Route is one page or stream of the console, for the face's route table.
type Route struct {
	Pattern string
	Handler http.Handler
}

// New returns the console over cfg.
func New(cfg Config) (*Console, error) {
	if cfg.Store == nil || cfg.Authenticate == nil || cfg.Connected == nil {
		return nil, errors.New("console: Store, Authenticate and Connected are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Wake == nil {
		cfg.Wake = func(string) {}
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.SignInsPerMinute <= 0 {
		cfg.SignInsPerMinute = DefaultSignInsPerMinute
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	return &Console{
		cfg: cfg, pages: pages, limiter: newLimiter(cfg.SignInsPerMinute, time.Minute, cfg.Now),
		static: http.StripPrefix("/static/", http.FileServerFS(sub)),
	}, nil
}

// Routes are the console's pages, streams and files. Every one but the sign-in page, its form
// and the static files needs a session; every POST but sign-in needs the session's CSRF token.
func (c *Console) Routes() []Route {
	const org = "/orgs/{org}"
	return []Route{
		{"GET /{$}", c.page(c.home)},
		{"GET /static/", c.secured(c.serveStatic)},
		{"GET /signin", c.secured(c.signInForm)},
		{"POST /signin", c.secured(c.signIn)},
		{"POST /signout", c.session(true, c.signOut)},

		{"GET " + org + "/runners", c.orgPage(c.runners)},
		{"GET " + org + "/runners/live", c.orgStream(c.runnersLive)},
		{"GET " + org + "/connect", c.orgPage(c.connect)},
		{"GET " + org + "/connect/live", c.orgStream(c.connectLive)},
		{"GET " + org + "/deployments", c.orgPage(c.deployments)},
		{"GET " + org + "/deployments/live", c.orgStream(c.deploymentsLive)},
		{"GET " + org + "/deployments/{id}", c.orgPage(c.deployment)},
		{"GET " + org + "/deployments/{id}/live", c.orgStream(c.deploymentLive)},
		{"GET " + org + "/deployments/{id}/log", c.orgStream(c.logStream)},
		{"GET " + org + "/deployments/{id}/log.txt", c.orgPage(c.rawLog)},
		{"POST " + org + "/deployments/{id}/cancel", c.orgPost(c.cancel)},
		{"POST " + org + "/deployments/{id}/plan/{action}", c.orgPost(c.review)},
		{"GET " + org + "/state-keys", c.orgPage(c.stateKeys)},
		{"GET " + org + "/tokens", c.orgPage(c.tokens)},
		{"POST " + org + "/tokens", c.orgPost(c.createToken)},
		{"POST " + org + "/tokens/{id}/revoke", c.orgPost(c.revokeToken)},
	}
}

func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=3600")
	c.static.ServeHTTP(w, r)
}
