package kubeclient

import (
	"fmt"
	"sync"
	"testing"
)

// The burst follows the runner's max_concurrency (five requests per attempt), never below the
// configured burst, and a grown bucket lets the whole wave through at once.
func TestLimiterSizesTheBurstForMaxConcurrency(t *testing.T) {
	l := NewLimiter(0.001, 100) // a rate so low that no token comes back during the test
	take := func() int {
		n := 0
		for l.TryAccept() {
			n++
		}
		return n
	}
	if got := take(); got != 100 {
		t.Fatalf("configured burst: %d requests passed at once, want 100", got)
	}
	l.SizeFor(20) // 100 requests: not above the configured burst, which stays
	if l.Burst() != 100 {
		t.Errorf("burst %d after max_concurrency 20, want the configured 100", l.Burst())
	}
	l.SizeFor(1000)
	if l.Burst() != 5000 {
		t.Errorf("burst %d after max_concurrency 1000, want 5000", l.Burst())
	}
	if got := take(); got != 5000 {
		t.Errorf("after growing: %d requests passed at once, want 5000 (the five requests of each of 1000 attempts)", got)
	}
	l.SizeFor(10)
	if l.Burst() != 100 {
		t.Errorf("burst %d after max_concurrency fell to 10, want the configured 100", l.Burst())
	}
	if l.QPS() != 0.001 {
		t.Errorf("QPS %v, want the configured 0.001", l.QPS())
	}
}

// A deferrable request (cleanup) waits until the requests waiting before it, and those that
// come while it waits, have their tokens.
func TestDeferrableRequestsGiveWay(t *testing.T) {
	l := NewLimiter(20, 1)
	if !l.TryAccept() {
		t.Fatal("the bucket should start with its one token")
	}
	var mu sync.Mutex
	var order []string
	done := func(who string) {
		mu.Lock()
		order = append(order, who)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := l.Wait(Deferrable(t.Context())); err != nil {
			t.Error(err)
		}
		done("cleanup")
	})
	for i := range 3 {
		wg.Go(func() {
			if err := l.Wait(t.Context()); err != nil {
				t.Error(err)
			}
			done(fmt.Sprint("start ", i))
		})
	}
	wg.Wait()
	if len(order) != 4 || order[3] != "cleanup" {
		t.Errorf("served in the order %q; want the three starts before the cleanup", order)
	}
}
