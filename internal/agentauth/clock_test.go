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

// A long poll's Date is the orchestrator's time when the request arrived (or, behind a proxy,
// when the answer left): either end of the call, never its midpoint. Held 30 s on one machine,
// it must not make up a difference; with a real one it keeps the offset learnt from a short
// request, and an offset it proves wrong moves only as far as the call allows.
func TestObserveServerDateOfALongPoll(t *testing.T) {
	sent := time.Date(2026, 11, 23, 12, 0, 0, 300_000_000, time.UTC)
	received := sent.Add(30 * time.Second)
	for _, c := range []struct {
		name       string
		start      time.Duration // the offset before
		stamped    time.Time     // when, by this machine's clock, the orchestrator read its clock
		ahead      time.Duration // how far the orchestrator's clock really is ahead
		want       time.Duration
		shortAfter bool // a short request follows, and must give the whole difference
	}{
		{"same clock, stamped on arrival", 0, sent.Add(time.Millisecond), 0, 0, false},
		{"same clock, stamped on the answer", 0, received.Add(-time.Millisecond), 0, 0, false},
		{"90 s ahead, learnt before", 90 * time.Second, sent.Add(time.Millisecond), 90 * time.Second, 90 * time.Second, false},
		{"90 s behind, learnt before", -90 * time.Second, sent.Add(time.Millisecond), -90 * time.Second, -90 * time.Second, false},
		{"90 s ahead, not learnt yet", 0, sent.Add(time.Millisecond), 90 * time.Second, 60 * time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := NewSigner("acme", "r1", fuzzKey)
			if c.start != 0 {
				now := sent.Add(-time.Minute)
				s.ObserveServerDate(now.Add(c.start).Format(http.TimeFormat), now.Add(-50*time.Millisecond), now.Add(50*time.Millisecond))
				if got := s.ClockOffset(); (got - c.start).Abs() > time.Second {
					t.Fatalf("offset learnt from a short request %s, want about %s", got, c.start)
				}
			}
			date := c.stamped.Add(c.ahead).Format(http.TimeFormat)
			got := s.ObserveServerDate(date, sent, received)
			if (got - c.want).Abs() > time.Second {
				t.Errorf("after a 30 s poll: offset %s, want about %s", got, c.want)
			}
			if c.shortAfter {
				now := received.Add(time.Second)
				s.ObserveServerDate(now.Add(c.ahead).Format(http.TimeFormat), now.Add(-50*time.Millisecond), now.Add(50*time.Millisecond))
				if got := s.ClockOffset(); (got - c.ahead).Abs() > time.Second {
					t.Errorf("after a short request: offset %s, want about %s", got, c.ahead)
				}
			}
		})
	}
}
