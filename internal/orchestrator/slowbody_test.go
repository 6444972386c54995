package orchestrator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// serveTCP serves the harness's server the way cmd/outpost-orchestrator does (HTTPServer on
// Listener) on a loopback port, and returns its address.
func serveTCP(t *testing.T, h *harness, limits HTTPLimits) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := h.srv.HTTPServer(limits, nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(Listener(ln, limits)) }()
	t.Cleanup(func() { _ = hs.Close(); <-done })
	return ln.Addr().String()
}

// slowResult is what one client that trickles its body saw.
type slowResult struct {
	status    int
	close     bool // the answer said Connection: close
	body      string
	answered  time.Duration // from the end of the headers to the answer
	closed    time.Duration // to the server closing the connection
	sentAtAns int64         // body bytes sent when the answer arrived
	err       error
}

// trickle sends head (request line and headers, ending in the blank line), then the body one
// byte every interval, until the server answers and closes the connection or bodyLen bytes went.
func trickle(ctx context.Context, addr, head string, bodyLen int, interval time.Duration) slowResult {
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return slowResult{err: err}
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head); err != nil {
		return slowResult{err: err}
	}
	start := time.Now()
	var sent atomic.Int64
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for range bodyLen {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if _, err := conn.Write([]byte{'x'}); err != nil {
				return
			}
			sent.Add(1)
		}
	}()
	defer close(stop)
	_ = conn.SetReadDeadline(time.Now().Add(time.Duration(bodyLen) * interval))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return slowResult{err: fmt.Errorf("no answer: %w", err)}
	}
	res := slowResult{status: resp.StatusCode, close: resp.Close, answered: time.Since(start), sentAtAns: sent.Load()}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	res.body = strings.TrimSpace(string(b))
	// The server closes the connection: the next read ends (EOF, or a reset if bytes of the
	// body were still arriving), long before the body would have been complete.
	if _, err := br.ReadByte(); err == nil {
		res.err = errors.New("the server sent more after the answer instead of closing")
	}
	res.closed = time.Since(start)
	return res
}

func postHead(addr, path string, hdr map[string]string, bodyLen int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, addr, bodyLen)
	for k, v := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	return b.String()
}

func durations(rs []slowResult, pick func(slowResult) time.Duration) (p50, maxD time.Duration) {
	ds := make([]time.Duration, len(rs))
	for i, r := range rs {
		ds[i] = pick(r)
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)-1]
}

// TestSlowUnauthenticatedBodyIsCutOff is a slowloris attempt over real TCP: 28 clients, more
// than the 8 connections the server allows, each sending the headers of a request with refused
// credentials (admin, agent and job routes) and then trickling a 2,000-byte body at one byte per
// 50 ms, which would take 100 s. Each must get its 401 and a closed connection long before its
// body is complete, without holding a handler, and a genuine request must get through after them.
func TestSlowUnauthenticatedBodyIsCutOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	// A genuine job token whose deployment ended longer ago than the grace: refused from the
	// headers too.
	d := h.deploy(api.OperationPlan)
	c := a.claim(d.ID, 1, "pod-a")
	a.mustOK(eventPath(d.ID), api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventFinished, Result: api.StatusSucceeded}}, nil)
	h.clock.Advance(DefaultJobTokenGrace + time.Minute)
	before := everything(h)
	limits := HTTPLimits{MaxConnections: 8, ReadTimeout: 2 * time.Minute}
	addr := serveTCP(t, h, limits)
	const bodyLen, interval, clients = 2000, 50 * time.Millisecond, 28
	heads := []string{
		postHead(addr, orgPath("acme")+"/deployments", map[string]string{"Authorization": "Bearer not-the-admin-token"}, bodyLen),
		postHead(addr, orgPath("acme")+"/deployments", map[string]string{"Authorization": "Bearer " + api.OrgTokenPrefix + "forged"}, bodyLen),
		postHead(addr, orgPath("acme")+"/runners", nil, bodyLen),
		postHead(addr, pollPath, map[string]string{"Authorization": "Outpost-Agent not.a.jwt"}, bodyLen),
		postHead(addr, "/api/v1/job/logs?offset=0", map[string]string{"Authorization": "Bearer opj_forged.mac"}, bodyLen),
		postHead(addr, "/api/v1/job/logs?offset=0", map[string]string{"Authorization": "Bearer " + c.JobToken}, bodyLen),
		postHead(addr, "/api/v1/no-such-route", nil, bodyLen),
	}
	results := make([]slowResult, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = trickle(t.Context(), addr, heads[i%len(heads)], bodyLen, interval)
		}()
	}
	wg.Wait()
	full := time.Duration(bodyLen) * interval
	for i, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("client %d: %v", i, r.err)
		case r.status != http.StatusUnauthorized && r.status != http.StatusNotFound:
			t.Errorf("client %d: HTTP %d %s, want 401 (404 for the unknown route)", i, r.status, r.body)
		case !r.close:
			t.Errorf("client %d: the answer does not say Connection: close", i)
		case r.sentAtAns >= bodyLen || r.closed >= full:
			t.Errorf("client %d: answered after %d of %d body bytes, closed after %s: the server waited for the body", i, r.sentAtAns, bodyLen, r.closed)
		}
	}
	if t.Failed() {
		return
	}
	ans50, ansMax := durations(results, func(r slowResult) time.Duration { return r.answered })
	cl50, clMax := durations(results, func(r slowResult) time.Duration { return r.closed })
	maxSent := slices.MaxFunc(results, func(a, b slowResult) int { return int(a.sentAtAns - b.sentAtAns) }).sentAtAns
	t.Logf("%d slow clients with refused credentials over %d connections at most: answered p50 %s max %s, connection closed p50 %s max %s, "+
		"at most %d of %d body bytes sent when answered (the whole body would take %s)",
		clients, limits.MaxConnections, ans50.Round(time.Millisecond), ansMax.Round(time.Millisecond),
		cl50.Round(time.Millisecond), clMax.Round(time.Millisecond), maxSent, bodyLen, full)
	for _, r := range results[:len(heads)] {
		t.Logf("what the client saw: HTTP %d %s", r.status, r.body)
	}
	// No handler is left running: the only one in flight is the scrape itself.
	if got := h.metricOn(addr, "outpost_orchestrator_requests_in_flight"); got != 1 {
		t.Errorf("requests in flight after the slow clients were answered: %v, want 1 (the scrape)", got)
	}
	if after := everything(h); after != before {
		t.Fatalf("refused requests changed stored state:\nbefore %s\nafter  %s", before, after)
	}
}

// metricOn reads one sample from /metrics at addr.
func (h *harness) metricOn(addr, series string) float64 {
	h.t.Helper()
	saved := h.hs.URL
	h.hs.URL = "http://" + addr
	defer func() { h.hs.URL = saved }()
	return h.metric(series)
}

// TestSlowAuthenticatedBodyIsBounded: a client with valid credentials that trickles its body
// holds a handler only until the read timeout, then gets 408 and a closed connection, and
// nothing is stored.
func TestSlowAuthenticatedBodyIsBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	before := everything(h)
	limits := HTTPLimits{ReadTimeout: time.Second}
	addr := serveTCP(t, h, limits)
	const bodyLen, interval = 400, 50 * time.Millisecond // 20 s to send in full
	body := strings.Repeat("x", bodyLen)
	for _, tc := range []struct{ name, head string }{
		{"admin", postHead(addr, orgPath("acme")+"/deployments", map[string]string{"Authorization": "Bearer " + h.token}, bodyLen)},
		// The agent's token is genuine and signs the body it would send: its headers pass.
		{"agent", postHead(addr, pollPath, map[string]string{"Authorization": a.token(pollPath, []byte(body))}, bodyLen)},
	} {
		r := trickle(t.Context(), addr, tc.head, bodyLen, interval)
		if r.err != nil {
			t.Fatalf("%s: %v", tc.name, r.err)
		}
		if r.status != http.StatusRequestTimeout || !strings.Contains(r.body, api.CodeRequestTimeout) || !r.close || r.sentAtAns >= bodyLen {
			t.Fatalf("%s: HTTP %d (close %v) %s after %d of %d bytes; want 408 request_timeout and a closed connection before the body is complete",
				tc.name, r.status, r.close, r.body, r.sentAtAns, bodyLen)
		}
		t.Logf("%s with valid credentials, body trickled: HTTP %d after %s (read timeout %s), closed after %s, %d of %d bytes sent: %s",
			tc.name, r.status, r.answered.Round(time.Millisecond), limits.ReadTimeout, r.closed.Round(time.Millisecond), r.sentAtAns, bodyLen, r.body)
	}
	if after := everything(h); after != before {
		t.Fatalf("cut-off requests changed stored state:\nbefore %s\nafter  %s", before, after)
	}
}

// TestConnectionLimitAndHeaderTimeout: with the limit held by connections of another address that
// never send their headers, the next request is answered at once (an idle one is closed to make
// room: before connguard it waited for the header timeout, and an attacker reopening its
// connections held the server for ever), and the others are closed by the header timeout.
func TestConnectionLimitAndHeaderTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	limits := HTTPLimits{MaxConnections: 4, ReadHeaderTimeout: time.Second}
	addr := serveTCP(t, h, limits)
	var idle []net.Conn
	// The idle connections come from an address of their own, as another machine's would.
	other := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for range limits.MaxConnections {
		c, err := other.DialContext(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	time.Sleep(100 * time.Millisecond) // all four accepted
	start := time.Now()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/healthz", nil)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("a request with the limit held by idle connections: %v", err)
	}
	resp.Body.Close()
	waited := time.Since(start)
	if waited > 500*time.Millisecond {
		t.Errorf("the request waited %s for a connection held idle", waited)
	}
	if resp.Header.Get("Connection") != "close" && !resp.Close {
		t.Error("an unauthenticated answer kept its connection")
	}
	for i, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("idle connection %d got data instead of being closed", i)
		}
	}
	t.Logf("with %d idle connections holding the limit of %d, the next request was answered in %s",
		len(idle), limits.MaxConnections, waited.Round(time.Millisecond))
}
