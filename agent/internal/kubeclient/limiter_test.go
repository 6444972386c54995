package kubeclient

import "testing"

// The burst follows the runner's max_concurrency (two writes per attempt), never below the
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
	l.SizeFor(20) // 40 writes: below the configured burst, which stays
	if l.Burst() != 100 {
		t.Errorf("burst %d after max_concurrency 20, want the configured 100", l.Burst())
	}
	l.SizeFor(1000)
	if l.Burst() != 2000 {
		t.Errorf("burst %d after max_concurrency 1000, want 2000", l.Burst())
	}
	if got := take(); got != 2000 {
		t.Errorf("after growing: %d requests passed at once, want 2000 (a Job and a Secret for each of 1000 attempts)", got)
	}
	l.SizeFor(10)
	if l.Burst() != 100 {
		t.Errorf("burst %d after max_concurrency fell to 10, want the configured 100", l.Burst())
	}
	if l.QPS() != 0.001 {
		t.Errorf("QPS %v, want the configured 0.001", l.QPS())
	}
}
