package agentauth

import (
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The Signer corrects for a difference between 2 s and 15 min, to the second, and stamps tokens
// with it; smaller ones are noise of Date's whole seconds, larger ones a clock too wrong to trust.
func TestObserveServerDate(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		ahead, want time.Duration
	}{{0, 0}, {time.Second, 0}, {90 * time.Second, 90 * time.Second}, {-90 * time.Second, -90 * time.Second},
		{10 * time.Minute, 10 * time.Minute}, {20 * time.Minute, 0}, {-time.Hour, 0}}
	for _, c := range cases {
		s := NewSigner("acme", "r1", fuzzKey)
		s.Now = func() time.Time { return now }
		date := now.Add(c.ahead).Format(http.TimeFormat)
		if got := s.ObserveServerDate(date, now.Add(-100*time.Millisecond), now.Add(100*time.Millisecond)); got != c.want || s.ClockOffset() != c.want {
			t.Errorf("server %s ahead: offset %s (kept %s), want %s", c.ahead, got, s.ClockOffset(), c.want)
		}
		tok, err := s.Sign("POST", fuzzURL, nil)
		if err != nil {
			t.Fatal(err)
		}
		var fields TokenFields
		if _, _, err := jwt.NewParser().ParseUnverified(tok, &fields); err != nil {
			t.Fatal(err)
		}
		if iat := fields.IssuedAt.Time; !iat.Equal(now.Add(c.want)) {
			t.Errorf("server %s ahead: token issued at %s, want %s", c.ahead, iat, now.Add(c.want))
		}
	}
	s := NewSigner("acme", "r1", fuzzKey)
	s.ObserveServerDate(time.Now().Add(time.Minute).Format(http.TimeFormat), time.Now(), time.Now())
	if s.ObserveServerDate("not a date", time.Now(), time.Now()) != s.ClockOffset() || s.ClockOffset() == 0 {
		t.Error("an answer without a valid Date changed the learnt offset")
	}
}
