package kubeclient

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/flowcontrol"
)

// RequestsPerAttempt is how many API requests one attempt costs the kubernetes executor over its
// life: its Job and its token Secret created, and once its finished event is acknowledged, the
// Secret deleted, the Job labelled into the history and the history's oldest Job deleted.
const RequestsPerAttempt = 5

// Limiter is the agent's client-side rate limit: a token bucket of the configured QPS whose burst
// grows with the runner's max_concurrency, so a wave of offers as large as the runner allows (a
// burst of queued deployments) starts every Job at once, and is cleaned up when it ends, instead
// of queueing behind the client's own limit. The sustained rate stays the configured QPS; the API
// server's priority and fairness protects it beyond that.
//
// Requests made with a Deferrable context (cleanup after an attempt ended) give way: they take a
// token only when no other request is waiting for one, or once they have waited maxDefer. So
// when the agent runs at its sustained rate, the cleanup of ended attempts never delays the
// start of a new one; it catches up as soon as starts leave room, and never waits long.
type Limiter struct {
	mu    sync.Mutex
	qps   rate.Limit
	burst int // the configured burst, the floor of SizeFor
	l     atomic.Pointer[rate.Limiter]
	// waiting counts requests that are not deferrable and wait for a token.
	waiting atomic.Int64
	// gate lets one deferrable request at a time look for a token, every tick (a token's
	// interval at the configured QPS, within 1–100 ms).
	gate chan struct{}
	tick time.Duration
}

// maxDefer bounds how long a deferrable request gives way before it queues like any other.
const maxDefer = 2 * time.Second

type deferrableKey struct{}

// Deferrable marks the requests made with the returned context as ones that give way to the
// agent's other requests at its rate limit (see Limiter).
func Deferrable(ctx context.Context) context.Context {
	return context.WithValue(ctx, deferrableKey{}, true)
}

func deferrable(ctx context.Context) bool {
	d, _ := ctx.Value(deferrableKey{}).(bool)
	return d
}

var _ flowcontrol.RateLimiter = (*Limiter)(nil)

// NewLimiter returns a limiter of qps requests per second with a burst of burst.
func NewLimiter(qps float32, burst int) *Limiter {
	l := &Limiter{qps: rate.Limit(qps), burst: burst, gate: make(chan struct{}, 1), tick: 100 * time.Millisecond}
	if qps > 0 {
		l.tick = min(max(time.Duration(float64(time.Second)/float64(qps)), time.Millisecond), l.tick)
	}
	l.l.Store(rate.NewLimiter(l.qps, burst))
	return l
}

// SizeFor sizes the burst for the whole life of maxConcurrency attempts started at once:
// RequestsPerAttempt for each, never below the configured burst. The agent calls it whenever the
// runner's limit changes. A bucket that grows starts full, so the first wave the new limit lets
// in is not throttled; one that stays the same size keeps its tokens.
func (l *Limiter) SizeFor(maxConcurrency int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	want := max(l.burst, RequestsPerAttempt*maxConcurrency)
	cur := l.l.Load()
	switch {
	case want > cur.Burst():
		l.l.Store(rate.NewLimiter(l.qps, want))
	case want < cur.Burst():
		cur.SetBurst(want)
	}
}

// Burst returns the current burst.
func (l *Limiter) Burst() int { return l.l.Load().Burst() }

// TryAccept implements flowcontrol.RateLimiter.
func (l *Limiter) TryAccept() bool { return l.l.Load().Allow() }

// Accept implements flowcontrol.RateLimiter.
func (l *Limiter) Accept() { _ = l.Wait(context.Background()) }

// Wait implements flowcontrol.RateLimiter.
func (l *Limiter) Wait(ctx context.Context) error {
	if deferrable(ctx) {
		return l.waitDeferred(ctx)
	}
	l.waiting.Add(1)
	defer l.waiting.Add(-1)
	return l.l.Load().Wait(ctx)
}

// waitDeferred takes a token for a deferrable request. A token is free now only when every
// request that waits has been served: those take theirs ahead (a reservation), which leaves none
// until they are due. Deferrable requests look one at a time (the gate), so however many wait,
// the limiter is checked once per token interval, not once per request.
func (l *Limiter) waitDeferred(ctx context.Context) error {
	deadline := time.NewTimer(maxDefer)
	defer deadline.Stop()
	select {
	case l.gate <- struct{}{}:
	case <-deadline.C:
		return l.l.Load().Wait(ctx)
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l.gate }()
	for {
		lim := l.l.Load()
		if l.waiting.Load() == 0 && lim.Allow() {
			return nil
		}
		t := time.NewTimer(l.tick)
		select {
		case <-t.C:
		case <-deadline.C:
			t.Stop()
			return lim.Wait(ctx)
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// QPS implements flowcontrol.RateLimiter.
func (l *Limiter) QPS() float32 { return float32(l.qps) }

// Stop implements flowcontrol.RateLimiter.
func (l *Limiter) Stop() {}
