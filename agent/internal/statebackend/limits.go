package statebackend

import (
	"context"
	"sync"
	"time"
)

// The state backend is reached by job pods, which run code the cluster owner does not control,
// so what one job (or all of them) can make the agent hold at once is bounded: request bodies
// and state reads are streamed (a request needs memory for a few chunks, whatever the size of
// the state), bodies are limited in size, and requests are served a few at a time, overall and
// per job. With the defaults the state backend needs well under 100 MiB at its busiest.

// Limits bound the state backend's work in progress.
type Limits struct {
	// MaxBodyBytes is the largest state upload (413 above it). It bounds what one job can make
	// the agent store, not memory: bodies are streamed. Default 64 MiB.
	MaxBodyBytes int64
	// MaxRequests are served at once; more wait up to QueueWait for a turn, then get 503 with
	// Retry-After (the CLIs retry). Default 4.
	MaxRequests int
	// MaxRequestsPerJob are served at once for one lock holder (one attempt's job runner, which
	// sends one request at a time); more get 429 at once. Default 2.
	MaxRequestsPerJob int
	// QueueWait is how long a request waits for a turn. Default 10 s.
	QueueWait time.Duration
}

// Defaults of Limits.
const (
	DefaultMaxRequests       = 4
	DefaultMaxRequestsPerJob = 2
	DefaultQueueWait         = 10 * time.Second
)

func (l Limits) withDefaults() Limits {
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.MaxRequests <= 0 {
		l.MaxRequests = DefaultMaxRequests
	}
	if l.MaxRequestsPerJob <= 0 {
		l.MaxRequestsPerJob = DefaultMaxRequestsPerJob
	}
	if l.QueueWait <= 0 {
		l.QueueWait = DefaultQueueWait
	}
	return l
}

// limiter admits requests within Limits. One limiter serves every namespace's handler.
type limiter struct {
	l     Limits
	slots chan struct{}

	mu     sync.Mutex
	perJob map[string]int
}

func newLimiter(l Limits) *limiter {
	l = l.withDefaults()
	return &limiter{l: l, slots: make(chan struct{}, l.MaxRequests), perJob: map[string]int{}}
}

// admission is why a request was not admitted.
type admission int

const (
	admitted   admission = iota
	jobBusy              // the job has MaxRequestsPerJob in flight
	serverBusy           // no turn within QueueWait
	gone                 // the client went away while waiting
)

// admit waits for a turn for holder's request; release must be called when it is done.
func (l *limiter) admit(ctx context.Context, holder string) (release func(), why admission) {
	l.mu.Lock()
	if l.perJob[holder] >= l.l.MaxRequestsPerJob {
		l.mu.Unlock()
		return nil, jobBusy
	}
	l.perJob[holder]++
	l.mu.Unlock()
	done := func() {
		l.mu.Lock()
		if l.perJob[holder]--; l.perJob[holder] <= 0 {
			delete(l.perJob, holder)
		}
		l.mu.Unlock()
	}
	t := time.NewTimer(l.l.QueueWait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return func() { <-l.slots; done() }, admitted
	case <-t.C:
		done()
		return nil, serverBusy
	case <-ctx.Done():
		done()
		return nil, gone
	}
}
