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
)

// ObserveServerDate learns the clock difference from the Date header of an orchestrator answer to
// a request sent at sent and answered at received (both by Now). It returns the offset now in
// use. Only answers that come over the connection the client trusts (TLS to the orchestrator,
// or loopback) may be observed: an attacker who could forge them could already alter requests.
func (s *Signer) ObserveServerDate(date string, sent, received time.Time) time.Duration {
	server, err := http.ParseTime(date)
	if err != nil {
		return s.ClockOffset()
	}
	// Date is truncated to the second: the server's clock read somewhere in [server, server+1s)
	// while the request was between sent and received.
	mid := sent.Add(received.Sub(sent) / 2)
	d := server.Add(500 * time.Millisecond).Sub(mid)
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
