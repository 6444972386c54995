package agentauth

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// Signer mints request tokens for one runner. It may hold several of the runner's private keys
// (newest first) while one is being rotated: it signs with the newest key the orchestrator has
// registered (Registered, from the poll answers), and a key the orchestrator refuses as unknown
// makes it try the next (Refused). So the order in which a new key reaches the agent and the
// orchestrator does not matter: either way every request is signed with a key that is accepted.
type Signer struct {
	org, runnerID string
	// Now returns the current time; tests replace it.
	Now func() time.Time
	// Lifetime is how long minted tokens live (at most MaxLifetime).
	Lifetime time.Duration
	// offset is how far the orchestrator's clock is ahead of Now (nanoseconds; see
	// ObserveServerDate). Tokens are stamped with Now plus offset.
	offset atomic.Int64

	mu   sync.Mutex
	keys []signingKey // newest first
	// registered are the fingerprints the orchestrator last said it accepts; nil when it has
	// not said (an orchestrator from before key rotation, or no answer yet).
	registered map[string]bool
	// refused are the keys the orchestrator answered unknown_key for since the key set or the
	// registered fingerprints last changed.
	refused map[string]bool
}

type signingKey struct {
	key ed25519.PrivateKey
	kid string
}

// NewSigner returns a Signer for the runner runnerID of organisation org, holding keys (newest
// first; at least one).
func NewSigner(org, runnerID string, privs ...ed25519.PrivateKey) *Signer {
	s := &Signer{org: org, runnerID: runnerID, Now: time.Now, Lifetime: 30 * time.Second}
	s.SetKeys(privs...)
	return s
}

// SetKeys replaces the keys the signer holds (newest first), as when the runner's key Secret
// changed. Earlier refusals are forgotten: a key refused before may be registered by now.
func (s *Signer) SetKeys(privs ...ed25519.PrivateKey) {
	ks := make([]signingKey, 0, len(privs))
	for _, k := range privs {
		if len(k) != ed25519.PrivateKeySize {
			continue
		}
		kid := keys.Fingerprint(publicOf(k))
		if !slices.ContainsFunc(ks, func(o signingKey) bool { return o.kid == kid }) {
			ks = append(ks, signingKey{key: k, kid: kid})
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys, s.refused = ks, nil
}

// Registered tells the signer which key fingerprints the orchestrator accepts for the runner
// (the poll answer's key_fingerprints). Requests are then signed with the newest key among
// them, so an agent holding a new and an old key moves onto the new one as soon as it is
// registered, and stays on the old one until then.
func (s *Signer) Registered(fingerprints []string) {
	m := make(map[string]bool, len(fingerprints))
	for _, f := range fingerprints {
		m[f] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !maps.Equal(m, s.registered) {
		s.registered, s.refused = m, nil
	}
}

// Refused records that the orchestrator refused the key kid as unknown. It reports whether the
// signer now signs with another key, so that the request is worth sending again at once.
func (s *Signer) Refused(kid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused == nil {
		s.refused = map[string]bool{}
	}
	before := s.chooseLocked().kid
	s.refused[kid] = true
	if s.registered[kid] {
		// The orchestrator no longer has it, whatever it said before.
		delete(s.registered, kid)
	}
	return s.chooseLocked().kid != before
}

// chooseLocked picks the key to sign with: the newest registered one, else the newest not
// refused, else the newest. Called with s.mu held.
func (s *Signer) chooseLocked() signingKey {
	if len(s.keys) == 0 {
		return signingKey{}
	}
	for _, k := range s.keys {
		if s.registered[k.kid] && !s.refused[k.kid] {
			return k
		}
	}
	for _, k := range s.keys {
		if !s.refused[k.kid] {
			return k
		}
	}
	return s.keys[0]
}

// Fingerprint is the fingerprint of the key the signer signs with now, sent as the token's kid.
func (s *Signer) Fingerprint() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chooseLocked().kid
}

// Fingerprints are the fingerprints of every key the signer holds, newest first.
func (s *Signer) Fingerprints() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.keys))
	for i, k := range s.keys {
		out[i] = k.kid
	}
	return out
}

// Sign returns a token for one request.
func (s *Signer) Sign(method, rawURL string, body []byte) (string, error) {
	u, err := CanonicalURL(rawURL)
	if err != nil {
		return "", err
	}
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return "", fmt.Errorf("token id: %w", err)
	}
	s.mu.Lock()
	k := s.chooseLocked()
	s.mu.Unlock()
	if k.key == nil {
		return "", errors.New("sign agent token: the signer holds no private key")
	}
	now := s.Now().Add(s.ClockOffset())
	life := s.Lifetime
	if life <= 0 || life > MaxLifetime {
		life = MaxLifetime
	}
	fields := TokenFields{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.runnerID,
			Subject:   s.runnerID,
			Audience:  jwt.ClaimStrings{Audience},
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(life)),
			ID:        hex.EncodeToString(jti),
		},
		Org:      s.org,
		Method:   strings.ToUpper(method),
		URL:      u,
		BodyHash: BodyHash(body),
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, fields)
	tok.Header["kid"] = k.kid
	signed, err := tok.SignedString(k.key)
	if err != nil {
		return "", fmt.Errorf("sign agent token: %w", err)
	}
	return signed, nil
}

// Authorize sets the Authorization header of r for the given body.
func (s *Signer) Authorize(r *http.Request, body []byte) error {
	tok, err := s.Sign(r.Method, r.URL.String(), body)
	if err != nil {
		return err
	}
	r.Header.Set("Authorization", scheme+tok)
	return nil
}

// publicOf returns the public half of an ed25519 private key.
func publicOf(key ed25519.PrivateKey) ed25519.PublicKey {
	pub := make(ed25519.PublicKey, ed25519.PublicKeySize)
	copy(pub, key[ed25519.SeedSize:])
	return pub
}
