package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RetryPolicy says how the client retries. Retries happen on 429 and 5xx answers and on network
// errors, with exponential backoff and full jitter, and wait at least what Retry-After asks.
// Requests that are not idempotent (creates) are retried only when the server cannot have acted
// on them: 429, 503, or a connection that was never established.
type RetryPolicy struct {
	// MaxAttempts counts the first try; 1 disables retries.
	MaxAttempts int
	// BaseDelay is the first backoff ceiling; it doubles per attempt up to MaxDelay.
	BaseDelay time.Duration
	MaxDelay  time.Duration
}

// DefaultRetryPolicy is used when no policy is given.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 5, BaseDelay: 250 * time.Millisecond, MaxDelay: 30 * time.Second}

// RequestInfo describes one HTTP attempt, for logging hooks. It never holds credentials or bodies.
type RequestInfo struct {
	Method   string
	Path     string
	Attempt  int
	Status   int
	Duration time.Duration
	Err      error
}

// Option configures a client.
type Option func(*transport)

// WithHTTPClient replaces the HTTP client (for custom TLS, proxies or timeouts).
func WithHTTPClient(c *http.Client) Option { return func(t *transport) { t.http = c } }

// WithRetryPolicy replaces the retry policy.
func WithRetryPolicy(p RetryPolicy) Option { return func(t *transport) { t.retry = p } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(t *transport) { t.userAgent = ua } }

// WithRequestHook calls fn after every attempt, so callers can log through their own logger.
func WithRequestHook(fn func(context.Context, RequestInfo)) Option {
	return func(t *transport) { t.hook = fn }
}

// authorizer adds credentials to one attempt. It runs per attempt because agent tokens are
// single-use.
type authorizer func(r *http.Request, body []byte) error

// transport is the HTTP core the three clients share.
type transport struct {
	base      *url.URL
	http      *http.Client
	retry     RetryPolicy
	userAgent string
	hook      func(context.Context, RequestInfo)
	auth      authorizer
	sleep     func(context.Context, time.Duration) error
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
		sleep:     sleepContext,
	}
	for _, o := range opts {
		o(t)
	}
	if t.retry.MaxAttempts < 1 {
		t.retry.MaxAttempts = 1
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
	idempotent  bool
	out         any // decoded from a 2xx JSON body when non-nil
}

func (t *transport) do(ctx context.Context, c call) error {
	u := *t.base
	u.Path = t.base.Path + c.path
	u.RawPath = ""
	if len(c.query) > 0 {
		u.RawQuery = c.query.Encode()
	}
	full := u.String()
	var lastErr error
	for attempt := 1; ; attempt++ {
		wait, err := t.once(ctx, c, full, attempt)
		if err == nil {
			return nil
		}
		lastErr = err
		if wait < 0 || attempt >= t.retry.MaxAttempts || ctx.Err() != nil {
			return lastErr
		}
		if err := t.sleep(ctx, t.backoff(attempt, wait)); err != nil {
			return fmt.Errorf("%w (gave up waiting to retry: %w)", lastErr, err)
		}
	}
}

// once runs one attempt. It returns wait < 0 when the error must not be retried, else the
// minimum wait the server asked for (0 when it did not say).
func (t *transport) once(ctx context.Context, c call, full string, attempt int) (time.Duration, error) {
	start := time.Now()
	var rdr io.Reader
	if c.body != nil {
		rdr = bytes.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, full, rdr)
	if err != nil {
		return -1, fmt.Errorf("build request: %w", err)
	}
	if c.body != nil {
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
			return -1, fmt.Errorf("authorize request: %w", err)
		}
	}
	resp, err := t.http.Do(req)
	info := RequestInfo{Method: c.method, Path: c.path, Attempt: attempt, Duration: time.Since(start)}
	if err != nil {
		info.Err = err
		t.report(ctx, info)
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		netErr := fmt.Errorf("%s %s: %w", c.method, c.path, errors.Join(ErrUnavailable, err))
		if c.idempotent || neverSent(err) {
			return 0, netErr
		}
		return -1, netErr
	}
	defer resp.Body.Close()
	info.Status = resp.StatusCode
	t.report(ctx, info)
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		if c.idempotent {
			return 0, fmt.Errorf("read response of %s %s: %w", c.method, c.path, errors.Join(ErrUnavailable, err))
		}
		return -1, fmt.Errorf("read response of %s %s: %w", c.method, c.path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if c.out != nil && len(data) > 0 {
			if err := json.Unmarshal(data, c.out); err != nil {
				return -1, fmt.Errorf("decode response of %s %s: %w", c.method, c.path, err)
			}
		}
		return 0, nil
	}
	apiErr := decodeError(resp, data)
	retryAfter := parseRetryAfter(resp.Header.Get("Retry-After"))
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
		return retryAfter, apiErr
	case resp.StatusCode >= 500 && c.idempotent:
		return retryAfter, apiErr
	}
	return -1, apiErr
}

func (t *transport) report(ctx context.Context, info RequestInfo) {
	if t.hook != nil {
		t.hook(ctx, info)
	}
}

// backoff is full jitter over an exponential ceiling, never below what the server asked for.
func (t *transport) backoff(attempt int, atLeast time.Duration) time.Duration {
	ceil := t.retry.BaseDelay << (attempt - 1)
	if ceil <= 0 || ceil > t.retry.MaxDelay {
		ceil = t.retry.MaxDelay
	}
	d := time.Duration(rand.Int64N(int64(ceil) + 1))
	if d < atLeast {
		d = atLeast
	}
	return d
}

func decodeError(resp *http.Response, data []byte) *Error {
	e := &Error{StatusCode: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id")}
	var body ErrorBody
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

func codeForStatus(s int) string {
	switch {
	case s == http.StatusNotFound:
		return CodeNotFound
	case s == http.StatusConflict:
		return CodeConflict
	case s == http.StatusUnauthorized:
		return CodeUnauthorized
	case s == http.StatusForbidden:
		return CodeForbidden
	case s == http.StatusTooManyRequests:
		return CodeRateLimited
	case s == http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	case s >= 500:
		return CodeUnavailable
	}
	return CodeInvalid
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

// neverSent reports whether the request cannot have reached the server.
func neverSent(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func sleepContext(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

func jsonBody(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return b, nil
}
