package stateproxy

// Connections to the state backend: bounded dials, keepalive and TCP_USER_TIMEOUT, and the
// transport the proxy sends with.

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
)

// Dialer returns a dialer with the proxy's default bounds: dials give up after 5 s, and a
// connection whose peer stopped acknowledging (keepalive probes after 5 s idle, or a request)
// fails within 15 s. The state backend's forwarder reaches the leader with it too.
func Dialer() *net.Dialer {
	var o Options
	o.defaults()
	return newDialer(o)
}

func newDialer(o Options) *net.Dialer {
	return &net.Dialer{
		Timeout: o.DialTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: o.KeepAliveIdle, Interval: o.KeepAliveInterval,
			Count: max(1, int(o.UserTimeout/o.KeepAliveInterval)),
		},
		Control: userTimeoutControl(o.UserTimeout),
	}
}

// transport is an HTTP/1.1 transport to the upstream: one request per connection at a time, so a
// failed connection takes only its own request with it, and a new connection is a new pick of
// the Service's load balancing. Reads and writes share its kept-alive connections, as they did
// in the CLI's own client.
func (p *Proxy) transport() *http.Transport {
	d := newDialer(p.opts)
	dial := d.DialContext
	if p.opts.dialAddr != nil {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, p.opts.dialAddr(addr))
		}
	}
	return &http.Transport{
		// As the CLI's own client did: an egress proxy of the pod's environment applies unless
		// NO_PROXY names the Service.
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dial,
		TLSClientConfig:     &tls.Config{RootCAs: p.opts.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: p.opts.HandshakeTimeout,
		// A connection idle for longer is not used again: the next request (typically the state
		// write at the end of an apply) gets a new one, so a connection whose peer went away
		// while nothing was sent on it is rarely what a request meets.
		IdleConnTimeout:     p.opts.IdleTimeout,
		MaxIdleConnsPerHost: 4,
		// HTTP/1.1 only (a non-nil empty map turns HTTP/2 off).
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
}

// hopHeaders are the hop-by-hop headers a proxy does not forward (RFC 9110 section 7.6.1), and
