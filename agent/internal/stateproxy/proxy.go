// Package stateproxy is the state proxy: a small HTTP proxy the job runner starts on 127.0.0.1
// inside the job pod, between the CLI's `http` backend and the agent's state backend (the state
// Service). The CLI's http backend has no request timeout: on a kept-alive connection whose peer
// vanished without a reset (the agent pod that served it was on a node that was lost), a request
// waits until the kernel gives up on the connection, about 15 minutes with Linux's defaults
// (tcp_retries2), before the CLI's own retries run. The proxy bounds that wait:
//
//   - every upstream connection has TCP keepalive (probes after 5 s idle, every 5 s) and
//     TCP_USER_TIMEOUT of 15 s, so a connection whose peer stopped acknowledging, idle or with a
//     request in flight, fails within 15 s (DefaultUserTimeout) instead of 15 minutes; dials give
//     up after 5 s, TLS handshakes after 10 s;
//   - a read or a lock call (GET, LOCK, UNLOCK) with no answer head 30 s after it was sent fails
//     too (a live peer that holds it, such as a standby forwarding to a leader that is gone);
//   - after a failure the idle upstream connections are closed, and reads and lock calls are sent
//     again on a new connection (through the Service, so to a live replica once it no longer
//     lists the lost one), for up to 60 s, then the CLI gets 502 and its http backend retries;
//   - a state write (POST) is never sent twice by the proxy once any of it may have reached the
//     state backend: the CLI gets 502 and its http backend sends it again (retry_wait_min 1 s),
//     as it does today after any connection error. A write is the whole state under the CLI's
//     lock ID, committed only when the whole body arrived, by a compare-and-swap of the
//     generation it started from, so a repeated write leaves the same state and an earlier one
//     can never land after a later one. A write whose connection could not even be made is sent
//     again by the proxy like a read.
//
// TLS to the state Service is verified as the CLI verified it before (only the state CA when the
// job runner has one, else the system's roots); the CLI talks plain HTTP to the proxy over the
// pod's loopback. The proxy forwards to its one upstream only, so the state credential the CLI
// sends (Basic authentication) goes to the state Service and nowhere else; the proxy logs
// methods, paths and errors, never headers.
package stateproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults of the bounds; Options fields left zero take them.
const (
	DefaultDialTimeout       = 5 * time.Second
	DefaultHandshakeTimeout  = 10 * time.Second
	DefaultKeepAliveIdle     = 5 * time.Second
	DefaultKeepAliveInterval = 5 * time.Second
	// DefaultUserTimeout is TCP_USER_TIMEOUT: how long sent data (a request, a keepalive probe)
	// may stay unacknowledged before the connection is given up. It is the bound on detecting
	// a dead upstream.
	DefaultUserTimeout = 15 * time.Second
	// DefaultIdleTimeout is how long an upstream connection may wait idle for its next request.
	DefaultIdleTimeout = 5 * time.Second
	// DefaultReadHeaderTimeout bounds the wait for the answer head of GET, LOCK and UNLOCK.
	DefaultReadHeaderTimeout = 30 * time.Second
	// DefaultWriteHeaderTimeout bounds it for a state write: longer than the state backend's own
	// request limit (statebackend.DefaultRequestTimeout, 2 min), so it only cuts off a server that
	// broke its own bound; a large state may take long to commit.
	DefaultWriteHeaderTimeout = 150 * time.Second
	// DefaultRetryFor is how long a read or lock call is sent again on new connections.
	DefaultRetryFor = 60 * time.Second
)

// maxReplayBody is the largest body the proxy keeps to send again (LOCK and UNLOCK carry the
// lock info, at most 64 KiB at the state backend); GET has none, and writes are not replayed.
const maxReplayBody = 1 << 20

// StatusCertificateError answers a request whose upstream presented a certificate the proxy does
// not trust. It is a 4xx, which the CLI's http backend does not retry: like a CLI that verified
// the certificate itself, the run fails at once, and the job log says why.
const StatusCertificateError = 495

// Options configure a Proxy.
type Options struct {
	// Upstream is the state backend's base URL (OUTPOST_STATE_URL); requests keep their path
	// and query below it.
	Upstream string
	// RootCAs are the roots trusted for an https Upstream; nil: the system's.
	RootCAs *x509.CertPool
	// Log receives retries and failures (methods, paths and errors only); nil: discarded.
	Log *slog.Logger

	// The bounds; zero: the Default* constants.
	DialTimeout, HandshakeTimeout, KeepAliveIdle, KeepAliveInterval, UserTimeout, IdleTimeout time.Duration
	ReadHeaderTimeout, WriteHeaderTimeout, RetryFor                                           time.Duration

	// Wrap, when set, wraps the proxy's handler: the job runner times each state write in its
	// trace with it.
	Wrap func(http.Handler) http.Handler

	// dialAddr, when set, picks the address each new connection goes to (tests stand in for a
	// Service's load balancing with it); the dial itself is the proxy's.
	dialAddr func(addr string) string
}

func (o *Options) defaults() {
	set := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	set(&o.DialTimeout, DefaultDialTimeout)
	set(&o.HandshakeTimeout, DefaultHandshakeTimeout)
	set(&o.KeepAliveIdle, DefaultKeepAliveIdle)
	set(&o.KeepAliveInterval, DefaultKeepAliveInterval)
	set(&o.UserTimeout, DefaultUserTimeout)
	set(&o.IdleTimeout, DefaultIdleTimeout)
	set(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	set(&o.WriteHeaderTimeout, DefaultWriteHeaderTimeout)
	set(&o.RetryFor, DefaultRetryFor)
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// Proxy is a running state proxy. Close stops it.
type Proxy struct {
	opts     Options
	upstream *url.URL
	tr       *http.Transport
	srv      *http.Server
	url      string
	done     chan struct{}
	retries  atomic.Int64
}

// Start listens on a free port of 127.0.0.1 and serves until Close; ctx bounds the start only.
func Start(ctx context.Context, opts Options) (*Proxy, error) {
	opts.defaults()
	u, err := url.Parse(opts.Upstream)
	if err != nil {
		return nil, fmt.Errorf("state proxy: upstream %q: %w", opts.Upstream, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("state proxy: upstream %q is not an http:// or https:// URL", opts.Upstream)
	}
	p := &Proxy{opts: opts, upstream: u, done: make(chan struct{})}
	p.tr = p.transport()
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("state proxy: listen on 127.0.0.1: %w", err)
	}
	p.url = "http://" + l.Addr().String()
	// The CLI is the only client, on loopback; its requests come at once.
	var h http.Handler = p
	if opts.Wrap != nil {
		h = opts.Wrap(p)
	}
	p.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(opts.Log.Handler(), slog.LevelWarn)}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(l)
	}()
	return p, nil
}

// URL is the proxy's base URL (http://127.0.0.1:<port>), what the CLI's backend points at in
// place of the upstream.
func (p *Proxy) URL() string { return p.url }

// Retries is how many requests were sent again on a new connection so far.
func (p *Proxy) Retries() int64 { return p.retries.Load() }

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	<-p.done
	p.tr.CloseIdleConnections()
	return err
}

// Proxy-Authorization, which is for a proxy and not the state backend.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "TE", "Trailer", "Transfer-Encoding", "Upgrade"}

// replayable reports whether method may be sent again after a failure that left its outcome
// unknown: reads, and lock calls (the state backend answers a LOCK with the lock ID the state
// already holds by refreshing it, and an UNLOCK of a lock already released with 200).
func replayable(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, "LOCK", "UNLOCK":
		return true
	}
	return false
}

// ServeHTTP forwards one request of the CLI to the upstream, sending it again on a new connection
// as the package documentation says.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	replay := replayable(r.Method)
	var body []byte
	if replay && r.Body != nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxReplayBody+1))
		if err != nil {
			http.Error(w, "state proxy: read the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if len(b) > maxReplayBody {
			http.Error(w, fmt.Sprintf("state proxy: a %s body larger than %d bytes", r.Method, maxReplayBody), http.StatusRequestEntityTooLarge)
			return
		}
		body = b
	}
	headerTimeout := p.opts.WriteHeaderTimeout
	if replay {
		headerTimeout = p.opts.ReadHeaderTimeout
	}
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		resp, connected, err := p.roundTrip(r, replay, body, headerTimeout)
		if err == nil {
			p.respond(w, r, resp)
			return
		}
		// Whatever failed, the idle connections may be to the same dead peer.
		p.tr.CloseIdleConnections()
		if r.Context().Err() != nil {
			return // the CLI went away
		}
		log := p.opts.Log.With("method", r.Method, "path", r.URL.EscapedPath(), "attempt", attempt, "after", time.Since(start).Round(time.Millisecond).String())
		var cert *tls.CertificateVerificationError
		if errors.As(err, &cert) {
			log.Error("state proxy: the state backend's TLS certificate is not trusted; check OUTPOST_STATE_CA (the agent's state CA) and the state URL", "err", err)
			http.Error(w, "state proxy: the state backend's TLS certificate is not trusted: "+err.Error(), StatusCertificateError)
			return
		}
		again := replay || !connected
		if !again || time.Since(start)+wait > p.opts.RetryFor {
			why := "the state backend did not answer"
			if !again {
				why = "the state write may have reached the state backend; the CLI sends it again"
			}
			log.Warn("state proxy: "+why, "err", err)
			http.Error(w, "state proxy: "+why+": "+err.Error(), http.StatusBadGateway)
			return
		}
		log.Warn("state proxy: the state backend did not answer; sending again on a new connection", "err", err)
		p.retries.Add(1)
		t := time.NewTimer(wait)
		select {
		case <-r.Context().Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// errNoAnswerHead ends a request whose answer head did not come within its timeout.
var errNoAnswerHead = errors.New("no answer head in time")

// roundTrip sends r upstream once. The returned response's body stays readable until it is
// closed; connected says whether a connection was made for it (see outgoing).
func (p *Proxy) roundTrip(r *http.Request, replay bool, body []byte, headerTimeout time.Duration) (*http.Response, bool, error) {
	ctx, cancel := context.WithCancelCause(r.Context())
	timer := time.AfterFunc(headerTimeout, func() { cancel(fmt.Errorf("%w (%s)", errNoAnswerHead, headerTimeout)) })
	out, connected := p.outgoing(r.WithContext(ctx), replay, body)
	resp, err := p.tr.RoundTrip(out)
	if !timer.Stop() {
		// The timeout fired: the request's context is done, whatever came back with it.
		if err == nil {
			resp.Body.Close()
			err = context.Cause(ctx)
		} else {
			err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
	}
	if err != nil {
		cancel(nil)
		return nil, connected.Load(), err
	}
	resp.Body = cancelOnClose{resp.Body, func() { cancel(nil) }}
	return resp, connected.Load(), nil
}

// cancelOnClose ends a request's context once its answer's body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// outgoing is the upstream request for r. connected turns true once a connection for it was
// made, from when on a write may have (partly) reached the upstream.
func (p *Proxy) outgoing(r *http.Request, replay bool, body []byte) (*http.Request, *atomic.Bool) {
	connected := new(atomic.Bool)
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }})
	u := *p.upstream
	u.Path = strings.TrimRight(p.upstream.Path, "/") + r.URL.Path
	u.RawPath = ""
	if r.URL.RawPath != "" {
		u.RawPath = strings.TrimRight(p.upstream.EscapedPath(), "/") + r.URL.RawPath
	}
	u.RawQuery = r.URL.RawQuery
	out := (&http.Request{Method: r.Method, URL: &u, Header: r.Header.Clone(), Host: u.Host, ContentLength: r.ContentLength}).WithContext(ctx)
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	switch {
	case replay && len(body) > 0:
		// GetBody lets the transport itself send it again on a kept-alive connection the
		// upstream had closed before it was used.
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		out.Body, _ = out.GetBody()
		out.ContentLength = int64(len(body))
	case replay:
		out.Body, out.ContentLength = http.NoBody, 0
	case r.ContentLength != 0:
		// Not closed by a failed round trip: the same body goes out again when no connection
		// was made, and nothing of it was read then.
		out.Body = io.NopCloser(r.Body)
	default:
		out.Body = http.NoBody
	}
	return out, connected
}

// respond copies the upstream's answer to the CLI. An answer cut off mid-body is passed on as
// cut off (the connection to the CLI aborted), so the CLI never takes a part for the whole.
func (p *Proxy) respond(w http.ResponseWriter, r *http.Request, resp *http.Response) {
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil {
		p.tr.CloseIdleConnections()
		if r.Context().Err() == nil {
			p.opts.Log.Warn("state proxy: the state backend's answer broke off", "method", r.Method, "path", r.URL.EscapedPath(), "err", err)
		}
		panic(http.ErrAbortHandler)
	}
}
