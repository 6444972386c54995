package session

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// eventQueues are a term's two work queues of attempts, each with its workers: sends (started
// and finished events) and cleanups. A key is never worked on by two workers at once; a key added
// while it is being worked on is worked on again afterwards, from the state of that moment.
type eventQueues struct {
	sends, cleanups         workqueue.TypedRateLimitingInterface[executor.AttemptKey]
	sendRetry, cleanupRetry *retryLimiter
}

func newEventQueues(back retry.Backoff) *eventQueues {
	q := &eventQueues{sendRetry: newRetryLimiter(back), cleanupRetry: newRetryLimiter(back)}
	q.sends = workqueue.NewTypedRateLimitingQueueWithConfig[executor.AttemptKey](q.sendRetry, workqueue.TypedRateLimitingQueueConfig[executor.AttemptKey]{})
	q.cleanups = workqueue.NewTypedRateLimitingQueueWithConfig[executor.AttemptKey](q.cleanupRetry, workqueue.TypedRateLimitingQueueConfig[executor.AttemptKey]{})
	return q
}

// queue adds an attempt to the queue its phase calls for, unless it waits out a retry there (the
// retry adds it when due).
func (q *eventQueues) queue(k executor.AttemptKey, ph phase) {
	switch ph {
	case phaseSendProgress, phaseSendStarted, phaseSendFinished:
		if q.sendRetry.NumRequeues(k) == 0 {
			q.sends.Add(k)
		}
	case phaseCleanup:
		if q.cleanupRetry.NumRequeues(k) == 0 {
			q.cleanups.Add(k)
		}
	}
}

// work is one worker: it takes keys from queue until the queue shuts down. A key's work runs to
// its end even when the session stops (losing leadership or SIGTERM must not leave a half-sent
// or acknowledged-but-not-cleaned attempt behind), bounded by FinalTimeout.
func (s *Session) work(ctx context.Context, queue workqueue.TypedRateLimitingInterface[executor.AttemptKey], process func(context.Context, executor.AttemptKey)) {
	for {
		k, shutdown := queue.Get()
		if shutdown {
			return
		}
		func() {
			defer queue.Done(k)
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.FinalTimeout)
			defer cancel()
			process(wctx, k)
		}()
	}
}

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
