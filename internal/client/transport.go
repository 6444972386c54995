// Package client is the Go client of the orchestrator's API: the admin client (the provider, the
// demo), the agent client (requests signed with the runner's key) and the job client (the job
// runner, with its job token), over one transport that retries by the policy of package retry and
// turns error answers into *api.Error. The wire types and errors themselves live in package api,
// which the orchestrator shares without pulling in request signing.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// RetryPolicy says how often and how patiently the client retries one call. What is retried is
// decided per request by its intent (retry.Idempotent or retry.Unapplied); the waits are
// retry.Backoff, never shorter than the server's Retry-After.
type RetryPolicy struct {
	// MaxTries counts the first try; 1 disables retries.
	MaxTries int
	// BaseDelay is the first backoff ceiling; it doubles per try up to MaxDelay.
	BaseDelay time.Duration
	MaxDelay  time.Duration
}

// DefaultRetryPolicy is used when no policy is given.
var DefaultRetryPolicy = RetryPolicy{MaxTries: 5, BaseDelay: 250 * time.Millisecond, MaxDelay: 30 * time.Second}

// RequestInfo describes one try of an HTTP request, for logging hooks. It never holds credentials
// or bodies.
type RequestInfo struct {
	Method   string
	Path     string
	Try      int
	Status   int
	Duration time.Duration
	Err      error
}

// Option configures a client.
type Option func(*transport)

// WithHTTPClient replaces the HTTP client (for custom TLS, proxies or timeouts; see NewHTTPClient).
func WithHTTPClient(c *http.Client) Option { return func(t *transport) { t.http = c } }

// WithRetryPolicy replaces the retry policy.
func WithRetryPolicy(p RetryPolicy) Option { return func(t *transport) { t.retry = p } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(t *transport) { t.userAgent = ua } }

// WithRequestHook calls fn after every try, so callers can log through their own logger.
func WithRequestHook(fn func(context.Context, RequestInfo)) Option {
	return func(t *transport) { t.hook = fn }
}

// WithUploadProgress calls fn as the body of a request is sent, with the bytes sent so far and
// the body's size, so a command line can show the progress of a large upload (an inline source).
// A retried request starts again at zero.
func WithUploadProgress(fn func(sent, total int64)) Option {
	return func(t *transport) { t.progress = fn }
}

// authorizer adds credentials to one try. It runs per try because agent tokens are
// single-use.
type authorizer func(r *http.Request, body []byte) error

// bearer authorises with a bearer token (an admin token, or the job token).
func bearer(token string) authorizer {
	return func(r *http.Request, _ []byte) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}
}

// transport is the HTTP core the three clients share.
type transport struct {
	base      *url.URL
	http      *http.Client
	retry     RetryPolicy
	userAgent string
	hook      func(context.Context, RequestInfo)
	progress  func(sent, total int64)
	auth      authorizer
	// observeDate, when set, is given the Date header of every answer with the times the try
	// was sent and answered, and reports whether that changed how requests are signed (the
	// agent client learns the orchestrator's clock from it).
	observeDate func(date string, sent, received time.Time) (changed bool)
	// keyRefused, when set, is told the Authorization header of a try refused with
	// api.ErrUnknownKey, and reports whether the next try is signed with another key (the agent
	// client holds several of the runner's keys while one rotates).
	keyRefused func(authorization string) (changed bool)
	sleep      func(context.Context, time.Duration) error
	// allowInsecureHTTP lets an http:// base URL leave the machine (AllowInsecureHTTP).
	allowInsecureHTTP bool
}

func newTransport(baseURL string, auth authorizer, opts []Option) (*transport, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("orchestrator URL %q must be absolute, like https://orchestrator.example.com", baseURL)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("orchestrator URL %q must use http or https", baseURL)
	}
	t := &transport{
		base:      u,
		http:      &http.Client{Timeout: 2 * time.Minute},
		retry:     DefaultRetryPolicy,
		userAgent: "outpost-client",
		auth:      auth,
		sleep:     retry.Sleep,
	}
	for _, o := range opts {
		o(t)
	}
	if err := CheckPlainHTTP(baseURL, t.allowInsecureHTTP, "the insecure opt-in to plain http (the provider's insecure_allow_http, --insecure-allow-http of the outpost command line and the agent, or "+
		"OUTPOST_INSECURE_ALLOW_HTTP=true for any of them)"); err != nil {
		return nil, err
	}
	if t.retry.MaxTries < 1 {
		t.retry.MaxTries = 1
	}
	return t, nil
}

// call is one logical request.
type call struct {
	method      string
	path        string // already escaped
	query       url.Values
	body        []byte
	contentType string
	// retryable decides whether a failed try is sent again: retry.Idempotent for requests
	// that may be applied twice, retry.Unapplied for creates.
	retryable retry.Decision
	out       any // decoded from a 2xx JSON body when non-nil
}

func (t *transport) do(ctx context.Context, c call) error {
	u := *t.base
	u.Path = t.base.Path + c.path
	u.RawPath = ""
	if len(c.query) > 0 {
		u.RawQuery = c.query.Encode()
	}
	full := u.String()
	back := retry.Backoff{Base: t.retry.BaseDelay, Max: t.retry.MaxDelay}
	resigned := 0
	for try := 1; ; try++ {
		resign, err := t.once(ctx, c, full, try)
		if err == nil {
			return nil
		}
		// A 401 whose answer corrected the signing clock, or refused a key when the signer holds
		// another, is cured by signing again at once: up to twice (the clock, then the key).
		if resign && resigned < 2 && ctx.Err() == nil && errors.Is(err, api.ErrUnauthorized) {
			resigned++
			continue
		}
		if ctx.Err() != nil || try >= t.retry.MaxTries || !c.retryable(err) {
			return err
		}
		if serr := t.sleep(ctx, back.Next(api.RetryAfter(err))); serr != nil {
			return fmt.Errorf("%w (gave up waiting to retry: %w)", err, serr)
		}
	}
}

// once makes one try. Failures to get an answer carry api.ErrUnavailable; error answers are
// an *api.Error with the server's Retry-After. clockChanged says the answer corrected the
// signing clock (observeDate).
func (t *transport) once(ctx context.Context, c call, full string, try int) (clockChanged bool, err error) {
	start := time.Now()
	var rdr io.Reader
	if c.body != nil {
		rdr = bytes.NewReader(c.body)
		if t.progress != nil {
			rdr = &progressReader{r: rdr, total: int64(len(c.body)), fn: t.progress}
		}
	}
	req, err := http.NewRequestWithContext(ctx, c.method, full, rdr)
	if err != nil {
		return clockChanged, fmt.Errorf("build request: %w", err)
	}
	if c.body != nil {
		// Only a bare bytes.Reader lets net/http learn the length and rewind the body by itself.
		req.ContentLength = int64(len(c.body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(c.body)), nil }
		ct := c.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", t.userAgent)
	if t.auth != nil {
		if err := t.auth(req, c.body); err != nil {
			return clockChanged, fmt.Errorf("authorize request: %w", err)
		}
	}
	resp, err := t.http.Do(req)
	info := RequestInfo{Method: c.method, Path: c.path, Try: try, Duration: time.Since(start)}
	if err != nil {
		info.Err = err
		t.callHook(ctx, info)
		if ctx.Err() != nil {
			return clockChanged, ctx.Err()
		}
		return clockChanged, fmt.Errorf("%s %s: %w", c.method, c.path, errors.Join(api.ErrUnavailable, err))
	}
	defer resp.Body.Close()
	if t.observeDate != nil {
		clockChanged = t.observeDate(resp.Header.Get("Date"), start, time.Now())
	}
	info.Status = resp.StatusCode
	t.callHook(ctx, info)
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return clockChanged, fmt.Errorf("read response of %s %s: %w", c.method, c.path, errors.Join(api.ErrUnavailable, err))
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if c.out != nil && len(data) > 0 {
			if err := json.Unmarshal(data, c.out); err != nil {
				return clockChanged, fmt.Errorf("decode response of %s %s: %w", c.method, c.path, err)
			}
		}
		return clockChanged, nil
	}
	err = decodeError(resp, data)
	if t.keyRefused != nil && errors.Is(err, api.ErrUnknownKey) && t.keyRefused(req.Header.Get("Authorization")) {
		return true, err
	}
	return clockChanged, err
}

// progressReader reports how much of a request body has been read (by the connection).
type progressReader struct {
	r     io.Reader
	sent  int64
	total int64
	fn    func(sent, total int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.sent += int64(n)
		p.fn(p.sent, p.total)
	}
	return n, err
}

func (t *transport) callHook(ctx context.Context, info RequestInfo) {
	if t.hook != nil {
		t.hook(ctx, info)
	}
}

func decodeError(resp *http.Response, data []byte) *api.Error {
	e := &api.Error{StatusCode: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id"),
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
	var body api.ErrorBody
	if json.Unmarshal(data, &body) == nil && body.Error.Message != "" {
		e.Code, e.Message, e.Field, e.CommittedOffset = body.Error.Code, body.Error.Message, body.Error.Field, body.Error.CommittedOffset
		return e
	}
	e.Code = codeForStatus(resp.StatusCode)
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	e.Message = msg
	return e
}

// codeOfStatus is the error code of an error answer without an error body (a proxy's, say).
var codeOfStatus = map[int]string{
	http.StatusNotFound:              api.CodeNotFound,
	http.StatusConflict:              api.CodeConflict,
	http.StatusUnauthorized:          api.CodeUnauthorized,
	http.StatusForbidden:             api.CodeForbidden,
	http.StatusTooManyRequests:       api.CodeRateLimited,
	http.StatusRequestEntityTooLarge: api.CodeTooLarge,
}

func codeForStatus(s int) string {
	if code, ok := codeOfStatus[s]; ok {
		return code
	}
	if s >= 500 {
		return api.CodeUnavailable
	}
	return api.CodeInvalid
}

// parseRetryAfter reads delay-seconds or an HTTP date; unknown forms mean no minimum.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// roundTrip makes a request whose body is in as JSON (none when in is nil) and decodes the
// answer into a new Out.
func roundTrip[Out any](ctx context.Context, t *transport, c call, in any) (*Out, error) {
	if in != nil {
		b, err := jsonBody(in)
		if err != nil {
			return nil, err
		}
		c.body = b
	}
	var out Out
	c.out = &out
	if err := t.do(ctx, c); err != nil {
		return nil, err
	}
	return &out, nil
}

func jsonBody(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return b, nil
}
