package session

import (
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// retryLimiter paces the retries of an attempt's sends or cleanup with the session's one
// backoff (full jitter), never sooner than a Retry-After the orchestrator sent. It is the work
// queue's rate limiter (workqueue.TypedRateLimiter): NumRequeues tells a pass that an attempt
// waits out a retry, Forget ends that.
type retryLimiter struct {
	mu   sync.Mutex
	base retry.Backoff
	keys map[executor.AttemptKey]*retryState
}

type retryState struct {
	back  retry.Backoff
	tries int
}

func newRetryLimiter(base retry.Backoff) *retryLimiter {
	return &retryLimiter{base: base, keys: map[executor.AttemptKey]*retryState{}}
}

// next is the wait before the next try of k, at least retryAfter.
func (l *retryLimiter) next(k executor.AttemptKey, retryAfter time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.keys[k]
	if st == nil {
		st = &retryState{back: l.base}
		l.keys[k] = st
	}
	st.tries++
	return st.back.Next(retryAfter)
}

// When is next without a Retry-After (workqueue.TypedRateLimiter).
func (l *retryLimiter) When(k executor.AttemptKey) time.Duration { return l.next(k, 0) }

// Forget drops k's backoff: its work succeeded, or is no longer due.
func (l *retryLimiter) Forget(k executor.AttemptKey) {
	l.mu.Lock()
	delete(l.keys, k)
	l.mu.Unlock()
}

// NumRequeues is how many tries of k failed since it was last forgotten.
func (l *retryLimiter) NumRequeues(k executor.AttemptKey) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.keys[k]; st != nil {
		return st.tries
	}
	return 0
}

// waiting lists the keys that wait out a retry.
func (l *retryLimiter) waiting() []executor.AttemptKey {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]executor.AttemptKey, 0, len(l.keys))
	for k := range l.keys {
		out = append(out, k)
	}
	return out
}
