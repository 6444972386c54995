package store

import "sync"

// Notifier wakes the long polls of one runner when something they may answer with changes
// (a deployment queued, a cancel, a lease settled, the runner's limits). Each runner has a
// channel that is closed on wake and replaced; a poll takes the channel before it looks at the
// store, so a wake between the look and the wait is never lost.
//
// With several replicas, publish carries a wake to the others (PostgreSQL's NOTIFY), whose
// listeners call wakeLocal.
type Notifier struct {
	Publish func(runner string)

	mu       sync.Mutex
	channels map[string]chan struct{}
	inFlight map[string]int
}

// NewNotifier returns a notifier that wakes only this replica until Publish is set.
func NewNotifier() *Notifier {
	return &Notifier{channels: map[string]chan struct{}{}, inFlight: map[string]int{}}
}

// Watch returns the channel that is closed on the runner's next wake.
func (n *Notifier) Watch(runner string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch, ok := n.channels[runner]
	if !ok {
		ch = make(chan struct{})
		n.channels[runner] = ch
	}
	return ch
}

// Wake wakes every poll of the runner that is waiting now, on every replica.
func (n *Notifier) Wake(runner string) {
	n.WakeLocal(runner)
	if n.Publish != nil {
		n.Publish(runner)
	}
}

// WakeLocal wakes the polls of the runner waiting on this replica.
func (n *Notifier) WakeLocal(runner string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch, ok := n.channels[runner]; ok {
		close(ch)
		delete(n.channels, runner)
	}
}

// WakeAll wakes every poll waiting on this replica, after wakes from other replicas may have
// been missed.
func (n *Notifier) WakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for runner, ch := range n.channels {
		close(ch)
		delete(n.channels, runner)
	}
}

// Enter and leave count the polls in flight per runner; a runner with one counts as connected
// however long ago its poll started.
func (n *Notifier) Enter(runner string) {
	n.mu.Lock()
	n.inFlight[runner]++
	n.mu.Unlock()
}

// Leave ends what Enter counted.
func (n *Notifier) Leave(runner string) {
	n.mu.Lock()
	if n.inFlight[runner]--; n.inFlight[runner] <= 0 {
		delete(n.inFlight, runner)
	}
	n.mu.Unlock()
}

// Polling reports whether a poll of the runner is in flight on this replica.
func (n *Notifier) Polling(runner string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inFlight[runner] > 0
}
