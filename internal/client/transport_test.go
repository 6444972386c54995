package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
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
	_, err := c.CreateDeployment(context.Background(), api.DeploymentInput{})
	if !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("err %v must be api.ErrUnavailable", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("a create that may have been applied must not be retried; got %d calls", calls.Load())
	}
	// An idempotent read is retried up to MaxTries.
	calls.Store(0)
	_, err = c.GetDeployment(context.Background(), "d")
	if err == nil || calls.Load() != int32(DefaultRetryPolicy.MaxTries) {
		t.Fatalf("GET retried %d times (err %v), want %d", calls.Load(), err, DefaultRetryPolicy.MaxTries)
	}
}

func TestTypedErrors(t *testing.T) {
	cases := []struct {
		status int
		body   string
		want   error
		field  string
	}{
		{404, `{"error":{"code":"not_found","message":"runner \"x\" not found"}}`, api.ErrNotFound, ""},
		{409, `{"error":{"code":"conflict","message":"exists"}}`, api.ErrConflict, ""},
		{400, `{"error":{"code":"invalid_argument","message":"bad","field":"job.pod_template"}}`, api.ErrInvalid, "job.pod_template"},
		{401, `not json`, api.ErrUnauthorized, ""},
		{413, `{"error":{"code":"too_large","message":"max 1 MiB"}}`, api.ErrTooLarge, ""},
	}
	for _, tc := range cases {
		c, _ := newTestAdmin(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Request-Id", "req-1")
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		})
		_, err := c.CreateRunner(context.Background(), api.RunnerInput{})
		if !errors.Is(err, tc.want) {
			t.Errorf("status %d: %v is not %v", tc.status, err, tc.want)
			continue
		}
		var apiErr *api.Error
		if !errors.As(err, &apiErr) || apiErr.Field != tc.field || apiErr.RequestID != "req-1" {
			t.Errorf("status %d: details %+v", tc.status, apiErr)
		}
	}
}

func TestBackoffIsBoundedFullJitter(t *testing.T) {
	c, slept := newTestAdmin(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	c.t.retry = RetryPolicy{MaxTries: 10, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	for range 50 {
		*slept = nil
		if _, err := c.GetDeployment(context.Background(), "d"); err == nil {
			t.Fatal("a 503 must fail the call once the attempts are used up")
		}
		for i, d := range *slept {
			attempt := i + 1
			ceil := min(100*time.Millisecond<<(attempt-1), time.Second)
			if d < 0 || d > ceil {
				t.Fatalf("attempt %d: %v outside [0,%v]", attempt, d, ceil)
			}
		}
	}
	c2, slept2 := newTestAdmin(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	c2.t.retry = RetryPolicy{MaxTries: 2, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	_, _ = c2.GetDeployment(context.Background(), "d")
	if len(*slept2) != 1 || (*slept2)[0] < 5*time.Second {
		t.Fatalf("backoff %v below the server's Retry-After", *slept2)
	}
}

// The Retry-After of the last answer travels on the error, so the loops above the client (the
// agent's poll and events) never come back sooner than the orchestrator asked.
func TestRetryAfterOnTheError(t *testing.T) {
	c, _ := newTestAdmin(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	_, err := c.GetRunner(context.Background(), "r1")
	if d := api.RetryAfter(err); d != 7*time.Second {
		t.Errorf("RetryAfter(%v) = %v, want 7s", err, d)
	}
}

// A create refused for its credentials is not sent again: only an operator cures a 401.
func TestUnauthorizedCreateNotRetried(t *testing.T) {
	var calls atomic.Int32
	c, _ := newTestAdmin(t, func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
	})
	if _, err := c.CreateRunner(context.Background(), api.RunnerInput{}); !errors.Is(err, api.ErrUnauthorized) || calls.Load() != 1 {
		t.Fatalf("err %v after %d calls; want ErrUnauthorized after one", err, calls.Load())
	}
}

func TestConnectionRefusedRetriedEvenForCreate(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := NewAdminClient(url, "acme", "tok", WithRetryPolicy(RetryPolicy{MaxTries: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	var tries int
	c.t.hook = func(_ context.Context, info RequestInfo) { tries = info.Try }
	_, err = c.CreateRunner(context.Background(), api.RunnerInput{})
	if !errors.Is(err, api.ErrUnavailable) || tries != 3 {
		t.Fatalf("err %v after %d tries; a request never sent is safe to retry", err, tries)
	}
}

func TestNewAdminClientRejectsBadInput(t *testing.T) {
	if _, err := NewAdminClient("not a url", "acme", "t"); err == nil {
		t.Error("relative URL accepted")
	}
	if _, err := NewAdminClient("http://x", "Bad_Org", "t"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("bad org: %v", err)
	}
	if _, err := NewAdminClient("http://x", "acme", ""); err == nil {
		t.Error("empty token accepted")
	}
}
