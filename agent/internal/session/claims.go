package session

import (
	"context"
	"crypto/subtle"
	"fmt"
	"sync"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statebackend"
)

// Claims remembers, for each job the agent holds, the job token and the state the claim granted.
// The state backend asks it whether a request comes from a job allowed to touch a state. It is
// refilled after a restart from what the executor stored with each job (see Session.adopt).
type Claims struct {
	mu sync.RWMutex
	m  map[string]heldClaim
}

type heldClaim struct {
	attempt        int
	token          string
	stateKey       string
	stateNamespace string
}

var (
	_ statebackend.Authorizer     = (*Claims)(nil)
	_ statebackend.HolderLiveness = (*Claims)(nil)
)

// NewClaims returns an empty registry.
func NewClaims() *Claims { return &Claims{m: map[string]heldClaim{}} }

// Put records (or replaces) the claim of a job.
func (c *Claims) Put(jobID string, attempt int, token, stateKey, stateNamespace string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[jobID] = heldClaim{attempt: attempt, token: token, stateKey: stateKey, stateNamespace: stateNamespace}
}

// Has reports whether a token is known for the job attempt.
func (c *Claims) Has(jobID string, attempt int) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	h, ok := c.m[jobID]
	return ok && h.attempt == attempt && h.token != ""
}

// StateNamespace is the namespace of the job's kubernetes state storage ("" when unknown).
func (c *Claims) StateNamespace(jobID string) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.m[jobID].stateNamespace
}

// Delete forgets a job's claim (after its final report, or on forget).
func (c *Claims) Delete(jobID string, attempt int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.m[jobID]; ok && h.attempt == attempt {
		delete(c.m, jobID)
	}
}

// Authorize implements statebackend.Authorizer: username is the job id, password the job token;
// the job may only use the state its claim names. The holder identity names the job attempt, so
// a lock left by an earlier attempt is recognisably someone else's. A wrong id or token never
// says which of the two was wrong.
func (c *Claims) Authorize(_ context.Context, username, password, stateKey string) (string, error) {
	c.mu.RLock()
	h, ok := c.m[username]
	c.mu.RUnlock()
	if !ok || h.token == "" || subtle.ConstantTimeCompare([]byte(h.token), []byte(password)) != 1 {
		return "", statebackend.ErrUnauthenticated
	}
	if h.stateKey != stateKey {
		return "", fmt.Errorf("%w: job %s may only use state %q", statebackend.ErrForbidden, username, h.stateKey)
	}
	return Holder(username, h.attempt), nil
}

// HolderAlive implements statebackend.HolderLiveness: a lock holder is alive while its claim is
// held, so the locks of a job that ended (or was forgotten) stop being renewed and expire.
func (c *Claims) HolderAlive(_ context.Context, holder string) (bool, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for id, h := range c.m {
		if Holder(id, h.attempt) == holder {
			return true, nil
		}
	}
	return false, nil
}

// Holder is the lock holder identity of a job attempt.
func Holder(jobID string, attempt int) string { return fmt.Sprintf("job/%s/%d", jobID, attempt) }
