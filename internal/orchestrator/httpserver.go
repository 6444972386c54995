package orchestrator

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/connguard"
)

// Defaults of HTTPLimits.
const (
	DefaultMaxConnections    = 1024
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 2 * time.Minute
	DefaultWriteTimeout      = MaxPollWait + time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxHeaderBytes    = 64 << 10
)

// HTTPLimits bound what clients can hold of the server: connections, and how long a request may
// take to arrive, to be answered and to sit idle between requests. Zero fields take the defaults
// above.
type HTTPLimits struct {
	// MaxConnections is the most connections open at once. Every agent holds one for its long
	// poll. When they are all open, a new connection takes the place of an idle one: first one
	// that never carried an authenticated request, of the client address holding most of
	// those, then an idle one of the identity (runner, job, token) holding most (package
	// connguard); a connection serving a request is never closed for it.
	MaxConnections int
	// MaxUnauthenticatedConnections is the most connections open at once that have not carried
	// an authenticated request (new ones, and ones whose request was refused or went to
	// /healthz over HTTP/2; over HTTP/1 such an answer closes its connection). Beyond it the
	// oldest idle one of the address holding most is closed. Default MaxConnections/4.
	MaxUnauthenticatedConnections int
	// MaxConnectionsPerIdentity is how many connections one runner, job or token keeps open
	// between its requests; an answer on one beyond it closes it. Default MaxConnections/8.
	MaxConnectionsPerIdentity int
	// ReadHeaderTimeout bounds the arrival of a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the arrival of a whole request, body included. Only a request whose
	// credentials passed waits for its body (see prepare); a refused one is cut off at once.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end of its answer; it
	// must exceed MaxPollWait, which a long poll is held.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that sends no next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers.
	MaxHeaderBytes int
}

// WithDefaults fills in the zero fields.
func (l HTTPLimits) WithDefaults() HTTPLimits {
	set := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	if l.MaxConnections <= 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	if l.MaxUnauthenticatedConnections <= 0 {
		l.MaxUnauthenticatedConnections = max(1, l.MaxConnections/4)
	}
	if l.MaxConnectionsPerIdentity <= 0 {
		l.MaxConnectionsPerIdentity = max(1, l.MaxConnections/8)
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	set(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	set(&l.ReadTimeout, DefaultReadTimeout)
	set(&l.WriteTimeout, DefaultWriteTimeout)
	set(&l.IdleTimeout, DefaultIdleTimeout)
	return l
}

// Validate refuses limits that would break the protocol.
func (l HTTPLimits) Validate() error {
	l = l.WithDefaults()
	if l.WriteTimeout <= MaxPollWait+5*time.Second {
		return fmt.Errorf("write timeout %s must be longer than the %s a long poll is held (plus 5s to answer)", l.WriteTimeout, MaxPollWait)
	}
	return nil
}

// HTTPServer returns an http.Server serving the orchestrator within the limits' timeouts; serve it
// on Listener(ln, limits), which shares the connections. errorLog
// receives net/http's own errors (nil: the standard logger).
func (s *Server) HTTPServer(l HTTPLimits, errorLog *log.Logger) *http.Server {
	l = l.WithDefaults()
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          errorLog,
	}
	connguard.Install(hs)
	return hs
}

// Listener lets connections of ln in within the limits, fairly between clients (package
// connguard): a listener that made new connections wait at the limit would let whoever holds
// the connections keep them.
func Listener(ln net.Listener, l HTTPLimits) net.Listener {
	l = l.WithDefaults()
	return connguard.Listen(ln, connguard.Limits{MaxConns: l.MaxConnections, MaxUnauthenticated: l.MaxUnauthenticatedConnections,
		MaxPerIdentity: l.MaxConnectionsPerIdentity})
}
