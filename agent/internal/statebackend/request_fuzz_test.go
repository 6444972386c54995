package statebackend

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
// gets 401 and a plan's credential 2xx-or-refused, and neither changes the state or the lock;
// nobody but the apply is shown the apply's lock ID. Seeds: testdata/fuzz/FuzzStateRequest.
func FuzzStateRequest(f *testing.F) {
	f.Add(uint8(0), uint8(0), true, "/v1/states/team%2Fapp", []byte(nil), false)
	f.Add(uint8(1), uint8(1), true, "/v1/states/team%2Fapp", stateDoc(9, "by a plan"), true)
	f.Add(uint8(4), uint8(1), true, "/v1/states/team%2Fapp", lockBody("plan-lock"), true)
	f.Add(uint8(5), uint8(2), false, "/v1/states/team%2Fapp?ID=apply-lock", lockBody("apply-lock"), true)
	f.Add(uint8(3), uint8(0), true, "/v1/states/..%2F..%2Fetc", []byte("{"), false)
	methods := []string{"GET", "POST", "PUT", "DELETE", "LOCK", "UNLOCK", "PATCH", "HEAD"}
	users := []struct{ name, password string }{{"apply", "pw-apply"}, {"plan", "pw-plan"}, {"nobody", "pw-nobody"}}
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
		h := NewHandler(store, authz, log)
		defer h.Close()
		const key = "team/app"
		if _, err := store.Write(ctx, key, stateDoc(1, "the apply's"), statestore.WriteOptions{Holder: "job/apply/1", Writer: "job/apply/1"}); err != nil {
			t.Fatal(err)
		}
		if locked {
			if err := store.Lock(ctx, key, statestore.LockInfo{ID: "apply-lock", Holder: "job/apply/1", Who: "planted text"}); err != nil {
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
		if user.name != "apply" && strings.Contains(rec.Body.String(), "apply-lock") {
			t.Fatalf("%s was shown the apply's lock ID: %s", user.name, rec.Body.Bytes())
		}
		if user.name != "apply" || !rightPassword {
			after, afterGen, _ := store.Read(ctx, key)
			afterLock, _ := store.LockInfo(ctx, key)
			if !bytes.Equal(after, before) || afterGen.Generation != beforeGen.Generation || (afterLock == nil) != (beforeLock == nil) ||
				(afterLock != nil && afterLock.Info.ID != beforeLock.Info.ID) {
				t.Fatalf("%s %s as %s (password right: %v) changed the state or its lock: %d %s", req.Method, path, user.name, rightPassword, rec.Code, rec.Body.Bytes())
			}
		}
	})
}
