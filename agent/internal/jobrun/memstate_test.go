package jobrun

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// memStateBackend is a small in-memory Terraform/OpenTofu `http` backend, the protocol of the
// agent's state backend (GET/POST/DELETE/LOCK/UNLOCK on /v1/states/<escaped key>, Basic auth).
// The real one (agent/internal/statebackend) needs a Kubernetes API server and is tested by its
// own package; here it only has to be faithful enough that both CLIs store, lock and read state.
type memStateBackend struct {
	t *testing.T
	// creds maps a user name (deployment id) to the password (state credential) it must present.
	mu      sync.Mutex
	creds   map[string]string
	states  map[string][]byte
	locks   map[string]string // state key → lock info JSON
	lockIDs map[string]string // state key → lock id
	ops     []string          // "METHOD key user", in order
	paths   []string          // escaped request paths
	// plans are the plan files of /v1/plans/<key>, by key (the real backend also keys them by
	// the plan deployment its grant names).
	plans map[string][]byte
}

func newMemStateBackend(t *testing.T) (*memStateBackend, string) {
	b := &memStateBackend{t: t, creds: map[string]string{}, states: map[string][]byte{}, locks: map[string]string{}, lockIDs: map[string]string{}, plans: map[string][]byte{}}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	return b, srv.URL
}

func (b *memStateBackend) allow(user, password string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.creds[user] = password
}

func (b *memStateBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if escaped, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/plans/"); ok {
		b.servePlan(w, r, escaped)
		return
	}
	escaped, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/states/")
	if !ok || escaped == "" || strings.Contains(escaped, "/") {
		http.Error(w, "not a state URL: "+r.URL.EscapedPath(), http.StatusNotFound)
		return
	}
	key, err := url.PathUnescape(escaped)
	if err != nil {
		http.Error(w, "bad key", http.StatusBadRequest)
		return
	}
	user, pass, _ := r.BasicAuth()
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ops = append(b.ops, r.Method+" "+key+" "+user)
	b.paths = append(b.paths, r.URL.EscapedPath())
	if want, ok := b.creds[user]; !ok || want != pass {
		http.Error(w, "bad credentials", http.StatusUnauthorized)
		return
	}
	switch r.Method {
	case http.MethodGet:
		st, ok := b.states[key]
		if !ok {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		_, _ = w.Write(st)
	case http.MethodPost, http.MethodPut:
		if id := b.lockIDs[key]; id != "" && r.URL.Query().Get("ID") != id {
			w.WriteHeader(http.StatusLocked)
			_, _ = io.WriteString(w, b.locks[key])
			return
		}
		b.states[key] = body
	case http.MethodDelete:
		delete(b.states, key)
	case "LOCK":
		var info struct{ ID string }
		if json.Unmarshal(body, &info) != nil || info.ID == "" {
			http.Error(w, "lock info without ID", http.StatusBadRequest)
			return
		}
		if b.lockIDs[key] != "" {
			w.WriteHeader(http.StatusLocked)
			_, _ = io.WriteString(w, b.locks[key])
			return
		}
		b.locks[key], b.lockIDs[key] = string(body), info.ID
	case "UNLOCK":
		var info struct{ ID string }
		_ = json.Unmarshal(body, &info)
		if info.ID != "" && b.lockIDs[key] != "" && info.ID != b.lockIDs[key] {
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, b.locks[key])
			return
		}
		delete(b.locks, key)
		delete(b.lockIDs, key)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// state returns the stored state of key, decoded, or nil.
func (b *memStateBackend) state(key string) map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	raw, ok := b.states[key]
	if !ok {
		return nil
	}
	var st map[string]any
	if err := json.Unmarshal(raw, &st); err != nil {
		b.t.Fatalf("stored state of %q is not JSON: %v", key, err)
	}
	return st
}

func (b *memStateBackend) locked(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lockIDs[key] != ""
}

func (b *memStateBackend) history() (ops, paths []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.ops...), append([]string(nil), b.paths...)
}

// servePlan keeps, returns and deletes the plan file of a state.
func (b *memStateBackend) servePlan(w http.ResponseWriter, r *http.Request, escaped string) {
	key, err := url.PathUnescape(escaped)
	if err != nil {
		http.Error(w, "bad key", http.StatusBadRequest)
		return
	}
	user, pass, _ := r.BasicAuth()
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ops = append(b.ops, r.Method+" plan "+key+" "+user)
	if want, ok := b.creds[user]; !ok || want != pass {
		http.Error(w, "bad credentials", http.StatusUnauthorized)
		return
	}
	switch r.Method {
	case http.MethodPut:
		b.plans[key] = body
	case http.MethodGet:
		p, ok := b.plans[key]
		if !ok {
			http.Error(w, "no plan file", http.StatusNotFound)
			return
		}
		_, _ = w.Write(p)
	case http.MethodDelete:
		delete(b.plans, key)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// plan returns the kept plan file of key.
func (b *memStateBackend) plan(key string) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.plans[key]
}
