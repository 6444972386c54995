package pods

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statebackend"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statecmd"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// lockReleaseBound is how long after its job pod is killed a state lock may stay held: the
// agent releases it when it sees the attempt end, and its sweep (statebackend.LockSweepEvery)
// releases what it could not see end; the rest is the kubelet and the informers catching up.
const lockReleaseBound = statebackend.LockSweepEvery + 20*time.Second

// TestStateLockOfAKilledPod runs an apply that holds its state lock, checks that the lock names
// the attempt and its job pod in the cluster and at the orchestrator, that an operator's break
// without a reason is refused while the holder lives, then kills the job pod (no grace: the CLI
// cannot unlock) and sees the lock released within lockReleaseBound, at the orchestrator too.
func TestStateLockOfAKilledPod(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := t.Context()
	const key = "locks/killed"
	d := e.enqueue(api.OperationApply, slow(300), key)
	pods := e.watchPods(d.ID)
	defer pods.stop()
	e.waitLog(d.ID, slowStarts, 3*time.Minute)

	store, err := statestore.New(e.c.Client(), e.stateNS, statestore.Options{Scope: org, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var held *statestore.HeldLock
	testbed.WaitFor(t, time.Minute, "the apply to hold the state lock", func() (bool, string) {
		held, err = store.LockInfo(ctx, key)
		return held != nil, "no lock"
	})
	pod := held.Info.Pod
	if held.Info.Holder != "job/"+d.ID+"/1" || pod == "" || !pods.names[pod] {
		t.Fatalf("lock held by %q in pod %q; want job/%s/1 in one of its job pods %v", held.Info.Holder, pod, d.ID, pods.names)
	}
	testbed.WaitFor(t, 30*time.Second, "the orchestrator to show the lock holder", func() (bool, string) {
		st, err := e.admin.GetState(ctx, "k8s", key)
		if err != nil || st.Lock == nil {
			return false, "not shown"
		}
		return st.Lock.DeploymentID == d.ID && st.Lock.Attempt == 1 && st.Lock.Pod == pod, st.Lock.Holder + " in " + st.Lock.Pod
	})

	// An operator's break without a reason is refused while the holder lives.
	var out, errb bytes.Buffer
	args := []string{"force-unlock", key, "--kubeconfig", e.c.Kubeconfig, "--namespace", e.stateNS, "--org-id", org}
	if code := statecmd.Main(args, statecmd.Defaults{}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "--reason") {
		t.Fatalf("force-unlock of a live lock without a reason: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if l, _ := store.LockInfo(ctx, key); l == nil || l.Info.ID != held.Info.ID {
		t.Fatalf("the live lock is gone after a refused break: %+v", l)
	}

	if err := e.c.Client().CoreV1().Pods(e.jobsNS).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	testbed.WaitFor(t, lockReleaseBound, "the lock of the killed pod's attempt to be released", func() (bool, string) {
		l, err := store.LockInfo(ctx, key)
		if err != nil {
			return false, err.Error()
		}
		return l == nil, "still held"
	})
	released := time.Since(killed)
	t.Logf("lock released %v after its pod was killed (bound %v)", released.Round(100*time.Millisecond), lockReleaseBound)
	testbed.WaitFor(t, 30*time.Second, "the orchestrator to show the state unlocked", func() (bool, string) {
		st, err := e.admin.GetState(ctx, "k8s", key)
		return err == nil && st.Lock == nil, "still shown locked"
	})
	r := e.follow(d.ID, killed, 3*time.Minute)
	if r.d.Status == api.StatusSucceeded || r.d.Attempt != 1 {
		t.Errorf("deployment %s in attempt %d after its apply pod was killed; want it ended, not succeeded, in attempt 1", r.d.Status, r.d.Attempt)
	}
}
