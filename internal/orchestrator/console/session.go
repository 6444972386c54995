package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/connguard"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// cookieName is the session cookie. Under TLS it carries the __Host- prefix, which browsers
// accept only with Secure, Path=/ and no Domain.
const (
	cookieName       = "outpost_session"
	secureCookieName = "__Host-outpost_session"
)

// maxForm bounds a form's body; the console's forms hold a token or a name.
const maxForm = 64 << 10

// visit is what the session middleware established about a request.
type visit struct {
	sess   *store.SessionRecord
	cookie string
	// csrf is the session's CSRF token, put into every form.
	csrf string
	// org is the organisation of the page ({org} of the path), the session's own.
	org string
}

// csrfToken is the session's CSRF token: an HMAC of a fixed label keyed by the session cookie, so
// it is known only to whoever holds the cookie, is the same on every replica, and needs no
// storage.
func csrfToken(cookie string) string {
	m := hmac.New(sha256.New, []byte(cookie))
	m.Write([]byte("outpost console csrf"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// securityHeaders are on every console answer: scripts and styles only from the console's own
// files (no inline script can run, so an escaping slip cannot become a script), no framing, no
// referrer to other sites (same-origin, not no-referrer: under no-referrer browsers send the
// console's own forms with Origin: null, which checkOrigin refuses), no type sniffing.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
}

// secured serves h with the security headers and nothing else: the pages without a session.
func (c *Console) secured(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		h(w, r)
	})
}

// session serves h to a request with a valid session (others are sent to sign in); post marks a
// state-changing route, which also needs the CSRF token.
func (c *Console) session(post bool, h func(w http.ResponseWriter, r *http.Request, v *visit) error) http.Handler {
	return c.secured(func(w http.ResponseWriter, r *http.Request) {
		v, err := c.lookup(r)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if v == nil {
			if r.Method == http.MethodGet && r.Header.Get("Accept") != "text/event-stream" {
				http.Redirect(w, r, "/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			c.fail(w, r, errUnauthorized)
			return
		}
		connguard.Authenticated(r.Context(), "console "+v.sess.Org)
		if post {
			if err := checkPost(w, r, v.csrf); err != nil {
				c.fail(w, r, err)
				return
			}
		}
		if err := h(w, r, v); err != nil {
			c.fail(w, r, err)
		}
	})
}

// lookup finds the request's session; nil when it has none that is valid now. A session of an
// organisation token ends with the token: a revoked token's sessions are refused.
func (c *Console) lookup(r *http.Request) (*visit, error) {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		if ck, err = r.Cookie(secureCookieName); err != nil {
			return nil, nil //nolint:nilerr // no cookie is no session
		}
	}
	sess, err := c.cfg.Store.Session(r.Context(), ck.Value)
	if err != nil || sess == nil {
		return nil, err
	}
	if !sess.Admin {
		tok, err := c.cfg.Store.OrgTokenByHash(r.Context(), sess.TokenHash)
		if err != nil {
			return nil, err
		}
		if tok == nil || tok.Org != sess.Org {
			return nil, nil
		}
	}
	return &visit{sess: sess, cookie: ck.Value, csrf: csrfToken(ck.Value), org: sess.Org}, nil
}

// errUnauthorized, errForbidden and errNotFound are the console's refusals; fail renders them.
var (
	errUnauthorized = &pageError{http.StatusUnauthorized, "Sign in first: this page needs a session."}
	errForbidden    = &pageError{http.StatusForbidden, "Refused: the form did not carry this session's CSRF token. Reload the page and try again."}
	errNotFound     = &pageError{http.StatusNotFound, "Not found."}
)

// pageError is a refusal with the status and the sentence the page shows.
type pageError struct {
	status  int
	message string
}

func (e *pageError) Error() string { return e.message }

// checkPost refuses a state-changing request that does not carry the session's CSRF token (form
// field csrf or header X-CSRF-Token), or that another site's page sent (Origin).
func checkPost(w http.ResponseWriter, r *http.Request, want string) error {
	if err := checkOrigin(r); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		return &pageError{http.StatusBadRequest, "The form could not be read: " + err.Error()}
	}
	got := r.PostForm.Get("csrf")
	if got == "" {
		got = r.Header.Get("X-CSRF-Token")
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return errForbidden
	}
	return nil
}

// checkOrigin refuses a POST whose Origin names another site; browsers send Origin on every
// POST, so a cross-site form is refused even before the session and CSRF checks (sign-in has no
// session yet: this is what keeps another site from signing a browser in).
func checkOrigin(r *http.Request) error {
	o := r.Header.Get("Origin")
	if o == "" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || u.Host != r.Host {
		return &pageError{http.StatusForbidden, "Refused: the form was sent from another site (" + o + ")."}
	}
	return nil
}

// orgPage, orgPost and orgStream serve an organisation's page, form and stream to a session of
// that organisation; any other organisation's path answers 404, as if it did not exist.
func (c *Console) orgPage(h func(w http.ResponseWriter, r *http.Request, v *visit) error) http.Handler {
	return c.session(false, c.inOrg(h))
}

func (c *Console) orgPost(h func(w http.ResponseWriter, r *http.Request, v *visit) error) http.Handler {
	return c.session(true, c.inOrg(h))
}

func (c *Console) orgStream(h func(w http.ResponseWriter, r *http.Request, v *visit) error) http.Handler {
	return c.session(false, c.inOrg(h))
}

func (c *Console) page(h func(w http.ResponseWriter, r *http.Request, v *visit) error) http.Handler {
	return c.session(false, h)
}

func (c *Console) inOrg(h func(w http.ResponseWriter, r *http.Request, v *visit) error) func(w http.ResponseWriter, r *http.Request, v *visit) error {
	return func(w http.ResponseWriter, r *http.Request, v *visit) error {
		if r.PathValue("org") != v.sess.Org {
			return errNotFound
		}
		return h(w, r, v)
	}
}

// fail renders err as a page (or a bare status for streams and forms answered to scripts).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	var pe *pageError
	var ref *store.Refusal
	switch {
	case errors.As(err, &pe):
	case errors.As(err, &ref) && ref.Code == api.CodeNotFound:
		pe = &pageError{http.StatusNotFound, ref.Message}
	case errors.As(err, &ref):
		pe = &pageError{http.StatusConflict, ref.Message}
	default:
		c.cfg.Logger.Error("console page failed", "path", r.URL.Path, "err", err)
		pe = &pageError{http.StatusInternalServerError, "Something failed on the orchestrator; its log has the details."}
	}
	if r.Header.Get("Accept") == "text/event-stream" {
		http.Error(w, pe.message, pe.status)
		return
	}
	c.render(w, pe.status, "error", pageData{Title: http.StatusText(pe.status), Message: pe.message})
}

func (c *Console) signInForm(w http.ResponseWriter, r *http.Request) {
	c.render(w, http.StatusOK, "signin", pageData{Title: "Sign in", Next: safeNext(r.URL.Query().Get("next"))})
}

// signIn checks the token typed into the form as the API would, and starts a session of the
// organisation it reaches: an organisation token's own, or the one typed beside the admin token.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if err := checkOrigin(r); err != nil {
		c.fail(w, r, err)
		return
	}
	if wait := c.limiter.allow(clientAddr(r)); wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds()+0.999)))
		c.render(w, http.StatusTooManyRequests, "signin", pageData{Title: "Sign in",
			Message: "Too many sign-in attempts from this address; wait a minute and try again."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, &pageError{http.StatusBadRequest, "The form could not be read: " + err.Error()})
		return
	}
	token, org, next := strings.TrimSpace(r.PostForm.Get("token")), strings.TrimSpace(r.PostForm.Get("org")), safeNext(r.PostForm.Get("next"))
	again := func(msg string) {
		c.render(w, http.StatusUnauthorized, "signin", pageData{Title: "Sign in", Message: msg, Next: next, Org: org})
	}
	p, err := c.cfg.Authenticate(r.Context(), token)
	if err != nil {
		var ref *store.Refusal
		if errors.As(err, &ref) {
			again("That token is not valid here: it was revoked, mistyped or never issued by this orchestrator.")
			return
		}
		c.fail(w, r, err)
		return
	}
	rec := store.SessionRecord{Admin: p.Admin, Org: p.Org, TokenID: p.TokenID, TokenHash: p.TokenHash}
	if p.Admin {
		if err := api.ValidateID("org", org); err != nil {
			again("With the admin token, also name the organisation to open.")
			return
		}
		if err := c.cfg.Store.CheckOrg(r.Context(), org); err != nil {
			again("No organisation " + org + " on this orchestrator.")
			return
		}
		rec.Org = org
	}
	cookie, err := c.cfg.Store.CreateSession(r.Context(), rec, c.cfg.SessionTTL)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.cfg.Logger.Info("console session started", "org", rec.Org, "admin", rec.Admin, "token_id", rec.TokenID, "remote", r.RemoteAddr)
	http.SetCookie(w, c.cookie(r, cookie, c.cfg.SessionTTL))
	if next == "" {
		next = "/orgs/" + rec.Org + "/runners"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request, v *visit) error {
	if err := c.cfg.Store.DeleteSession(r.Context(), v.cookie); err != nil {
		return err
	}
	http.SetCookie(w, c.cookie(r, "", -1))
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
	return nil
}

// cookie is the session cookie: HttpOnly (no script reads it), SameSite=Strict (no other site's
// request carries it), Secure and __Host- under TLS.
func (c *Console) cookie(r *http.Request, value string, ttl time.Duration) *http.Cookie {
	ck := &http.Cookie{Name: cookieName, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode}
	if r.TLS != nil {
		ck.Name, ck.Secure = secureCookieName, true
	}
	if ttl < 0 {
		ck.MaxAge = -1
	} else {
		ck.MaxAge = int(ttl.Seconds())
	}
	return ck
}

// safeNext keeps a redirect target only when it is a path of this site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return ""
	}
	return next
}

func (c *Console) home(w http.ResponseWriter, r *http.Request, v *visit) error {
	http.Redirect(w, r, "/orgs/"+v.sess.Org+"/runners", http.StatusSeeOther)
	return nil
}

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// limiter counts sign-in attempts per client address in fixed windows. It is per replica: a
// client spread over n replicas gets n times the limit, which still keeps guessing a 256-bit
// token hopeless; the limit is there to keep sign-in from being a cheap load.
type limiter struct {
	mu     sync.Mutex
	limit  int
	window time.Duration
	now    func() time.Time
	start  time.Time
	counts map[string]int
}

func newLimiter(limit int, window time.Duration, now func() time.Time) *limiter {
	return &limiter{limit: limit, window: window, now: now, counts: map[string]int{}}
}

// allow counts an attempt of addr and says how long to wait when it is over the limit.
func (l *limiter) allow(addr string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.start) >= l.window {
		l.start, l.counts = now, map[string]int{}
	}
	if l.counts[addr] >= l.limit {
		return l.start.Add(l.window).Sub(now)
	}
	l.counts[addr]++
	return 0
}
