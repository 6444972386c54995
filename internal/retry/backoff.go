// Package retry is Outpost's one retry policy: how long to wait between tries (Backoff:
// exponential with full jitter, never sooner than the server asked) and whether a try that
// failed may be made again (one decision per intent, see Decision). Every loop that talks to the
// orchestrator uses it: the API client's retries, the agent's poll and event delivery, the job
// runner's log stream, and the agent's session restarts.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is exponential backoff with full jitter: the n-th wait is uniform in [0, min(Max,
// Base·2ⁿ)], never below what the server asked for with Retry-After. Full jitter spreads a fleet
// of agents (or job pods) that all lost the orchestrator at once, so they do not come back in
// lock-step; the ceiling keeps a long outage from turning into hour-long waits. The zero value
// of n starts at Base; Reset starts over after a success. A Backoff is not safe for concurrent
// use: each loop keeps its own.
type Backoff struct {
	// Base is the first ceiling; it doubles after every failure up to Max.
	Base time.Duration
	// Max bounds every wait (except a longer Retry-After, which wins).
	Max time.Duration

	n    int
	rand func(int64) int64 // uniform in [0, n); rand.Int64N unless a test fixes it
}

// Next returns the wait before the next try. atLeast is the server's minimum (its
// Retry-After; 0 when it said nothing).
func (b *Backoff) Next(atLeast time.Duration) time.Duration {
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
	if d < atLeast {
		d = atLeast
	}
	return d
}

// Reset starts over after a success.
func (b *Backoff) Reset() { b.n = 0 }

// Failures is how many waits were handed out since the last Reset.
func (b *Backoff) Failures() int { return b.n }

// Sleep waits d, or until ctx ends (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
