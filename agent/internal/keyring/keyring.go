// Package keyring holds the runner's private keys while the agent runs, so a rotated key takes
// effect without a restart and without disowning the attempts in flight.
//
// The agent uses its key three ways: it signs its requests to the orchestrator with it, and it
// derives from it the key of the seals on its Jobs and the key of the job runners' state
// credentials. A rotation changes the first at once (the Signer moves onto the new key as soon
// as the orchestrator has it registered), but Jobs created before the rotation keep the seals and
// state credentials made with the old key for as long as they run. So the ring keeps the keys
// the current one replaced: new seals and credentials are made with the current key, and the
// ones made with a replaced key are still recognised.
//
// The keys come from a Source: the runner's key Secret through the Kubernetes API (watched, so a
// change reaches the agent within a second; the chart's way) or a file (read again every few
// seconds; the process executor's way). The Secret may also hold the key it replaced under
// keys.SecretKeyPrevious (outpost_key_pair writes it on rotation), which lets a restarted agent still
// recognise the Jobs sealed before the rotation.
package keyring

import (
	"crypto/ed25519"
	"slices"
	"sync"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// maxKeys bounds the keys the ring keeps: the current one and the two before it. A Job outlives
// at most one rotation in practice (rotations are days apart, jobs hours); one more is margin.
const maxKeys = 3

// Ring is the runner's private keys the agent holds, newest first. It is safe for concurrent use.
type Ring struct {
	mu   sync.Mutex
	keys []ed25519.PrivateKey
	subs []func([]ed25519.PrivateKey)
	// loaded is closed when the ring first holds a key.
	loaded chan struct{}
}

// New returns an empty ring.
func New() *Ring { return &Ring{loaded: make(chan struct{})} }

// Loaded is closed once the ring holds a key.
func (r *Ring) Loaded() <-chan struct{} { return r.loaded }

// Keys returns the keys, newest first (a copy).
func (r *Ring) Keys() []ed25519.PrivateKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.keys)
}

// Current is the newest key; nil before the first Set.
func (r *Ring) Current() ed25519.PrivateKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.keys) == 0 {
		return nil
	}
	return r.keys[0]
}

// Fingerprints are the fingerprints of the keys, newest first.
func (r *Ring) Fingerprints() []string {
	ks := r.Keys()
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = Fingerprint(k)
	}
	return out
}

// Subscribe registers f, called with the keys (newest first) after every change. f runs
// outside the ring's lock and must not block for long.
func (r *Ring) Subscribe(f func(keys []ed25519.PrivateKey)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subs = append(r.subs, f)
}

// Set makes current the newest key. previous are keys the source says it replaced (the key
// Secret's keys.SecretKeyPrevious); the keys the ring held before stay behind them, so a key the
// agent saw replaced in this process is still recognised even when the source keeps no previous
// key. It reports whether the keys changed.
func (r *Ring) Set(current ed25519.PrivateKey, previous ...ed25519.PrivateKey) bool {
	r.mu.Lock()
	next := make([]ed25519.PrivateKey, 0, maxKeys)
	for _, k := range append(append([]ed25519.PrivateKey{current}, previous...), r.keys...) {
		if len(k) == ed25519.PrivateKeySize && len(next) < maxKeys && !slices.ContainsFunc(next, func(o ed25519.PrivateKey) bool { return o.Equal(k) }) {
			next = append(next, k)
		}
	}
	changed := !slices.EqualFunc(next, r.keys, func(a, b ed25519.PrivateKey) bool { return a.Equal(b) })
	if len(r.keys) == 0 && len(next) > 0 {
		close(r.loaded)
	}
	r.keys = next
	subs := slices.Clone(r.subs)
	r.mu.Unlock()
	if changed {
		for _, f := range subs {
			f(slices.Clone(next))
		}
	}
	return changed
}

// Fingerprint is the SHA-256 fingerprint of a private key's public half, as the orchestrator and
// `ssh-keygen -l` print it.
func Fingerprint(k ed25519.PrivateKey) string {
	pub, _ := k.Public().(ed25519.PublicKey)
	return keys.Fingerprint(pub)
}

// Derive maps every key through f (a key derivation such as the seal key's), newest first.
func Derive(ks []ed25519.PrivateKey, f func(ed25519.PrivateKey) []byte) [][]byte {
	out := make([][]byte, len(ks))
	for i, k := range ks {
		out[i] = f(k)
	}
	return out
}
