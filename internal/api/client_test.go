package api

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// newTestAdmin returns a client whose sleeps are recorded, not slept.
func newTestAdmin(t *testing.T, h http.HandlerFunc) (*AdminClient, *[]time.Duration) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := NewAdminClient(srv.URL, "acme", "tok")
	if err != nil {
		t.Fatal(err)
	}
	var slept []time.Duration
	c.t.sleep = func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }
	return c, &slept
}

func TestRetriesHonourRetryAfter(t *testing.T) {
	var calls atomic.Int32
	c, slept := newTestAdmin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			t.Errorf("missing admin token")
		}
		if calls.Add(1) < 3 {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = w.Write([]byte(`{"id":"r1","type":"kubernetes-agent"}`))
	})
	r, err := c.GetRunner(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "r1" || calls.Load() != 3 {
		t.Fatalf("runner %+v after %d calls", r, calls.Load())
	}
	if len(*slept) != 2 || (*slept)[0] < 7*time.Second || (*slept)[1] < 7*time.Second {
		t.Fatalf("waits %v must honour Retry-After of 7s", *slept)
	}
}

func TestNonIdempotentNotRetriedOn500(t *testing.T) {
	var calls atomic.Int32
	c, _ := newTestAdmin(t, func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":{"code":"internal","message":"boom"}}`))
	})
	_, err := c.CreateDeployment(context.Background(), DeploymentInput{})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err %v must be ErrUnavailable", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("a create that may have been applied must not be retried; got %d calls", calls.Load())
	}
	// An idempotent read is retried up to MaxAttempts.
	calls.Store(0)
	_, err = c.GetDeployment(context.Background(), "d")
	if err == nil || calls.Load() != int32(DefaultRetryPolicy.MaxAttempts) {
		t.Fatalf("GET retried %d times (err %v), want %d", calls.Load(), err, DefaultRetryPolicy.MaxAttempts)
	}
}

func TestTypedErrors(t *testing.T) {
	cases := []struct {
		status int
		body   string
		want   error
		field  string
	}{
		{404, `{"error":{"code":"not_found","message":"runner \"x\" not found"}}`, ErrNotFound, ""},
		{409, `{"error":{"code":"conflict","message":"exists"}}`, ErrConflict, ""},
		{400, `{"error":{"code":"invalid_argument","message":"bad","field":"job.pod_template"}}`, ErrInvalid, "job.pod_template"},
		{401, `not json`, ErrUnauthorized, ""},
		{413, `{"error":{"code":"too_large","message":"max 1 MiB"}}`, ErrTooLarge, ""},
	}
	for _, tc := range cases {
		c, _ := newTestAdmin(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Request-Id", "req-1")
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		})
		_, err := c.CreateRunner(context.Background(), RunnerInput{})
		if !errors.Is(err, tc.want) {
			t.Errorf("status %d: %v is not %v", tc.status, err, tc.want)
			continue
		}
		var apiErr *Error
		if !errors.As(err, &apiErr) || apiErr.Field != tc.field || apiErr.RequestID != "req-1" {
			t.Errorf("status %d: details %+v", tc.status, apiErr)
		}
	}
}

func TestBackoffIsBoundedFullJitter(t *testing.T) {
	tr := &transport{retry: RetryPolicy{MaxAttempts: 10, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}}
	for attempt := 1; attempt < 10; attempt++ {
		for range 50 {
			d := tr.backoff(attempt, 0)
			ceil := min(100*time.Millisecond<<(attempt-1), time.Second)
			if d < 0 || d > ceil {
				t.Fatalf("attempt %d: %v outside [0,%v]", attempt, d, ceil)
			}
		}
	}
	if d := tr.backoff(1, 5*time.Second); d < 5*time.Second {
		t.Fatalf("backoff %v below the server's Retry-After", d)
	}
}

func TestConnectionRefusedRetriedEvenForCreate(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := NewAdminClient(url, "acme", "tok", WithRetryPolicy(RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	var attempts int
	c.t.hook = func(_ context.Context, info RequestInfo) { attempts = info.Attempt }
	_, err = c.CreateRunner(context.Background(), RunnerInput{})
	if !errors.Is(err, ErrUnavailable) || attempts != 3 {
		t.Fatalf("err %v after %d attempts; a request never sent is safe to retry", err, attempts)
	}
}

func TestNewAdminClientRejectsBadInput(t *testing.T) {
	if _, err := NewAdminClient("not a url", "acme", "t"); err == nil {
		t.Error("relative URL accepted")
	}
	if _, err := NewAdminClient("http://x", "Bad_Org", "t"); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad org: %v", err)
	}
	if _, err := NewAdminClient("http://x", "acme", ""); err == nil {
		t.Error("empty token accepted")
	}
}
