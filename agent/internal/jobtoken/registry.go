// Package jobtoken is the agent's registry of the job tokens of the attempts it holds: for each
// attempt, the job token its claim granted, the state credential the agent gives its job runner
// for the state backend, the state it may use and the operation, which decides how: a plan reads
// its state, an apply or destroy writes it. The session fills it
// (on claim, and after a restart from what the executor kept with each attempt) and empties it
// when an attempt ends; the state backend authorises every request against it and is told when
// attempts come and go (Watcher), so it can renew and release their state locks. Keeping it apart
// from both lets each depend on it without depending on the other.
package jobtoken

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Errors of Authorize. The state backend answers them as 401 and 403.
var (
	// ErrUnauthenticated: credentials missing or wrong, or the attempt is not held (any more).
	ErrUnauthenticated = errors.New("invalid credentials")
	// ErrForbidden: valid credentials, but not for this state key.
	ErrForbidden = errors.New("not allowed to access this state")
	// ErrAdopting: the credentials are not known (yet) while this replica is still taking over
	// the attempts of the one before (Adopting); the state backend answers 503, which the CLI
	// retries, instead of a 401 it would fail on.
	ErrAdopting = errors.New("the agent is taking over the running attempts; retry")
)

// StateTokenPrefix starts every state credential, so one is recognisable in a leak report.
const StateTokenPrefix = "opst_"

// Grant is what one claim lets the attempt's job runner do with state.
type Grant struct {
	// Token is the job token of the claim: the job runner's credential at the orchestrator. The
	// state backend does not take it.
	Token string
	// StateToken is the job runner's credential at the state backend, set by Put. The
	// orchestrator never sees it, so it calls nothing there.
	StateToken string
	// StateKey is the only state the job runner may use.
	StateKey string
	// StateNamespace is the namespace of the claim's kubernetes state storage ("" for others).
	StateNamespace string
	// Operation decides the access: a plan may only read the state and take and release its own
	// lock.
	Operation api.Operation
	// PlanOf is the plan deployment whose saved plan an apply runs: its job runner may read
	// and delete that plan file, and no other.
	PlanOf string
	// PlanTTL is how long the plan file a plan's job runner stores is kept (0: the default).
	PlanTTL time.Duration
}

// Access is what Authorize grants one request.
type Access struct {
	// Holder names the attempt as a state lock holder and as the writer in the state history.
	Holder string
	// ReadOnly is true for a plan: read, lock and unlock its own lock; no write, no delete.
	ReadOnly bool
	// Plan is the deployment whose plan file of the state the caller may use: a plan's own
	// (to store it), or the saved plan an apply runs (to read and delete it); "" for none.
	Plan string
	// PlanStore is true when the caller may store the plan file (a plan), kept PlanTTL.
	PlanStore bool
	PlanTTL   time.Duration
}

// Watcher is told when attempts come and go (the state backend: it renews the state locks of
// held attempts and releases those of finished ones). Its methods run outside the registry's
// lock and must not block for long.
type Watcher interface {
	// Added: an attempt whose state lives in stateNamespace ("" when not in Kubernetes) is held.
	Added(stateNamespace string)
	// Removed: the attempt of holder ended; its state locks can go.
	Removed(holder, stateNamespace string)
	// Cleared: this replica holds no attempt any more (it lost leadership).
	Cleared()
}

// Registry remembers, for each attempt the agent holds, the job token and the state the claim
// granted. It is keyed by deployment id, since the agent holds at most one attempt of a
// deployment. It is safe for concurrent use.
type Registry struct {
	mu sync.RWMutex
	// keys derive the state credentials, newest first: new ones are made with the first, and
	// one made with any of them is accepted (see SetKeys).
	keys    [][]byte
	m       map[string]entry
	watcher Watcher
	// adopting is set from Adopting until Adopted.
	adopting bool
}

type entry struct {
	attempt int
	Grant
}

// New returns an empty registry whose state credentials are derived with key
// (StateCredentialKey of the runner's private key, so every replica and the next agent process
// derive the same for an attempt whose Job is still running). A nil key is a random one: its
// credentials do not outlive the registry (tests, and agents without Jobs to adopt).
func New(key []byte) *Registry {
	if key == nil {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
	}
	return &Registry{keys: [][]byte{key}, m: map[string]entry{}}
}

// SetKeys replaces the keys of the state credentials (StateCredentialKey of each of the
// runner's private keys the agent holds, newest first; see package keyring). New credentials
// are made with the first; a credential made with any of them is accepted, so the job runners
// of Jobs started before a key rotation keep their access, in this process and after a restart.
func (r *Registry) SetKeys(keys [][]byte) {
	if len(keys) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = keys
}

// StateCredentialKey derives the key of the state credentials from the runner's private key:
// nobody without it can make one, and a job token does not lead to one.
func StateCredentialKey(priv ed25519.PrivateKey) []byte {
	m := hmac.New(sha256.New, priv.Seed())
	m.Write([]byte("outpost state credential v1"))
	return m.Sum(nil)
}

// StateToken is the state credential of an attempt holding jobToken: a MAC under the registry's
// key, so it is as unguessable as a random one, the same whenever the agent derives it again
// (a repeated claim, an adoption after a restart) and different for every grant.
func (r *Registry) StateToken(deploymentID string, attempt int, jobToken string) string {
	r.mu.RLock()
	key := r.keys[0]
	r.mu.RUnlock()
	return stateToken(key, deploymentID, attempt, jobToken)
}

func stateToken(key []byte, deploymentID string, attempt int, jobToken string) string {
	msg, _ := json.Marshal([]string{"state", deploymentID, strconv.Itoa(attempt), jobToken})
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return StateTokenPrefix + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Watch sets the one watcher of the registry.
func (r *Registry) Watch(w Watcher) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watcher = w
}

func (r *Registry) notify(f func(Watcher)) {
	r.mu.RLock()
	w := r.watcher
	r.mu.RUnlock()
	if w != nil {
		f(w)
	}
}

// Put records (or replaces) the grant of an attempt and returns the state credential its job
// runner is to use.
func (r *Registry) Put(deploymentID string, attempt int, g Grant) string {
	g.StateToken = r.StateToken(deploymentID, attempt, g.Token)
	r.mu.Lock()
	r.m[deploymentID] = entry{attempt: attempt, Grant: g}
	r.mu.Unlock()
	r.notify(func(w Watcher) { w.Added(g.StateNamespace) })
	return g.StateToken
}

// Has reports whether a job token is known for the attempt.
func (r *Registry) Has(deploymentID string, attempt int) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.m[deploymentID]
	return ok && h.attempt == attempt && h.Token != ""
}

// StateNamespace is the namespace of the deployment's kubernetes state storage ("" when unknown).
func (r *Registry) StateNamespace(deploymentID string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.m[deploymentID].StateNamespace
}

// Delete forgets an attempt's grant (after its finished event, or on forget); the watcher
// releases its state locks.
func (r *Registry) Delete(deploymentID string, attempt int) {
	r.mu.Lock()
	h, ok := r.m[deploymentID]
	if ok && h.attempt == attempt {
		delete(r.m, deploymentID)
	}
	r.mu.Unlock()
	if ok && h.attempt == attempt {
		r.notify(func(w Watcher) { w.Removed(Holder(deploymentID, attempt), h.StateNamespace) })
	}
}

// Adopting says this replica starts taking over the attempts the executor holds (it became the
// leader, or its session starts): until Adopted, an unknown credential is ErrAdopting, not
// ErrUnauthenticated, since its grant may just not be registered yet.
func (r *Registry) Adopting() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.adopting = true
}

// Adopted says the grants of every attempt the executor held are registered.
func (r *Registry) Adopted() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.adopting = false
}

// Clear forgets every grant: the replica lost leadership, and the attempts are the next
// leader's. Their state locks are left to it (it resumes renewing them).
func (r *Registry) Clear() {
	r.mu.Lock()
	r.m = map[string]entry{}
	r.mu.Unlock()
	r.notify(Watcher.Cleared)
}

// Authorize implements the state backend's Authorizer: username is the deployment id, password
// the attempt's state credential (never its job token, which is the orchestrator's); the job
// runner may only use the state its claim names, and a plan only reads it.
// The holder identity names the attempt, so a lock left by an earlier attempt is recognisably
// someone else's. A wrong id or token never says which of the two was wrong.
func (r *Registry) Authorize(_ context.Context, username, password, stateKey string) (Access, error) {
	r.mu.RLock()
	h, ok := r.m[username]
	keys, adopting := r.keys, r.adopting
	r.mu.RUnlock()
	if (!ok || h.Token == "") && adopting {
		return Access{}, ErrAdopting
	}
	if !ok || h.Token == "" {
		return Access{}, ErrUnauthenticated
	}
	valid := false
	for _, k := range keys {
		// Every key is tried (no early exit), so the time taken does not tell which matched.
		if subtle.ConstantTimeCompare([]byte(stateToken(k, username, h.attempt, h.Token)), []byte(password)) == 1 {
			valid = true
		}
	}
	if !valid {
		return Access{}, ErrUnauthenticated
	}
	if h.StateKey != stateKey {
		return Access{}, fmt.Errorf("%w: deployment %s may only use state %q", ErrForbidden, username, h.StateKey)
	}
	a := Access{Holder: Holder(username, h.attempt), ReadOnly: ReadOnly(h.Operation), Plan: h.PlanOf}
	if h.Operation == api.OperationPlan {
		// A plan may store its own plan file only: what it stores is applied only after a
		// person approved its summary.
		a.Plan, a.PlanStore, a.PlanTTL = username, true, h.PlanTTL
	}
	return a, nil
}

// ReadOnly reports whether an operation only reads state. Anything but apply and destroy does,
// so an operation this agent does not know yet gets the least access.
func ReadOnly(op api.Operation) bool {
	return op != api.OperationApply && op != api.OperationDestroy
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
