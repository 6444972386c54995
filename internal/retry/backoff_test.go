package retry

import (
	"context"
	"testing"
	"time"
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

// Full jitter: the waits of one step spread over the whole range instead of bunching at its top,
// which is what keeps a fleet that failed together from retrying together.
func TestBackoffSpreads(t *testing.T) {
	var below, above int
	for range 1000 {
		b := Backoff{Base: time.Second, Max: time.Second}
		if b.Next(0) < 500*time.Millisecond {
			below++
		} else {
			above++
		}
	}
	if below < 350 || above < 350 {
		t.Fatalf("waits not spread over [0, 1s]: %d below 500ms, %d above", below, above)
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	if err := Sleep(t.Context(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Sleep(ctx, time.Hour); err == nil {
		t.Fatal("Sleep of a canceled context must return its error")
	}
}
