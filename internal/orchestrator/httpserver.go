package orchestrator

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
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
	// MaxConnections is the most connections open at once; more wait in the listen backlog.
	// Every agent holds one for its long poll.
	MaxConnections int
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

// HTTPServer returns an http.Server serving the orchestrator with the limits' timeouts; serve it
// on Listener(ln, limits) so the connection limit holds too. errorLog receives net/http's own
// errors (nil: the standard logger).
func (s *Server) HTTPServer(l HTTPLimits, errorLog *log.Logger) *http.Server {
	l = l.WithDefaults()
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          errorLog,
	}
}

// Listener limits ln to the limits' connections at once.
func Listener(ln net.Listener, l HTTPLimits) net.Listener {
	return netutil.LimitListener(ln, l.WithDefaults().MaxConnections)
}
