package porttest

import (
	"net"
	"strconv"
	"testing"
)

// TestPortIsBelowTheEphemeralRange: the port is free (it can be bound) and below the range the
// kernel hands out for port 0 and outgoing connections.
func TestPortIsBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	for range 20 {
		addr := Addr(t)
		_, ps, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(ps)
		if p >= low || p < 1024 {
			t.Fatalf("port %d, want one in [1024, %d)", p, low)
		}
		l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatalf("the port is not free: %v", err)
		}
		_ = l.Close()
	}
}
