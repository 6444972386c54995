// Package porttest picks loopback ports for servers that a test starts in another process, or
// that must listen on an address chosen before they start.
//
// A port found by listening on port 0 comes from the kernel's ephemeral range, so between the
// test closing that listener and the server binding the port, any outgoing connection of any
// process on the machine, or any other test's listener on port 0, may take it; under make test's
// parallel packages that happened (the demo's agent exited with "address already in use"). The
// ports here come from the range just below the ephemeral one, which the kernel never hands out
// by itself: only another explicit pick can collide, and picks are random over thousands of ports.
package porttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// span is how many ports below the ephemeral range are picked from.
const span = 12000

// Port returns a TCP port free on 127.0.0.1 at the time of the call, from below the kernel's
// ephemeral port range.
func Port(ctx context.Context) (int, error) {
	low := ephemeralLow()
	first := max(low-span, 1024)
	var lc net.ListenConfig
	for range 200 {
		p := first + rand.IntN(low-first) //nolint:gosec // a port number, not a secret
		l, err := lc.Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port on 127.0.0.1 between %d and %d after 200 tries", first, low-1)
}

// Addr is Port as "127.0.0.1:port"; it fails the test when no port is free.
func Addr(t testing.TB) string {
	t.Helper()
	p, err := Port(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's default when it cannot
// be read).
func ephemeralLow() int {
	const linuxDefault = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linuxDefault
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return linuxDefault
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= 2048 {
		return linuxDefault
	}
	return low
}
