package statebackend

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

// fakePods is the executor's view of job pods: deployment id → its attempt 1's pod ("" gone).
type fakePods struct {
	mu   sync.Mutex
	pods map[string]string
}

func (f *fakePods) set(dep, pod string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[dep] = pod
}

func (f *fakePods) AttemptPod(_ context.Context, dep string, attempt int) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if attempt != 1 {
		return "", nil
	}
	return f.pods[dep], nil
}

// TestLockNamesItsPodAndGoesWithIt: a lock names the job pod the executor knows for its holder,
// whatever pod the CLI's lock info claims; the sweep releases it once the holder's attempt has
// ended and its pod is gone, and never while the attempt is alive or its pod still runs, nor a
// lock another runner's agent granted.
func TestLockNamesItsPodAndGoesWithIt(t *testing.T) {
	pods := &fakePods{pods: map[string]string{"alive": "outpost-alive-1-aaaaa", "ended": "outpost-ended-1-bbbbb", "running": "outpost-running-1-ccccc"}}
	// Locks younger than the sweep's grace are spared: the store's clock takes them in the past.
	past := func() time.Time { return time.Now().Add(-time.Minute) }
	e := newEnv(t, statestore.Options{Now: past, LockDuration: time.Hour}, WithAttemptPods(pods, "r1"), WithSweepInterval(200*time.Millisecond))
	for _, dep := range []string{"alive", "ended", "running"} {
		e.authz.add(dep, "pw-"+dep)
		var info statestore.LockInfo
		_ = json.Unmarshal(lockBody("lock-"+dep), &info)
		info.Pod = "claimed-by-the-cli"
		body, _ := json.Marshal(info)
		if code, b, _ := doReq(t, "LOCK", e.url("team/"+dep), dep, "pw-"+dep, body); code != 200 {
			t.Fatalf("LOCK %s: %d %s", dep, code, b)
		}
		l, err := e.store.LockInfo(context.Background(), "team/"+dep)
		if err != nil || l == nil || l.Info.Pod != pods.pods[dep] {
			t.Fatalf("lock of %s names pod %+v, %v; want %s", dep, l, err, pods.pods[dep])
		}
	}
	// A lock another runner's agent granted in the same namespace: this agent cannot judge it.
	if err := e.store.Lock(context.Background(), "team/foreign", statestore.LockInfo{ID: "foreign-lock", Holder: "job/foreign/1", Runner: "r2"}); err != nil {
		t.Fatal(err)
	}
	e.authz.kill("job/foreign/1")
	// "ended" and "running" end their attempts; "ended"'s pod goes, "running"'s stays.
	e.authz.kill("job/ended/1")
	e.authz.kill("job/running/1")
	pods.set("ended", "")
	start := time.Now()
	for {
		l, _ := e.store.LockInfo(context.Background(), "team/ended")
		if l == nil {
			t.Logf("released %v after the pod went", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the lock of an ended attempt whose pod is gone was not released within 5s (sweep every 200ms)")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // five sweeps
	for _, dep := range []string{"alive", "running", "foreign"} {
		if l, _ := e.store.LockInfo(context.Background(), "team/"+dep); l == nil {
			t.Errorf("the lock of %s was released; its attempt or its pod still lives", dep)
		}
	}
}
