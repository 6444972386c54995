// Package agentauth signs and verifies the requests an agent makes to the orchestrator.
//
// Every agent request carries a fresh EdDSA JWT in the Authorization header, signed with the
// runner's ed25519 private key. The token is bound to the request it travels with (method, full
// URL, SHA-256 of the body), lives at most 60 seconds and carries a unique id, so a captured token
// cannot be replayed, moved to another endpoint, or reused with another body. The orchestrator only
// ever holds public keys; a leaked database cannot be used to impersonate an agent.
package agentauth

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
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
