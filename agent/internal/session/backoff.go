package session

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Backoff is exponential backoff with full jitter: the n-th wait is uniform in [0, min(Max,
// Base·2ⁿ)], never below what the server asked for with Retry-After. Full jitter spreads a fleet
// of agents that all lost the orchestrator at once, so they do not come back in lock-step.
type Backoff struct {
	Base, Max time.Duration
	n         int
	rand      func(int64) int64
}

// Next returns the next wait; retryAfter is the server's minimum (0 when it said nothing).
func (b *Backoff) Next(retryAfter time.Duration) time.Duration {
	ceil := b.Max
	if b.n < 30 {
		if c := b.Base << b.n; c > 0 && c < b.Max {
			ceil = c
		}
	}
	b.n++
	rnd := b.rand
	if rnd == nil {
		rnd = rand.Int64N
	}
	d := time.Duration(rnd(int64(ceil) + 1))
	if d < retryAfter {
		d = retryAfter
	}
	return d
}

// Reset starts over after a success.
func (b *Backoff) Reset() { b.n = 0 }

// Failures is how many waits were handed out since the last Reset.
func (b *Backoff) Failures() int { return b.n }

// RetryAfterRecorder is an http.RoundTripper that remembers the last Retry-After the
// orchestrator sent with a 429 or 503. The API client already honours it between its own
// retries; the session reads it too, so its backoff on top never comes back sooner than asked.
type RetryAfterRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	last time.Duration
}

func (r *RetryAfterRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if d := parseRetryAfter(resp.Header.Get("Retry-After")); d > 0 {
			r.mu.Lock()
			r.last = d
			r.mu.Unlock()
		}
	}
	return resp, err
}

// Take returns and clears the remembered Retry-After.
func (r *RetryAfterRecorder) Take() time.Duration {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.last
	r.last = 0
	return d
}

func parseRetryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}

// NewHTTPClient returns the HTTP client the agent talks to the orchestrator with, wrapping base's
// transport so the session sees Retry-After. Its timeout covers the 30 s long poll with room.
func NewHTTPClient(base http.RoundTripper) (*http.Client, *RetryAfterRecorder) {
	if base == nil {
		base = http.DefaultTransport
	}
	rec := &RetryAfterRecorder{next: base}
	return &http.Client{Transport: rec, Timeout: 90 * time.Second}, rec
}

// permanent reports whether the orchestrator refused a request for good: a 4xx other than 408
// and 429, and other than 401/403, which a fixed clock, a rotated key or a re-registered runner
// cure, so the report must be retried rather than dropped.
func permanent(err error) bool {
	var e *api.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.StatusCode {
	case http.StatusTooManyRequests, http.StatusRequestTimeout, http.StatusUnauthorized, http.StatusForbidden:
		return false
	}
	return e.StatusCode >= 400 && e.StatusCode < 500
}
