package agentauth

import (
	"math"
	"net/http"
	"time"
)

// Clock correction: the orchestrator allows DefaultSkew of difference, and a token lives up to
// 30 s, so a machine whose clock is off by more (a VM resumed from a snapshot, a node without
// NTP) would have every request refused. The Signer therefore stamps tokens with the
// orchestrator's time, learnt from the Date header of its answers. Differences below
// minClockCorrection are ignored (Date has whole seconds); beyond maxClockCorrection the clock
// is too wrong to trust either side, and the requests are refused as they would be anyway.
const (
	minClockCorrection = 2 * time.Second
	maxClockCorrection = 15 * time.Minute
	// shortRequest is the longest request whose Date is taken as the orchestrator's time at its
	// midpoint. A longer one (a long poll) only bounds the difference.
	shortRequest = 2 * time.Second
)

// NotableClockOffset is the difference from which the agent warns about this machine's clock.
// Smaller ones are corrected quietly: a few seconds are within what NTP-less nodes drift to, and
// far inside the orchestrator's tolerance even uncorrected.
const NotableClockOffset = 10 * time.Second

// ObserveServerDate learns the clock difference from the Date header of an orchestrator answer to
// a request sent at sent and answered at received (both by Now). It returns the offset now in
// use. Only answers that come over the connection the client trusts (TLS to the orchestrator,
// or loopback) may be observed: an attacker who could forge them could already alter requests.
//
// Date says the orchestrator's clock read somewhere in [Date, Date+1s) (it has whole seconds)
// at some moment between sent and received: the reference orchestrator stamps it when the
// request arrives, a proxy in front may stamp it when the answer leaves. So an answer shows
// only that the difference lies in [Date-received, Date+1s-sent], an interval as wide as the
// call took: 30 s for a long poll, whose arrival is not its midpoint. An offset in use that
// the interval (give or take minClockCorrection) allows is kept. Otherwise a short request's
// midpoint gives the new offset, and a long request moves it only as far as the interval's
// nearer end; the next short request (the 401 of a token from a wrong clock comes at once)
// makes it exact.
func (s *Signer) ObserveServerDate(date string, sent, received time.Time) time.Duration {
	server, err := http.ParseTime(date)
	if err != nil || received.Before(sent) {
		return s.ClockOffset()
	}
	lo, hi := server.Sub(received), server.Add(time.Second).Sub(sent)
	cur := s.ClockOffset()
	if cur >= lo-minClockCorrection && cur <= hi+minClockCorrection {
		return cur
	}
	var d time.Duration
	switch {
	case received.Sub(sent) <= shortRequest:
		d = lo + (hi-lo)/2
	case cur < lo:
		d = lo
	default:
		d = hi
	}
	switch {
	case d.Abs() < minClockCorrection || d.Abs() > maxClockCorrection:
		d = 0
	default:
		d = time.Duration(math.Floor(d.Seconds())) * time.Second // whole seconds, as Date has
	}
	s.offset.Store(int64(d))
	return d
}

// ClockOffset is how far the orchestrator's clock is ahead of this machine's, as last learnt.
func (s *Signer) ClockOffset() time.Duration { return time.Duration(s.offset.Load()) }
