package statebackend

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

func doReq(t *testing.T, method, url, user, pw string, body []byte) (int, []byte, http.Header) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pw)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func stateDoc(serial int, payload string) []byte {
	return fmt.Appendf(nil, `{"version":4,"terraform_version":"1.11.4","serial":%d,"lineage":"lin","outputs":{"p":{"value":%q,"type":"string"}},"resources":[],"check_results":null}`, serial, payload)
}

func lockBody(id string) []byte {
	b, _ := json.Marshal(statestore.LockInfo{ID: id, Operation: "OperationTypeApply", Who: "me@host", Version: "1.11.4", Created: time.Now().UTC()})
	return b
}

func TestProtocol(t *testing.T) {
	e := newEnv(t, statestore.Options{})
	e.authz.add("alice", "pw-a")
	e.authz.add("bob", "pw-b")
	e.authz.allowed["mallory"] = "mallory/own"
	e.authz.add("mallory", "pw-m")
	key := "team-a/prod/network"
	u := e.url(key)
	if !strings.Contains(u, "team-a%2Fprod%2Fnetwork") {
		t.Fatalf("url %s", u)
	}

	// Authentication and authorisation.
	if code, _, h := doReq(t, "GET", u, "", "", nil); code != 401 || h.Get("WWW-Authenticate") == "" {
		t.Errorf("no credentials: %d", code)
	}
	if code, _, _ := doReq(t, "GET", u, "alice", "wrong", nil); code != 401 {
		t.Errorf("wrong password: %d", code)
	}
	if code, body, _ := doReq(t, "GET", u, "mallory", "pw-m", nil); code != 403 || !strings.Contains(string(body), `"forbidden"`) {
		t.Errorf("other job's key: %d %s", code, body)
	}

	// No state yet: 204 (both CLIs read 204 and 404 as "no state").
	if code, body, _ := doReq(t, "GET", u, "alice", "pw-a", nil); code != 204 || len(body) != 0 {
		t.Errorf("GET of absent state: %d %q", code, body)
	}
	// Not a state: 400, JSON error.
	code, body, _ := doReq(t, "POST", u, "alice", "pw-a", []byte("<html>bad gateway</html>"))
	var eb errorBody
	if code != 400 || json.Unmarshal(body, &eb) != nil || eb.Error.Code != "invalid_state" || !strings.Contains(eb.Error.Message, key) {
		t.Errorf("POST of junk: %d %s", code, body)
	}
	// Write and read back, also through the escaped/unescaped path forms.
	v1 := stateDoc(1, "one")
	if code, body, _ := doReq(t, "POST", u, "alice", "pw-a", v1); code != 200 {
		t.Fatalf("POST: %d %s", code, body)
	}
	code, got, h := doReq(t, "GET", e.srv.URL+PathPrefix+key, "alice", "pw-a", nil)
	if code != 200 || !bytes.Equal(got, v1) || h.Get("X-Outpost-State-Generation") != "1" || h.Get("Content-Type") != "application/json" {
		t.Errorf("GET: %d %q %v", code, got, h)
	}
	// Content-MD5 is checked when sent.
	req, _ := http.NewRequestWithContext(context.Background(), "POST", u, bytes.NewReader(stateDoc(2, "two")))
	req.SetBasicAuth("alice", "pw-a")
	wrong := md5.Sum([]byte("other"))
	req.Header.Set("Content-MD5", base64.StdEncoding.EncodeToString(wrong[:]))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("bad Content-MD5: %d", resp.StatusCode)
	}

	// Locking.
	if code, body, _ := doReq(t, "LOCK", u, "alice", "pw-a", lockBody("lock-a")); code != 200 {
		t.Fatalf("LOCK: %d %s", code, body)
	}
	code, body, _ = doReq(t, "LOCK", u, "bob", "pw-b", lockBody("lock-b"))
	var cur statestore.LockInfo
	if code != 423 || json.Unmarshal(body, &cur) != nil || !strings.HasPrefix(cur.ID, HiddenLockIDPrefix+" (held by job/alice/1") || cur.Who != "job/alice/1" || cur.Holder != "job/alice/1" {
		t.Errorf("competing LOCK: %d %s (the holder's lock ID and its own Who must stay hidden)", code, body)
	}
	code, body, _ = doReq(t, "LOCK", u, "alice", "pw-a", lockBody("lock-a2"))
	if code != 423 || json.Unmarshal(body, &cur) != nil || cur.ID != "lock-a" {
		t.Errorf("the holder's own second LOCK: %d %s (its own lock ID is shown to it)", code, body)
	}
	if code, _, _ := doReq(t, "POST", u, "bob", "pw-b", stateDoc(3, "bob unlocked")); code != 423 {
		t.Errorf("unlocked write while locked: %d", code)
	}
	if code, body, _ := doReq(t, "POST", u+"?ID=lock-b", "bob", "pw-b", stateDoc(3, "bob wrong id")); code != 409 || strings.Contains(string(body), "lock-a") {
		t.Errorf("write with the wrong lock ID: %d %s", code, body)
	}
	if code, body, _ := doReq(t, "POST", u+"?ID=lock-a", "alice", "pw-a", stateDoc(3, "alice")); code != 200 {
		t.Errorf("locked write: %d %s", code, body)
	}
	if code, _, _ := doReq(t, "DELETE", u, "bob", "pw-b", nil); code != 423 {
		t.Errorf("DELETE while locked: %d", code)
	}
	if code, body, _ := doReq(t, "UNLOCK", u, "bob", "pw-b", lockBody("lock-b")); code != 409 || strings.Contains(string(body), "lock-a") {
		t.Errorf("UNLOCK with the wrong ID: %d %s", code, body)
	}
	if got := e.handler.RenewedLocks(); len(got) != 1 || got[0] != key {
		t.Errorf("renewed locks = %v", got)
	}
	if code, _, _ := doReq(t, "UNLOCK", u, "alice", "pw-a", lockBody("lock-a")); code != 200 {
		t.Errorf("UNLOCK: %d", code)
	}
	if code, _, _ := doReq(t, "UNLOCK", u, "alice", "pw-a", lockBody("lock-a")); code != 200 {
		t.Errorf("UNLOCK of an unlocked state: %d", code)
	}
	if got := e.handler.RenewedLocks(); len(got) != 0 {
		t.Errorf("renewals left after unlock: %v", got)
	}
	// Terraform's force-unlock (UNLOCK with an empty body) is refused; an operator force-unlocks.
	doReq(t, "LOCK", u, "alice", "pw-a", lockBody("lock-c"))
	if code, body, _ := doReq(t, "UNLOCK", u, "bob", "pw-b", nil); code != 403 || !strings.Contains(string(body), "outpost-agent state force-unlock") {
		t.Errorf("force-unlock over HTTP: %d %s", code, body)
	}
	if l, _ := e.store.LockInfo(context.Background(), key); l == nil || l.Info.ID != "lock-c" {
		t.Errorf("the lock changed after a refused force-unlock: %+v", l)
	}
	if _, err := e.store.ForceUnlock(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := doReq(t, "POST", u+"?ID=lock-c", "alice", "pw-a", stateDoc(4, "zombie")); code != 409 || !strings.Contains(string(body), "lock_lost") {
		t.Errorf("write of a force-unlocked holder: %d %s", code, body)
	}
	// Bad requests.
	if code, _, _ := doReq(t, "LOCK", u, "alice", "pw-a", []byte(`{"Who":"x"}`)); code != 400 {
		t.Errorf("LOCK without ID: %d", code)
	}
	if code, _, h := doReq(t, "PATCH", u, "alice", "pw-a", nil); code != 405 || h.Get("Allow") == "" {
		t.Errorf("PATCH: %d", code)
	}
	if code, _, _ := doReq(t, "GET", e.srv.URL+"/v2/other", "alice", "pw-a", nil); code != 404 {
		t.Errorf("unknown route: %d", code)
	}
	if code, _, _ := doReq(t, "GET", e.srv.URL+PathPrefix, "alice", "pw-a", nil); code != 400 {
		t.Errorf("empty key: %d", code)
	}
	// Delete.
	if code, _, _ := doReq(t, "DELETE", u, "alice", "pw-a", nil); code != 200 {
		t.Errorf("DELETE: %d", code)
	}
	if code, _, _ := doReq(t, "GET", u, "alice", "pw-a", nil); code != 204 {
		t.Errorf("GET after DELETE: %d", code)
	}
	if code, _, _ := doReq(t, "DELETE", u, "alice", "pw-a", nil); code != 200 {
		t.Errorf("DELETE of an absent state: %d", code)
	}
}

func TestBodyLimit(t *testing.T) {
	e := newEnv(t, statestore.Options{}, WithMaxBodyBytes(1<<20))
	e.authz.add("a", "p")
	big := stateDoc(1, strings.Repeat("x", 2<<20))
	code, body, _ := doReq(t, "POST", e.url("k"), "a", "p", big)
	if code != 413 || !strings.Contains(string(body), `"too_large"`) {
		t.Errorf("oversized POST: %d %s", code, body)
	}
	// Chunked upload without Content-Length hits the same limit.
	req, _ := http.NewRequestWithContext(context.Background(), "POST", e.url("k"), io.MultiReader(bytes.NewReader(big)))
	req.ContentLength = -1
	req.SetBasicAuth("a", "p")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("oversized chunked POST: %d", resp.StatusCode)
	}
}

// The handler renews locks while the holder lives and lets them expire when it is gone
// (HolderLiveness).
func TestLockRenewalAndExpiry(t *testing.T) {
	e := newEnv(t, statestore.Options{LockDuration: 2 * time.Second}, WithRenewInterval(300*time.Millisecond))
	e.authz.add("a", "p")
	e.authz.add("b", "p")
	u := e.url("renewed")
	if code, _, _ := doReq(t, "LOCK", u, "a", "p", lockBody("la")); code != 200 {
		t.Fatal(code)
	}
	time.Sleep(3 * time.Second) // beyond the lock duration
	if code, _, _ := doReq(t, "LOCK", u, "b", "p", lockBody("lb")); code != 423 {
		t.Fatalf("lock of a live holder was taken: %d", code)
	}
	e.authz.kill("job/a/1")
	start := time.Now()
	for {
		code, _, _ := doReq(t, "LOCK", u, "b", "p", lockBody("lb"))
		if code == 200 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the dead holder's lock never expired")
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("dead holder's lock taken over %v after it was declared dead", time.Since(start).Round(100*time.Millisecond))

}

// After an agent restart, ResumeRenewals adopts the live holders' locks.
func TestResumeRenewals(t *testing.T) {
	e := newEnv(t, statestore.Options{LockDuration: 2 * time.Second}, WithRenewInterval(300*time.Millisecond))
	ctx := context.Background()
	live := statestore.LockInfo{ID: "l1", Holder: "job/live/1"}
	dead := statestore.LockInfo{ID: "d1", Holder: "job/dead/1"}
	must(t, e.store.Lock(ctx, "live", live))
	must(t, e.store.Lock(ctx, "dead", dead))
	e.authz.kill("job/dead/1")
	n, err := e.handler.ResumeRenewals(ctx)
	if err != nil || n != 1 {
		t.Fatalf("ResumeRenewals = %d, %v", n, err)
	}
	time.Sleep(3 * time.Second)
	if l, _ := e.store.LockInfo(ctx, "live"); l == nil || l.Expired(time.Now()) {
		t.Errorf("live holder's lock expired: %+v", l)
	}
	if l, _ := e.store.LockInfo(ctx, "dead"); l == nil || !l.Expired(time.Now()) {
		t.Errorf("dead holder's lock should have expired: %+v", l)
	}
}
