package agentauth

import (
	"context"
	"crypto/ed25519"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// fuzzKey is the runner key of the fuzz target: fixed, so the checked-in seeds signed with it
// at fuzzNow stay valid tokens.
var fuzzKey = ed25519.NewKeyFromSeed([]byte("outpost-agentauth-fuzz-key-32byt"))

var fuzzNow = time.Unix(1_800_000_000, 0)

const fuzzURL = "http://orchestrator.example:8080/api/v1/agent/poll"

var reasons = map[Reason]bool{ReasonMissing: true, ReasonMalformed: true, ReasonUnknownKey: true, ReasonBadSignature: true,
	ReasonExpired: true, ReasonNotYetValid: true, ReasonLifetime: true, ReasonAudience: true, ReasonReplayed: true,
	ReasonMethod: true, ReasonURL: true, ReasonBody: true}

// FuzzVerify feeds the verifier any token, method, URL and body. A refusal is an *Error with one
// of the documented reasons that never echoes the token; an accepted token speaks for the
// registered runner, was minted for this method and URL, lives at most MaxLifetime, is valid now
// within the skew, binds only its own body, and is refused the second time (replay).
// Seeds: testdata/fuzz/FuzzVerify (valid tokens for the fixed key and clock, and tokens with
// alg none or HS256, a foreign key, no kid, a long lifetime, a missing jti, another audience,
// issued in the future, expired).
func FuzzVerify(f *testing.F) {
	s := NewSigner("acme", "runner-1", fuzzKey)
	s.Now = func() time.Time { return fuzzNow }
	for _, c := range []struct{ method, url, body string }{{"POST", fuzzURL, `{"capacity_free":2}`}, {"GET", "http://orchestrator.example:8080/api/v1/agent/whoami", ""}} {
		tok, err := s.Sign(c.method, c.url, []byte(c.body))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tok, c.method, c.url, []byte(c.body))
	}
	pub := ed25519.PublicKey(fuzzKey[ed25519.SeedSize:])
	f.Fuzz(func(t *testing.T, token, method, rawURL string, body []byte) {
		v := &Verifier{
			Keys: func(_ context.Context, org, runner string) ([]ed25519.PublicKey, error) {
				if org == "acme" && runner == "runner-1" {
					return []ed25519.PublicKey{pub}, nil
				}
				return nil, nil
			},
			Replay: NewMemoryReplayCache(),
			Now:    func() time.Time { return fuzzNow },
		}
		if !validMethod(method) {
			method = http.MethodPost
		}
		r, err := http.NewRequestWithContext(context.Background(), method, "http://127.0.0.1/", nil)
		if err != nil {
			t.Skip()
		}
		r.Header["Authorization"] = []string{scheme + token}
		p, err := v.VerifyHeaders(context.Background(), r, rawURL)
		if err != nil {
			checkRefusal(t, err, token)
			return
		}
		fl := p.fields
		if fl.Org != "acme" || fl.Issuer != "runner-1" || p.fingerprint != keys.Fingerprint(pub) {
			t.Fatalf("accepted a token for %s/%s key %s", fl.Org, fl.Issuer, p.fingerprint)
		}
		want, err := CanonicalURL(rawURL)
		if err != nil || fl.URL != want || !strings.EqualFold(fl.Method, method) {
			t.Fatalf("accepted a token for %s %s on %s %s", fl.Method, fl.URL, method, rawURL)
		}
		iat, exp := fl.IssuedAt.Time, fl.ExpiresAt.Time
		if exp.Sub(iat) > MaxLifetime || iat.After(fuzzNow.Add(DefaultSkew)) || fuzzNow.After(exp.Add(DefaultSkew)) || len(fl.ID) < 16 {
			t.Fatalf("accepted a token issued %s, expiring %s, id %q at %s", iat, exp, fl.ID, fuzzNow)
		}
		id, err := p.Bind(context.Background(), body)
		if fl.BodyHash != BodyHash(body) {
			if reasonOf(err) != ReasonBody {
				t.Fatalf("a body the token was not signed over: %v", err)
			}
			return
		}
		if err != nil || id.RunnerID != "runner-1" || id.Org != "acme" {
			t.Fatalf("Bind: %+v, %v", id, err)
		}
		if _, err := p.Bind(context.Background(), body); reasonOf(err) != ReasonReplayed {
			t.Fatalf("a replayed token: %v, want %s", err, ReasonReplayed)
		}
	})
}

func validMethod(m string) bool {
	return m != "" && !strings.ContainsFunc(m, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", r) })
}

// checkRefusal checks that a refusal is typed, has a documented reason and does not echo the token.
func checkRefusal(t *testing.T, err error, token string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrRefused) || !reasons[e.Reason] {
		t.Fatalf("refusal %v (%T) is not a documented *Error", err, err)
	}
	if tok := strings.TrimSpace(token); len(tok) >= 16 && strings.Contains(err.Error(), tok) {
		t.Fatalf("the refusal echoes the token: %v", err)
	}
}
