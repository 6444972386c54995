package api

import (
	"fmt"
	"testing"
	"time"
)

func TestPermanent(t *testing.T) {
	for code, want := range map[int]bool{400: true, 404: true, 409: true, 401: false, 403: false, 408: false, 429: false, 500: false, 503: false} {
		if got := Permanent(&Error{StatusCode: code}); got != want {
			t.Errorf("permanent(%d) = %v", code, got)
		}
	}
	if Permanent(ErrUnavailable) {
		t.Error("network errors are not permanent")
	}
	if !Permanent(fmt.Errorf("POST /x: %w", &Error{StatusCode: 422})) {
		t.Error("a wrapped 422 is permanent")
	}
}

func TestRetryAfterTravelsOnTheError(t *testing.T) {
	err := fmt.Errorf("poll: %w", &Error{StatusCode: 503, RetryAfter: 7 * time.Second})
	if d := RetryAfter(err); d != 7*time.Second {
		t.Errorf("RetryAfter = %v, want 7s", d)
	}
	if d := RetryAfter(ErrUnavailable); d != 0 {
		t.Errorf("RetryAfter of a network error = %v, want 0", d)
	}
}
