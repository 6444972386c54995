// Package agentauth signs and verifies the requests an agent makes to the orchestrator.
//
// Every agent request carries a fresh EdDSA JWT in the Authorization header, signed with the
// runner's ed25519 private key. The token is bound to the request it travels with (method, full
// URL, SHA-256 of the body), lives at most 60 seconds and carries a unique id, so a captured token
// cannot be replayed, moved to another endpoint, or reused with another body. The orchestrator only
// ever holds public keys; a leaked database cannot be used to impersonate an agent.
package agentauth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

const (
	// Audience is the aud field of every agent token; it keeps tokens minted for other systems
	// that might share a key format from being accepted here.
	Audience = "outpost-orchestrator"
	// MaxLifetime is the longest a token may live (exp - iat).
	MaxLifetime = 60 * time.Second
	// DefaultSkew is the clock difference tolerated between agent and orchestrator.
	DefaultSkew = 60 * time.Second
	// scheme is the Authorization scheme; a distinct scheme keeps agent tokens apart from admin
	// bearer tokens in logs and middleware.
	scheme = "Outpost-Agent "
)

// TokenFields are the payload fields of an agent request token (the JWT "claims"; the word claim
// is kept for an agent claiming an attempt).
type TokenFields struct {
	jwt.RegisteredClaims
	// Org is the organisation the runner belongs to.
	Org string `json:"org"`
	// Method is the HTTP method of the request the token was minted for.
	Method string `json:"htm"`
	// URL is the canonical URL of that request (see CanonicalURL).
	URL string `json:"htu"`
	// BodyHash is the unpadded base64url SHA-256 of the request body (of the empty body for GET).
	BodyHash string `json:"bh"`
}

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

// KeyIDOf returns the key fingerprint (kid) a request's Authorization header was signed with,
// without verifying anything: the agent's client uses it to tell its Signer which key the
// orchestrator refused. "" when the header holds no agent token.
func KeyIDOf(authorization string) string {
	raw, ok := strings.CutPrefix(authorization, scheme)
	if !ok {
		return ""
	}
	tok, _, err := jwt.NewParser().ParseUnverified(strings.TrimSpace(raw), &TokenFields{})
	if err != nil {
		return ""
	}
	kid, _ := tok.Header["kid"].(string)
	return kid
}

// BodyHash is the body binding used in the bh field.
func BodyHash(body []byte) string {
	sum := sha256.Sum256(body)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// CanonicalURL normalises a URL so that the signer and the verifier compare the same string:
// lower-case scheme and host, default ports dropped, no fragment, query kept as sent.
func CanonicalURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse URL %q: %w", raw, err)
	}
	if u.Scheme == "" || u.Host == "" {
		return "", fmt.Errorf("URL %q must be absolute (scheme and host)", raw)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	if port != "" {
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		u.Host = host + ":" + port
	} else {
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		u.Host = host
	}
	u.Fragment = ""
	u.RawFragment = ""
	u.User = nil
	if u.Path == "" {
		u.Path = "/"
	}
	return u.String(), nil
}

// Reason says why a token was refused; it is the label of the refusal counter.
type Reason string

// Reasons a token is refused.
const (
	ReasonMissing      Reason = "missing"
	ReasonMalformed    Reason = "malformed"
	ReasonUnknownKey   Reason = "unknown_key"
	ReasonBadSignature Reason = "bad_signature"
	ReasonExpired      Reason = "expired"
	ReasonNotYetValid  Reason = "not_yet_valid"
	ReasonLifetime     Reason = "lifetime_too_long"
	ReasonAudience     Reason = "wrong_audience"
	ReasonReplayed     Reason = "replayed"
	ReasonMethod       Reason = "method_mismatch"
	ReasonURL          Reason = "url_mismatch"
	ReasonBody         Reason = "body_mismatch"
	ReasonInternal     Reason = "internal"
)

// Error is a refused token. Its message is safe to return to the caller: it names the check that
// failed but never echoes the token.
type Error struct {
	Reason Reason
	Detail string
	// Org, RunnerID and KeyID name, for ReasonUnknownKey only, the runner the token claims to be
	// from and the key id it names, when that runner exists (has keys) and the key id has the
	// shape of a fingerprint. Unverified: whoever sent the token chose them.
	Org, RunnerID, KeyID string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return "agent token refused: " + string(e.Reason)
	}
	return "agent token refused: " + string(e.Reason) + ": " + e.Detail
}

// fingerprintShape is what keys.Fingerprint makes of an ed25519 key: SHA256: and 43 characters
// of unpadded base64.
var fingerprintShape = regexp.MustCompile(`^SHA256:[A-Za-z0-9+/]{43}$`)

// ErrRefused matches every *Error with errors.Is.
var ErrRefused = errors.New("agent token refused")

// Is makes errors.Is(err, ErrRefused) true for every refusal.
func (e *Error) Is(target error) bool { return target == ErrRefused }

func refuse(r Reason, format string, args ...any) error {
	return &Error{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// KeyLookup returns the public keys registered for a runner (one or two). A runner that does not
// exist returns no keys and no error.
type KeyLookup func(ctx context.Context, org, runnerID string) ([]ed25519.PublicKey, error)

// ReplayCache remembers token ids until they expire. CheckAndStore must be atomic: it returns true
// when the id was already stored, and otherwise stores it until the given time.
type ReplayCache interface {
	CheckAndStore(ctx context.Context, id string, until time.Time) (seen bool, err error)
}

// Identity is who a verified token speaks for.
type Identity struct {
	Org         string
	RunnerID    string
	Fingerprint string
}

// Verifier checks agent tokens.
type Verifier struct {
	Keys   KeyLookup
	Replay ReplayCache
	// Now returns the current time; tests replace it.
	Now func() time.Time
	// Skew is the tolerated clock difference; DefaultSkew when zero.
	Skew time.Duration
}

// Verified is a token whose checks that need no body have passed: signature (so the runner
// exists and holds the key), audience, lifetime, expiry, method and URL. The orchestrator gets
// it from VerifyHeaders before it reads a single byte of the body, so a request without valid
// credentials never makes it read one; Bind then checks the body and reserves the token id.
type Verified struct {
	v           *Verifier
	fields      TokenFields
	fingerprint string
}

// VerifyHeaders checks the token on r as far as it can without the body. requestURL is the
// absolute URL the client addressed (the orchestrator's external base URL plus
// r.URL.RequestURI()). Nothing is stored: the token id is reserved only by Bind.
func (v *Verifier) VerifyHeaders(ctx context.Context, r *http.Request, requestURL string) (*Verified, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, refuse(ReasonMissing, "no Authorization header")
	}
	if !strings.HasPrefix(h, scheme) {
		return nil, refuse(ReasonMalformed, "Authorization scheme must be %q", strings.TrimSpace(scheme))
	}
	raw := strings.TrimSpace(strings.TrimPrefix(h, scheme))
	skew := v.skew()

	var fields TokenFields
	var fingerprint string
	var lookupErr error
	parser := jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}), jwt.WithoutClaimsValidation())
	_, err := parser.ParseWithClaims(raw, &fields, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		c, ok := t.Claims.(*TokenFields)
		if !ok {
			lookupErr = refuse(ReasonMalformed, "unexpected token fields type")
			return nil, lookupErr
		}
		if c.Org == "" || c.Issuer == "" {
			lookupErr = refuse(ReasonMalformed, "token has no org or iss field")
			return nil, lookupErr
		}
		pubs, err := v.Keys(ctx, c.Org, c.Issuer)
		if err != nil {
			lookupErr = &Error{Reason: ReasonInternal, Detail: "key lookup failed"}
			return nil, fmt.Errorf("key lookup: %w", err)
		}
		for _, p := range pubs {
			if kid == "" || keys.Fingerprint(p) == kid {
				fingerprint = keys.Fingerprint(p)
				return p, nil
			}
		}
		e := &Error{Reason: ReasonUnknownKey, Detail: fmt.Sprintf("no registered key of runner %q matches the token's key id", c.Issuer)}
		if len(pubs) > 0 && fingerprintShape.MatchString(kid) {
			e.Org, e.RunnerID, e.KeyID = c.Org, c.Issuer, kid
		}
		lookupErr = e
		return nil, lookupErr
	})
	if err != nil {
		if lookupErr != nil {
			return nil, lookupErr
		}
		if errors.Is(err, jwt.ErrTokenSignatureInvalid) {
			return nil, refuse(ReasonBadSignature, "signature does not verify with the runner's key")
		}
		return nil, refuse(ReasonMalformed, "%v", err)
	}

	if !containsString(fields.Audience, Audience) {
		return nil, refuse(ReasonAudience, "aud must be %q", Audience)
	}
	if fields.IssuedAt == nil || fields.ExpiresAt == nil || fields.ID == "" {
		return nil, refuse(ReasonMalformed, "iat, exp and jti are required")
	}
	iat, exp := fields.IssuedAt.Time, fields.ExpiresAt.Time
	if exp.Sub(iat) > MaxLifetime {
		return nil, refuse(ReasonLifetime, "token lives %s; at most %s allowed", exp.Sub(iat), MaxLifetime)
	}
	t := v.now()
	if iat.After(t.Add(skew)) {
		return nil, refuse(ReasonNotYetValid, "issued in the future; check the agent's clock")
	}
	if t.After(exp.Add(skew)) {
		return nil, refuse(ReasonExpired, "expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if !strings.EqualFold(fields.Method, r.Method) {
		return nil, refuse(ReasonMethod, "token is for %s, request is %s", fields.Method, r.Method)
	}
	want, err := CanonicalURL(requestURL)
	if err != nil || fields.URL != want {
		return nil, refuse(ReasonURL, "token is for another URL")
	}
	if len(fields.ID) < 16 {
		return nil, refuse(ReasonMalformed, "jti must be at least 16 characters")
	}
	return &Verified{v: v, fields: fields, fingerprint: fingerprint}, nil
}

// Bind checks that body is the one the token was signed over and only then reserves the token
// id, so a request with a tampered body burns nothing: the agent's genuine request with the same
// token still passes. body is the request body read in full.
func (p *Verified) Bind(ctx context.Context, body []byte) (Identity, error) {
	id, r, err := p.BindBody(body)
	if err != nil {
		return Identity{}, err
	}
	seen, err := p.v.Replay.CheckAndStore(ctx, r.ID, r.Until)
	if err != nil {
		return Identity{}, &Error{Reason: ReasonInternal, Detail: "replay cache unavailable"}
	}
	if seen {
		return Identity{}, ReplayedError()
	}
	return id, nil
}

// Replay is a token id to reserve against replay, and until when: the token can no longer pass
// the expiry check after that.
type Replay struct {
	ID    string
	Until time.Time
}

// BindBody is Bind without reserving the token id: the caller reserves the id it returns in the
// transaction that does the request's work, so the check costs no commit of its own. That
// transaction must reserve it first and keep it even when it refuses the request (a refused
// request replayed later might succeed), and the caller must reserve it on its own when the
// transaction fails.
func (p *Verified) BindBody(body []byte) (Identity, Replay, error) {
	f := p.fields
	if f.BodyHash != BodyHash(body) {
		return Identity{}, Replay{}, refuse(ReasonBody, "body does not match the token's hash")
	}
	return Identity{Org: f.Org, RunnerID: f.Issuer, Fingerprint: p.fingerprint},
		Replay{ID: f.Org + "/" + f.Issuer + "/" + f.ID, Until: f.ExpiresAt.Add(p.v.skew())}, nil
}

// ReplayedError is the refusal of a token whose id was already used.
func ReplayedError() error { return refuse(ReasonReplayed, "token id was already used") }

func (v *Verifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

func (v *Verifier) skew() time.Duration {
	if v.Skew <= 0 {
		return DefaultSkew
	}
	return v.Skew
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// publicOf returns the public half of an ed25519 private key.
func publicOf(key ed25519.PrivateKey) ed25519.PublicKey {
	pub := make(ed25519.PublicKey, ed25519.PublicKeySize)
	copy(pub, key[ed25519.SeedSize:])
	return pub
}
