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
//
// The bound on how long one job can delay another's state request: a request waits at most
// QueueWait for a turn (then 503 with Retry-After, which the CLIs retry); one job holds at most
// MaxRequestsPerJob of the MaxRequests turns (so with the defaults a single job, however hostile,
// leaves half the turns to the others), a turn at most RequestTimeout, and a waiting request of
// a job with fewer turns goes before one of a job with more, and among equals the job whose turn
// just ended goes last (round robin), then the earlier first. The
// connections under the requests are shared by package connguard (agent/run.go).

// Limits bound the state backend's work in progress. The first three carry the names of the
// agent's configuration file (state.limits, the chart's values of the same name).
type Limits struct {
	// MaxBodyBytes is the largest state upload (413 above it). It bounds what one job can make
	// the agent store, not memory: bodies are streamed. Default 64 MiB.
	MaxBodyBytes int64 `json:"maxBodyBytes"`
	// MaxRequests are served at once; more wait up to QueueWait for a turn, then get 503 with
	// Retry-After (the CLIs retry). Default 4.
	MaxRequests int `json:"maxRequests"`
	// MaxRequestsPerJob are served at once or wait for a turn for one lock holder (one
	// attempt's job runner, which sends one request at a time); more get 429 at once. Default 2.
	MaxRequestsPerJob int `json:"maxRequestsPerJob"`
	// QueueWait is how long a request waits for a turn. Default 10 s.
	QueueWait time.Duration `json:"-"`
	// RequestTimeout is how long a request may hold its turn: its body must have arrived and
	// its answer been sent by then, else its connection is cut. Default 2 min (a 64 MiB state at
	// 0.5 MiB/s).
	RequestTimeout time.Duration `json:"-"`
}

// Defaults of Limits.
const (
	DefaultMaxRequests       = 4
	DefaultMaxRequestsPerJob = 2
	DefaultQueueWait         = 10 * time.Second
	DefaultRequestTimeout    = 2 * time.Minute
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
	if l.RequestTimeout <= 0 {
		l.RequestTimeout = DefaultRequestTimeout
	}
	return l
}

// limiter admits requests within Limits. One limiter serves every namespace's handler.
type limiter struct {
	l Limits

	mu       sync.Mutex
	serving  int            // requests holding a turn
	perJob   map[string]int // requests of a holder holding or waiting for a turn
	turns    map[string]int // requests of a holder holding a turn
	waiting  []*waiter
	arrivals uint64
}

// waiter is a request waiting for a turn; ready is closed when it got one.
type waiter struct {
	holder string
	seq    uint64
	ready  chan struct{}
	got    bool
}

func newLimiter(l Limits) *limiter {
	l = l.withDefaults()
	return &limiter{l: l, perJob: map[string]int{}, turns: map[string]int{}}
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
	release = func() { l.release(holder) }
	if l.serving < l.l.MaxRequests && len(l.waiting) == 0 {
		l.serving++
		l.turns[holder]++
		l.mu.Unlock()
		return release, admitted
	}
	l.arrivals++
	w := &waiter{holder: holder, seq: l.arrivals, ready: make(chan struct{})}
	l.waiting = append(l.waiting, w)
	l.mu.Unlock()

	t := time.NewTimer(l.l.QueueWait)
	defer t.Stop()
	select {
	case <-w.ready:
		return release, admitted
	case <-t.C:
		why = serverBusy
	case <-ctx.Done():
		why = gone
	}
	l.mu.Lock()
	if w.got { // the turn came as the wait ended: take it
		l.mu.Unlock()
		return release, admitted
	}
	for i, o := range l.waiting {
		if o == w {
			l.waiting = append(l.waiting[:i], l.waiting[i+1:]...)
			break
		}
	}
	l.dropLocked(holder)
	l.mu.Unlock()
	return nil, why
}

// release ends holder's turn and hands it to the waiting request of the job with the fewest
// turns, holder's own last among equals, then the earliest.
func (l *limiter) release(holder string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.serving--
	if l.turns[holder]--; l.turns[holder] <= 0 {
		delete(l.turns, holder)
	}
	l.dropLocked(holder)
	if len(l.waiting) == 0 {
		return
	}
	// The job whose turn just ended goes after the others with as many turns: round robin.
	rank := func(w *waiter) (int, int, uint64) {
		again := 0
		if w.holder == holder {
			again = 1
		}
		return l.turns[w.holder], again, w.seq
	}
	next := 0
	for i, w := range l.waiting {
		t1, a1, s1 := rank(w)
		t2, a2, s2 := rank(l.waiting[next])
		if t1 < t2 || (t1 == t2 && (a1 < a2 || (a1 == a2 && s1 < s2))) {
			next = i
		}
	}
	w := l.waiting[next]
	l.waiting = append(l.waiting[:next], l.waiting[next+1:]...)
	l.serving++
	l.turns[w.holder]++
	w.got = true
	close(w.ready)
}

func (l *limiter) dropLocked(holder string) {
	if l.perJob[holder]--; l.perJob[holder] <= 0 {
		delete(l.perJob, holder)
	}
}
