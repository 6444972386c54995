package agentauth

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

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
