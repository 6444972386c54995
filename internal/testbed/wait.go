package testbed

import (
	"testing"
	"time"
)

// WaitFor polls cond every 200 ms until it holds, and fails the test when timeout passes first,
// naming what it waited for and the last state cond described (cond returns "" to keep the
// previous one).
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		if state != "" {
			last = state
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
