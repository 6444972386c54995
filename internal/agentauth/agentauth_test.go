package agentauth

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

type fixture struct {
	signer   *Signer
	verifier *Verifier
	now      time.Time
}

func newFixture(t *testing.T, registered ...ed25519.PublicKey) *fixture {
	t.Helper()
	pub, priv, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if len(registered) == 0 {
		registered = []ed25519.PublicKey{pub}
	}
	f := &fixture{now: time.Unix(1_800_000_000, 0)}
	f.signer = NewSigner("acme", "runner-1", priv)
	f.signer.Now = func() time.Time { return f.now }
	f.verifier = &Verifier{
		Keys: func(_ context.Context, org, runner string) ([]ed25519.PublicKey, error) {
			if org == "acme" && runner == "runner-1" {
				return registered, nil
			}
			return nil, nil
		},
		Replay: NewMemoryReplayCache(),
		Now:    func() time.Time { return f.now },
	}
	return f
}

func (f *fixture) verify(method, url string, body []byte, token string) error {
	r := httptest.NewRequestWithContext(context.Background(), method, url, bytes.NewReader(body))
	r.Header.Set("Authorization", scheme+token)
	_, err := verify(f.verifier, r, url, body)
	return err
}

// verify runs both phases, as the orchestrator does around reading the body.
func verify(v *Verifier, r *http.Request, url string, body []byte) (Identity, error) {
	p, err := v.VerifyHeaders(context.Background(), r, url)
	if err != nil {
		return Identity{}, err
	}
	return p.Bind(context.Background(), body)
}

func reasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

func TestVerifyAcceptsAndRefuses(t *testing.T) {
	const url = "http://orchestrator.example:8080/api/v1/agent/poll"
	body := []byte(`{"capacity_free":2}`)

	t.Run("valid token accepted once, replay refused", func(t *testing.T) {
		f := newFixture(t)
		tok, err := f.signer.Sign("POST", url, body)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.verify("POST", url, body, tok); err != nil {
			t.Fatalf("valid token refused: %v", err)
		}
		if got := reasonOf(f.verify("POST", url, body, tok)); got != ReasonReplayed {
			t.Fatalf("replay: reason %q, want %q", got, ReasonReplayed)
		}
	})

	cases := []struct {
		name string
		mut  func(f *fixture) (method, url string, body []byte, token string)
		want Reason
	}{
		{"expired", func(f *fixture) (string, string, []byte, string) {
			tok, _ := f.signer.Sign("POST", url, body)
			f.now = f.now.Add(2*time.Minute + time.Second)
			return "POST", url, body, tok
		}, ReasonExpired},
		{"issued in the future", func(f *fixture) (string, string, []byte, string) {
			f.now = f.now.Add(5 * time.Minute)
			tok, _ := f.signer.Sign("POST", url, body)
			f.now = f.now.Add(-5 * time.Minute)
			return "POST", url, body, tok
		}, ReasonNotYetValid},
		{"tampered body", func(f *fixture) (string, string, []byte, string) {
			tok, _ := f.signer.Sign("POST", url, body)
			return "POST", url, []byte(`{"capacity_free":200}`), tok
		}, ReasonBody},
		{"wrong URL", func(f *fixture) (string, string, []byte, string) {
			tok, _ := f.signer.Sign("POST", url, body)
			return "POST", "http://orchestrator.example:8080/api/v1/agent/deployments/x/claim", body, tok
		}, ReasonURL},
		{"wrong method", func(f *fixture) (string, string, []byte, string) {
			tok, _ := f.signer.Sign("GET", url, body)
			return "POST", url, body, tok
		}, ReasonMethod},
		{"signed by another key", func(f *fixture) (string, string, []byte, string) {
			_, other, _ := keys.Generate()
			s := NewSigner("acme", "runner-1", other)
			s.Now = f.signer.Now
			tok, _ := s.Sign("POST", url, body)
			return "POST", url, body, tok
		}, ReasonUnknownKey},
		{"unknown runner", func(f *fixture) (string, string, []byte, string) {
			s := NewSigner("acme", "runner-2", f.signer.keys[0].key)
			s.Now = f.signer.Now
			tok, _ := s.Sign("POST", url, body)
			return "POST", url, body, tok
		}, ReasonUnknownKey},
		{"lifetime too long", func(f *fixture) (string, string, []byte, string) {
			f.signer.Lifetime = 10 * time.Minute // Sign clamps; forge by hand below
			tok, _ := f.signer.Sign("POST", url, body)
			return "POST", url, body, tok
		}, ""},
		{"garbage", func(f *fixture) (string, string, []byte, string) {
			return "POST", url, body, "not.a.jwt"
		}, ReasonMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			m, u, b, tok := tc.mut(f)
			err := f.verify(m, u, b, tok)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Sign must clamp the lifetime to %s, got refusal %v", MaxLifetime, err)
				}
				return
			}
			if got := reasonOf(err); got != tc.want {
				t.Fatalf("reason %q (%v), want %q", got, err, tc.want)
			}
			if !errors.Is(err, ErrRefused) {
				t.Fatal("refusal must match ErrRefused")
			}
		})
	}
}

// TestTamperedBodyBurnsNoTokenID shows the order of the checks: everything the headers carry is
// checked before the body is read, and the token id is reserved only once the body matches, so
// a copy of a genuine token sent ahead with another body cannot lock the agent's request out.
func TestTamperedBodyBurnsNoTokenID(t *testing.T) {
	const url = "http://orchestrator.example:8080/api/v1/agent/poll"
	f := newFixture(t)
	body := []byte(`{"capacity_free":2}`)
	tok, err := f.signer.Sign("POST", url, body)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequestWithContext(context.Background(), "POST", url, nil)
	r.Header.Set("Authorization", scheme+tok)
	for range 2 {
		// Headers alone reserve nothing: checking them twice is fine.
		if _, err := f.verifier.VerifyHeaders(context.Background(), r, url); err != nil {
			t.Fatalf("headers of a valid token refused: %v", err)
		}
	}
	if got := reasonOf(f.verify("POST", url, []byte(`{"capacity_free":50}`), tok)); got != ReasonBody {
		t.Fatalf("tampered body: reason %q, want %q", got, ReasonBody)
	}
	if err := f.verify("POST", url, body, tok); err != nil {
		t.Fatalf("the genuine request after a tampered copy was refused: %v", err)
	}
	if got := reasonOf(f.verify("POST", url, body, tok)); got != ReasonReplayed {
		t.Fatalf("second genuine send: reason %q, want %q", got, ReasonReplayed)
	}
}

func TestEitherOfTwoKeysAccepted(t *testing.T) {
	oldPub, oldPriv, _ := keys.Generate()
	newPub, newPriv, _ := keys.Generate()
	f := newFixture(t, oldPub, newPub)
	for _, k := range []ed25519.PrivateKey{oldPriv, newPriv} {
		s := NewSigner("acme", "runner-1", k)
		s.Now = f.signer.Now
		tok, _ := s.Sign("GET", "http://o/api/v1/agent/poll", nil)
		r := httptest.NewRequestWithContext(context.Background(), "GET", "http://o/api/v1/agent/poll", nil)
		r.Header.Set("Authorization", scheme+tok)
		id, err := verify(f.verifier, r, "http://o/api/v1/agent/poll", nil)
		if err != nil {
			t.Fatalf("key %s refused: %v", s.Fingerprint(), err)
		}
		if id.Fingerprint != s.Fingerprint() || id.RunnerID != "runner-1" || id.Org != "acme" {
			t.Fatalf("identity %+v", id)
		}
	}
}

func TestCanonicalURL(t *testing.T) {
	for in, want := range map[string]string{
		"HTTP://Example.COM:80/a?b=1#frag": "http://example.com/a?b=1",
		"https://x:443":                    "https://x/",
		"http://127.0.0.1:8080/p":          "http://127.0.0.1:8080/p",
	} {
		got, err := CanonicalURL(in)
		if err != nil || got != want {
			t.Errorf("CanonicalURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := CanonicalURL("/relative"); err == nil {
		t.Error("relative URL must be refused")
	}
}
