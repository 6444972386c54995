package connguard

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
)

type connKey struct{}

// Install hooks srv up to the guarded listener it is served on: its ConnContext (one set before
// still runs) and its Handler. On connections of another listener it does nothing.
func Install(srv *http.Server) {
	prev := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prev != nil {
			ctx = prev(ctx, c)
		}
		if tc, ok := c.(*tls.Conn); ok {
			c = tc.NetConn()
		}
		if rec, ok := c.(*conn); ok {
			ctx = context.WithValue(ctx, connKey{}, rec)
		}
		return ctx
	}
	srv.Handler = handler(srv.Handler)
}

// Authenticated records that the request of ctx proved identity (a runner, a job, an
// organisation's token): its connection counts as that identity's from now on.
func Authenticated(ctx context.Context, identity string) {
	rec, _ := ctx.Value(connKey{}).(*conn)
	if rec == nil || identity == "" {
		return
	}
	rec.ln.mu.Lock()
	rec.identity = identity
	rec.ln.mu.Unlock()
}

// handler wraps h: it counts the requests in flight on each connection (a connection serving
// one is never closed for another) and closes, over HTTP/1, the connections answers should
// close (see shouldClose).
func handler(h http.Handler) http.Handler {
	if h == nil {
		h = http.DefaultServeMux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec, _ := r.Context().Value(connKey{}).(*conn)
		if rec == nil {
			h.ServeHTTP(w, r)
			return
		}
		g := rec.ln
		g.mu.Lock()
		rec.busy++
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			rec.busy--
			g.mu.Unlock()
			g.poke()
		}()
		h.ServeHTTP(&answerWriter{ResponseWriter: w, rec: rec, http1: r.ProtoMajor == 1}, r)
	})
}

// shouldClose reports whether the answer on rec should close its connection: it carried no
// authenticated request, or its identity holds more connections than its share.
func (c *conn) shouldClose() bool {
	g := c.ln
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.identity == "" {
		return true
	}
	n := 0
	for o := range g.conns {
		if o.identity == c.identity {
			n++
		}
	}
	if n > g.l.MaxPerIdentity {
		// It goes once answered: it no longer counts as the identity's.
		delete(g.conns, c)
		return true
	}
	return false
}

// answerWriter adds "Connection: close" to an answer that should close its connection. Over
// HTTP/2 the header would end every stream of the connection, so it is left out there.
type answerWriter struct {
	http.ResponseWriter
	rec     *conn
	http1   bool
	decided bool
}

func (w *answerWriter) decide() {
	if w.decided {
		return
	}
	w.decided = true
	if w.http1 && w.rec.shouldClose() {
		w.Header().Set("Connection", "close")
	}
}

func (w *answerWriter) WriteHeader(code int) {
	if code >= 200 {
		w.decide()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerWriter) Write(b []byte) (int, error) {
	w.decide()
	return w.ResponseWriter.Write(b)
}

// Flush sends what is buffered (streamed state reads, long polls).
func (w *answerWriter) Flush() {
	w.decide()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
