// Package jobtoken is the agent's registry of the job tokens of the attempts it holds: for each
// attempt, the job token its claim granted and the state its job runner may use. The session
// fills it (on claim, and after a restart from what the executor kept with each attempt) and
// empties it when an attempt ends; the state backend authorises every request against it.
// Keeping it apart from both lets each depend on it without depending on the other.
package jobtoken

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"sync"
)

// Errors of Authorize. The state backend answers them as 401 and 403.
var (
	// ErrUnauthenticated: credentials missing or wrong, or the attempt is not held (any more).
	ErrUnauthenticated = errors.New("invalid credentials")
	// ErrForbidden: valid credentials, but not for this state key.
	ErrForbidden = errors.New("not allowed to access this state")
)

// Registry remembers, for each attempt the agent holds, the job token and the state the claim
// granted. It is keyed by deployment id, since the agent holds at most one attempt of a
// deployment. It is safe for concurrent use.
type Registry struct {
	mu sync.RWMutex
	m  map[string]entry
}

type entry struct {
	attempt        int
	token          string
	stateKey       string
	stateNamespace string
}

// New returns an empty registry.
func New() *Registry { return &Registry{m: map[string]entry{}} }

// Put records (or replaces) the job token of an attempt, with the state key and the namespace of
// the kubernetes state storage ("" when unknown) its claim names.
func (r *Registry) Put(deploymentID string, attempt int, token, stateKey, stateNamespace string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[deploymentID] = entry{attempt: attempt, token: token, stateKey: stateKey, stateNamespace: stateNamespace}
}

// Has reports whether a job token is known for the attempt.
func (r *Registry) Has(deploymentID string, attempt int) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.m[deploymentID]
	return ok && h.attempt == attempt && h.token != ""
}

// StateNamespace is the namespace of the deployment's kubernetes state storage ("" when unknown).
func (r *Registry) StateNamespace(deploymentID string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.m[deploymentID].stateNamespace
}

// Delete forgets an attempt's job token (after its finished event, or on forget).
func (r *Registry) Delete(deploymentID string, attempt int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h, ok := r.m[deploymentID]; ok && h.attempt == attempt {
		delete(r.m, deploymentID)
	}
}

// Authorize implements the state backend's Authorizer: username is the deployment id, password
// the job token; the job runner may only use the state its claim names. The holder identity names
// the attempt, so a lock left by an earlier attempt is recognisably someone else's. A wrong id or
// token never says which of the two was wrong.
func (r *Registry) Authorize(_ context.Context, username, password, stateKey string) (string, error) {
	r.mu.RLock()
	h, ok := r.m[username]
	r.mu.RUnlock()
	if !ok || h.token == "" || subtle.ConstantTimeCompare([]byte(h.token), []byte(password)) != 1 {
		return "", ErrUnauthenticated
	}
	if h.stateKey != stateKey {
		return "", fmt.Errorf("%w: deployment %s may only use state %q", ErrForbidden, username, h.stateKey)
	}
	return Holder(username, h.attempt), nil
}

// HolderAlive implements the state backend's HolderLiveness: a lock holder is alive while its
// job token is held, so the state locks of an attempt that ended (or was forgotten) stop being
// renewed and expire.
func (r *Registry) HolderAlive(_ context.Context, holder string) (bool, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for id, h := range r.m {
		if Holder(id, h.attempt) == holder {
			return true, nil
		}
	}
	return false, nil
}

// Holder is the state lock holder identity of an attempt's job runner.
func Holder(deploymentID string, attempt int) string {
	return fmt.Sprintf("job/%s/%d", deploymentID, attempt)
}
