package store_test

import (
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/storetest"
)

// TestConsoleSessions: a session is found by its cookie alone, on both engines, until it expires
// or is deleted; the sweep purges expired ones; what is stored is not the cookie.
func TestConsoleSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, eng store.Engine) {
		s, clock := newStore(t, eng)
		ctx := t.Context()
		cookie, err := s.CreateSession(ctx, store.SessionRecord{Org: "acme", TokenID: "tok-1", TokenHash: []byte{1, 2}}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		other, err := s.CreateSession(ctx, store.SessionRecord{Org: "beta", Admin: true}, 2*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Session(ctx, cookie)
		if err != nil || got == nil || got.Org != "acme" || got.TokenID != "tok-1" || got.Admin {
			t.Fatalf("session = %+v, %v; want acme's", got, err)
		}
		if got.Key == cookie || len(got.Key) != 64 {
			t.Fatalf("the session is stored under %q, want the SHA-256 of the cookie, not the cookie", got.Key)
		}
		if got, _ := s.Session(ctx, cookie+"x"); got != nil {
			t.Fatal("a wrong cookie found a session")
		}
		clock.Advance(time.Hour)
		if got, _ := s.Session(ctx, cookie); got != nil {
			t.Fatal("an expired session was still found")
		}
		if n, err := s.PurgeSessions(ctx, 100); err != nil || n != 1 {
			t.Fatalf("purge = %d, %v; want the 1 expired session", n, err)
		}
		if got, _ := s.Session(ctx, other); got == nil || got.Org != "beta" || !got.Admin {
			t.Fatalf("the unexpired session = %+v after the purge", got)
		}
		if err := s.DeleteSession(ctx, other); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Session(ctx, other); got != nil {
			t.Fatal("a deleted session was still found")
		}
	})
}
