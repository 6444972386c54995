package store

import (
	"strings"
	"testing"
)

// FuzzParseJobToken feeds the job token parser what any client can send as a bearer token (it
// runs before anything else is known of the caller): a token it mints for a fuzzed grant parses
// back to that grant; the same token with any one byte changed is refused or stands for the very
// same grant (base64 has spellings that decode alike); and a fuzzed string is refused unless it
// is such a token. Seeds: testdata/fuzz/FuzzParseJobToken.
func FuzzParseJobToken(f *testing.F) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	f.Add("opj_YWNtZXxkZXAtMXwxfDE.bWFj", "acme", "dep-abcdefghijk", 1, int64(1), uint16(5), byte('x'))
	f.Add("", "o", "d", 0, int64(-1), uint16(0), byte(0))
	f.Add("opj_.", "org|with|bars", "dep", 7, int64(9e18), uint16(3), byte('|'))
	f.Fuzz(func(t *testing.T, raw, org, dep string, attempt int, fencing int64, at uint16, b byte) {
		if p, err := parseJobToken(secret, raw); err == nil && MintJobToken(secret, p) != raw {
			// Accepted without being the canonical token of its grant: only another spelling of
			// the same base64 may do that, and then it must stand for a grant we minted.
			q, err := parseJobToken(secret, MintJobToken(secret, p))
			if err != nil || q != p {
				t.Fatalf("accepted %q as %+v, which does not round-trip", raw, p)
			}
		}
		want := JobTokenPayload{Org: org, Deployment: dep, Attempt: attempt, Fencing: fencing}
		tok := MintJobToken(secret, want)
		got, err := parseJobToken(secret, tok)
		if strings.Contains(org+dep, "|") {
			// IDs never hold '|' (api.ValidateID); such a grant must not parse as another one.
			if err == nil && got != want {
				t.Fatalf("grant %+v parsed back as %+v", want, got)
			}
			return
		}
		if err != nil || got != want {
			t.Fatalf("grant %+v: parsed back as %+v, %v", want, got, err)
		}
		i := int(at) % len(tok)
		if tok[i] == b {
			return
		}
		changed := tok[:i] + string(b) + tok[i+1:]
		if p, err := parseJobToken(secret, changed); err == nil && p != want {
			t.Fatalf("a token with byte %d changed to %q was accepted as %+v (minted for %+v)", i, b, p, want)
		}
		if _, err := parseJobToken([]byte("another secret, another orchestrator"), tok); err == nil {
			t.Fatal("another orchestrator's secret accepted the token")
		}
	})
}
