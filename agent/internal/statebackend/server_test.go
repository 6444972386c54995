package statebackend

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobtoken"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The server keeps each job's states in the namespace its claim named, and authorises with the
// job tokens the session registered; a job it does not know is refused without touching any
// namespace.
func TestServerPicksTheNamespaceOfTheJob(t *testing.T) {
	c := testbed.Shared(t)
	nsA, nsB := testbed.NewNamespace(t, c), testbed.NewNamespace(t, c)
	tokens := jobtoken.New(nil)
	stA := tokens.Put("dep-a", 1, jobtoken.Grant{Token: "opj_a", StateKey: "team/app", StateNamespace: nsA, Operation: api.OperationApply})
	stB := tokens.Put("dep-b", 1, jobtoken.Grant{Token: "opj_b", StateKey: "team/app", StateNamespace: nsB, Operation: api.OperationApply})
	s := NewServer(ServerOptions{Kube: c.Client(), Tokens: tokens, Org: testOrg, Logger: testLogger()})
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		srv.Close()
		s.Close()
	})
	do := func(method, user, pass, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+PathPrefix+url.PathEscape("team/app"), strings.NewReader(body))
		req.SetBasicAuth(user, pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	state := `{"version":4,"serial":1,"lineage":"l-a","resources":[]}`
	if code, body := do(http.MethodPost, "dep-a", stA, state); code != http.StatusOK {
		t.Fatalf("write as dep-a: %d %s", code, body)
	}
	if code, body := do(http.MethodGet, "dep-a", stA, ""); code != http.StatusOK || body != state {
		t.Fatalf("read as dep-a: %d %q", code, body)
	}
	// The same key for dep-b lives in its own namespace: nothing there yet.
	if code, _ := do(http.MethodGet, "dep-b", stB, ""); code != http.StatusNoContent {
		t.Fatalf("read as dep-b: %d, want 204 (its namespace holds no state)", code)
	}
	if _, err := mustStore(statestore.New(c.Client(), nsA, statestore.Options{Logger: testLogger(), Scope: testOrg})).History(t.Context(), "team/app"); err != nil {
		t.Fatalf("the state is not in dep-a's namespace: %v", err)
	}
	if code, _ := do(http.MethodGet, "dep-a", stB, ""); code != http.StatusUnauthorized {
		t.Fatalf("another job's state credential: %d, want 401", code)
	}
	// A job token is the orchestrator's credential, never the state backend's.
	if code, _ := do(http.MethodGet, "dep-a", "opj_a", ""); code != http.StatusUnauthorized {
		t.Fatalf("dep-a's job token: %d, want 401", code)
	}
	if code, _ := do(http.MethodGet, "dep-x", "opj_x", ""); code != http.StatusUnauthorized {
		t.Fatalf("unknown job: %d, want 401", code)
	}
}

// TestServerFollowsTheRegistry: the locks of a finished attempt are released at once (not a lock
// duration later), and a replica that lost leadership authorises nothing and stops renewing,
// leaving the locks of running attempts to the next leader.
func TestServerFollowsTheRegistry(t *testing.T) {
	c := testbed.Shared(t)
	ns := testbed.NewNamespace(t, c)
	tokens := jobtoken.New(nil)
	s := NewServer(ServerOptions{Kube: c.Client(), Tokens: tokens, Org: testOrg, Logger: testLogger()})
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		srv.Close()
		s.Close()
	})
	store := mustStore(statestore.New(c.Client(), ns, statestore.Options{Logger: testLogger(), Scope: testOrg}))
	creds := map[string]string{}
	lock := func(user, key, id string) int {
		code, _, _ := doReq(t, "LOCK", srv.URL+PathPrefix+url.PathEscape(key), user, creds[user], lockBody(id))
		return code
	}
	creds["dep-a"] = tokens.Put("dep-a", 1, jobtoken.Grant{Token: "opj_dep-a", StateKey: "a", StateNamespace: ns, Operation: api.OperationApply})
	if code := lock("dep-a", "a", "lock-a"); code != http.StatusOK {
		t.Fatalf("LOCK: %d", code)
	}
	tokens.Delete("dep-a", 1) // its finished event was acknowledged
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := store.LockInfo(t.Context(), "a")
		if err == nil && l == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the finished attempt's lock was not released: %+v, %v", l, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	creds["dep-b"] = tokens.Put("dep-b", 1, jobtoken.Grant{Token: "opj_dep-b", StateKey: "b", StateNamespace: ns, Operation: api.OperationApply})
	if code := lock("dep-b", "b", "lock-b"); code != http.StatusOK {
		t.Fatalf("LOCK: %d", code)
	}
	tokens.Clear() // leadership lost
	if code, _, _ := doReq(t, "GET", srv.URL+PathPrefix+"b", "dep-b", creds["dep-b"], nil); code != http.StatusUnauthorized {
		t.Errorf("a replica that lost leadership authorised a request: %d", code)
	}
	if l, err := store.LockInfo(t.Context(), "b"); err != nil || l == nil || l.Info.ID != "lock-b" {
		t.Errorf("the running attempt's lock must stay for the next leader: %+v, %v", l, err)
	}
	s.mu.Lock()
	n := len(s.handlers)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d handlers (and their lock renewals) still running after leadership was lost", n)
	}
}

// TestServerKeepsStatesOnlyInItsNamespace (N10): the namespace of a claim's state storage comes
// from the orchestrator; with --state-namespace set, a claim naming another namespace gets 403
// with what to do on every state request, and nothing is read or written there, even where the
// agent's RBAC would reach.
func TestServerKeepsStatesOnlyInItsNamespace(t *testing.T) {
	c := testbed.Shared(t)
	own, other := testbed.NewNamespace(t, c), testbed.NewNamespace(t, c)
	tokens := jobtoken.New(nil)
	stA := tokens.Put("dep-a", 1, jobtoken.Grant{Token: "opj_a", StateKey: "k", StateNamespace: own, Operation: api.OperationApply})
	stB := tokens.Put("dep-b", 1, jobtoken.Grant{Token: "opj_b", StateKey: "k", StateNamespace: other, Operation: api.OperationApply})
	s := NewServer(ServerOptions{Kube: c.Client(), Tokens: tokens, Org: testOrg, FallbackNamespace: own, Logger: testLogger()})
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		srv.Close()
		s.Close()
	})
	u := srv.URL + PathPrefix + "k"
	if code, body, _ := doReq(t, "POST", u, "dep-a", stA, stateDoc(1, "own")); code != http.StatusOK {
		t.Fatalf("a write to the agent's own state namespace: %d %s", code, body)
	}
	for _, m := range []string{"GET", "POST", "LOCK", "DELETE"} {
		var body []byte
		switch m {
		case "POST":
			body = stateDoc(1, "elsewhere")
		case "LOCK":
			body = lockBody("l")
		}
		code, got, _ := doReq(t, m, u, "dep-b", stB, body)
		if code != http.StatusForbidden || !strings.Contains(string(got), other) || !strings.Contains(string(got), "--state-namespace") {
			t.Errorf("%s with a claim naming namespace %s: %d %s", m, other, code, got)
		}
	}
	secrets, err := c.Client().CoreV1().Secrets(other).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(secrets.Items) != 0 {
		t.Errorf("the other namespace holds %d Secrets (%v)", len(secrets.Items), err)
	}
	leases, err := c.Client().CoordinationV1().Leases(other).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(leases.Items) != 0 {
		t.Errorf("the other namespace holds %d Leases (%v)", len(leases.Items), err)
	}
}
