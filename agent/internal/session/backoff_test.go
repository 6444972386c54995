package session

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

func TestBackoffBounds(t *testing.T) {
	b := Backoff{Base: time.Second, Max: 30 * time.Second}
	for n := 0; n < 40; n++ {
		ceil := min(time.Second<<min(n, 30), 30*time.Second)
		for i := 0; i < 200; i++ {
			probe := b
			probe.n = n
			if d := probe.Next(0); d < 0 || d > ceil {
				t.Fatalf("wait %d = %v outside [0, %v]", n, d, ceil)
			}
		}
	}
	// The extremes are reachable (full jitter), and Retry-After is a floor.
	lo := Backoff{Base: time.Second, Max: 8 * time.Second, rand: func(int64) int64 { return 0 }}
	hi := Backoff{Base: time.Second, Max: 8 * time.Second, rand: func(n int64) int64 { return n - 1 }}
	var got []time.Duration
	for i := 0; i < 5; i++ {
		got = append(got, hi.Next(0))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("ceiling %d = %v, want %v", i, got[i], want[i])
		}
	}
	if d := lo.Next(5 * time.Second); d != 5*time.Second {
		t.Errorf("Retry-After floor: got %v", d)
	}
	hi.Reset()
	if hi.Failures() != 0 || hi.Next(0) != time.Second {
		t.Error("Reset did not start over")
	}
}

func TestRetryAfterRecorded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c, rec := NewHTTPClient(nil)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := rec.Take(); d != 7*time.Second {
		t.Errorf("Take = %v, want 7s", d)
	}
	if d := rec.Take(); d != 0 {
		t.Errorf("second Take = %v, want 0", d)
	}
}

func TestPermanent(t *testing.T) {
	for code, want := range map[int]bool{400: true, 404: true, 409: true, 401: false, 403: false, 408: false, 429: false, 500: false, 503: false} {
		if got := permanent(&api.Error{StatusCode: code}); got != want {
			t.Errorf("permanent(%d) = %v", code, got)
		}
	}
	if permanent(api.ErrUnavailable) {
		t.Error("network errors are not permanent")
	}
}
