package statebackend

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

// FuzzStateRequest sends the state backend what a job pod can: any method, path, credentials
// and body, against a state an apply wrote and (for some inputs) holds the lock of. The store is
// a fake clientset, so the fuzzer runs thousands of requests a second. Whatever comes in: no
// panic; an answer from the statuses the protocol knows; a caller without a valid credential
// gets 401 and a plan's credential 2xx-or-refused, and neither changes the state or the lock,
// nor does another apply while the apply holds the lock; nobody but the apply is shown the
// apply's lock ID unless they sent it. Seeds:
// testdata/fuzz/FuzzStateRequest.
func FuzzStateRequest(f *testing.F) {
	const applyLockID = "apply-lock"
	f.Add(uint8(0), uint8(0), true, "/v1/states/team%2Fapp", []byte(nil), false)
	f.Add(uint8(1), uint8(1), true, "/v1/states/team%2Fapp", stateDoc(9, "by a plan"), true)
	f.Add(uint8(4), uint8(1), true, "/v1/states/team%2Fapp", lockBody("plan-lock"), true)
	f.Add(uint8(5), uint8(2), false, "/v1/states/team%2Fapp?ID=apply-lock", lockBody("apply-lock"), true)
	f.Add(uint8(3), uint8(0), true, "/v1/states/..%2F..%2Fetc", []byte("{"), false)
	f.Add(uint8(4), uint8(3), true, "/v1/states/team%2Fapp", lockBody("other-lock"), true)
	f.Add(uint8(2), uint8(3), true, "/v1/states/team%2Fapp?ID=other-lock", stateDoc(9, "by another apply"), true)
	methods := []string{"GET", "POST", "PUT", "DELETE", "LOCK", "UNLOCK", "PATCH", "HEAD"}
	// "other" is the apply of another deployment on the same state key: it may write, but not
	// past the apply's lock, and never sees its ID.
	users := []struct{ name, password string }{{"apply", "pw-apply"}, {"plan", "pw-plan"}, {"nobody", "pw-nobody"}, {"other", "pw-other"}}
	known := []int{200, 204, 400, 401, 403, 404, 405, 409, 413, 423, 429, 503}
	log := slog.New(slog.DiscardHandler)
	f.Fuzz(func(t *testing.T, m, u uint8, rightPassword bool, path string, body []byte, locked bool) {
		ctx := context.Background()
		store, err := statestore.New(fake.NewClientset(), "states", statestore.Options{Logger: log, Scope: testOrg})
		if err != nil {
			t.Fatal(err)
		}
		authz := newTestAuthz()
		authz.add("apply", "pw-apply")
		authz.addPlan("plan", "pw-plan")
		authz.add("other", "pw-other")
		h := NewHandler(store, authz, log)
		defer h.Close()
		const key = "team/app"
		if _, err := store.Write(ctx, key, stateDoc(1, "the apply's"), statestore.WriteOptions{Holder: "job/apply/1", Writer: "job/apply/1"}); err != nil {
			t.Fatal(err)
		}
		if locked {
			if err := store.Lock(ctx, key, statestore.LockInfo{ID: applyLockID, Holder: "job/apply/1", Who: "planted text"}); err != nil {
				t.Fatal(err)
			}
		}
		before, beforeGen, _ := store.Read(ctx, key)
		beforeLock, _ := store.LockInfo(ctx, key)

		req, err := http.NewRequestWithContext(ctx, methods[int(m)%len(methods)], "http://state"+path, bytes.NewReader(body))
		if err != nil {
			return // not a request a client could send
		}
		user := users[int(u)%len(users)]
		pw := user.password
		if !rightPassword {
			pw += "x"
		}
		req.SetBasicAuth(user.name, pw)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		if !slices.Contains(known, rec.Code) {
			t.Fatalf("%s %s as %s: status %d", req.Method, path, user.name, rec.Code)
		}
		authenticated := rightPassword && user.name != "nobody"
		if !authenticated && rec.Code != 401 && rec.Code != 400 && rec.Code != 404 {
			t.Fatalf("%s %s without a valid credential: %d %s", req.Method, path, rec.Code, rec.Body.Bytes())
		}
		// A leak is the ID in an answer to a caller who did not send it: a plan's LOCK is
		// answered with the lock info it sent, which may name any ID, the apply's too.
		if user.name != "apply" && !sentID(req, body, applyLockID) && strings.Contains(rec.Body.String(), applyLockID) {
			t.Fatalf("%s was shown the apply's lock ID: %s", user.name, rec.Body.Bytes())
		}
		if (user.name != "apply" && user.name != "other") || !rightPassword || (user.name == "other" && locked) {
			after, afterGen, _ := store.Read(ctx, key)
			afterLock, _ := store.LockInfo(ctx, key)
			if !bytes.Equal(after, before) || afterGen.Generation != beforeGen.Generation || (afterLock == nil) != (beforeLock == nil) ||
				(afterLock != nil && afterLock.Info.ID != beforeLock.Info.ID) {
				t.Fatalf("%s %s as %s (password right: %v) changed the state or its lock: %d %s", req.Method, path, user.name, rightPassword, rec.Code, rec.Body.Bytes())
			}
		}
	})
}

// sentID reports whether a request carries the lock ID id, however it is spelled: in the URL
// (escaped or not) or in the body, literally or as the ID of lock info JSON (JSON escapes decode
// to it).
func sentID(req *http.Request, body []byte, id string) bool {
	query, _ := url.QueryUnescape(req.URL.RawQuery)
	var info struct{ ID string }
	return bytes.Contains(body, []byte(id)) || strings.Contains(req.URL.Path, id) || strings.Contains(query, id) ||
		strings.Contains(req.URL.String(), id) || (json.Unmarshal(body, &info) == nil && strings.Contains(info.ID, id))
}
