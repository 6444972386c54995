package kubeclient

import (
	"context"
	"sync"
	"sync/atomic"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/flowcontrol"
)

// WritesPerStart is how many API writes starting one attempt costs the kubernetes executor: its
// Job and its token Secret.
const WritesPerStart = 2

// Limiter is the agent's client-side rate limit: a token bucket of the configured QPS whose burst
// grows with the runner's max_concurrency, so a wave of offers as large as the runner allows (a
// burst of queued deployments) starts every Job at once instead of queueing behind the client's
// own limit. The sustained rate stays the configured QPS; the API server's priority and fairness
// protects it beyond that.
type Limiter struct {
	mu    sync.Mutex
	qps   rate.Limit
	burst int // the configured burst, the floor of SizeFor
	l     atomic.Pointer[rate.Limiter]
}

var _ flowcontrol.RateLimiter = (*Limiter)(nil)

// NewLimiter returns a limiter of qps requests per second with a burst of burst.
func NewLimiter(qps float32, burst int) *Limiter {
	l := &Limiter{qps: rate.Limit(qps), burst: burst}
	l.l.Store(rate.NewLimiter(l.qps, burst))
	return l
}

// SizeFor sizes the burst for maxConcurrency attempts started at once: WritesPerStart for each,
// never below the configured burst. The agent calls it whenever the runner's limit changes. A
// bucket that grows starts full, so the first wave the new limit lets in is not throttled; one
// that stays the same size keeps its tokens.
func (l *Limiter) SizeFor(maxConcurrency int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	want := max(l.burst, WritesPerStart*maxConcurrency)
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
func (l *Limiter) Accept() { _ = l.l.Load().Wait(context.Background()) }

// Wait implements flowcontrol.RateLimiter.
func (l *Limiter) Wait(ctx context.Context) error { return l.l.Load().Wait(ctx) }

// QPS implements flowcontrol.RateLimiter.
func (l *Limiter) QPS() float32 { return float32(l.qps) }

// Stop implements flowcontrol.RateLimiter.
func (l *Limiter) Stop() {}
