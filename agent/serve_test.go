package main

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServeLimits plays greedy and slow clients against serve: a request whose headers never
// end is cut off, oversized headers are refused, connections beyond the limit wait, and a body
// that trickles in past the read timeout ends the request.
func TestServeLimits(t *testing.T) {
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	lim := serverLimits{connections: 2, headerBytes: 4 << 10, readHeader: 300 * time.Millisecond, read: time.Second, write: time.Second, idle: time.Second}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	go func() { _ = serve(t.Context(), "test", addr, h, lim, slog.New(slog.DiscardHandler), nil) }()
	dial := func() net.Conn {
		t.Helper()
		var d net.Dialer
		for range 50 {
			c, err := d.DialContext(t.Context(), "tcp", addr)
			if err == nil {
				return c
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatal("the server does not listen")
		return nil
	}
	// closedWithin reports whether the server closes c (after any answer) within d.
	closedWithin := func(c net.Conn, d time.Duration) bool {
		_ = c.SetReadDeadline(time.Now().Add(d))
		_, err := io.ReadAll(c)
		var ne net.Error
		return !errors.As(err, &ne) || !ne.Timeout()
	}

	// Headers that never end: cut off after the header timeout.
	slow := dial()
	_, _ = slow.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n"))
	if !closedWithin(slow, 3*time.Second) {
		t.Error("a request whose headers never end was not cut off")
	}
	slow.Close()

	// Oversized headers: 431.
	big := dial()
	_, _ = big.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n"))
	if code := status(big); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("oversized headers: %d", code)
	}
	big.Close()

	// A body that trickles in beyond the read timeout ends the request.
	trickle := dial()
	_, _ = trickle.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc"))
	if !closedWithin(trickle, 4*time.Second) {
		t.Error("a body that never arrives was not cut off")
	}
	trickle.Close()

	// Two connections held open: a third waits for one of them.
	held := []net.Conn{dial(), dial()}
	for _, c := range held {
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		if code := status(c); code != http.StatusOK {
			t.Fatalf("held connection: %d", code)
		}
	}
	third := dial()
	defer third.Close()
	_, _ = third.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	_ = third.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := bufio.NewReader(third).ReadByte(); err == nil {
		t.Error("a third connection was served while two were open")
	}
	for _, c := range held {
		c.Close()
	}
	_ = third.SetReadDeadline(time.Now().Add(3 * time.Second))
	if code := status(third); code != http.StatusOK {
		t.Errorf("the waiting connection once the others closed: %d", code)
	}
}

// status reads one response from c and returns its status code (0 when there is none).
func status(c net.Conn) int {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	return resp.StatusCode
}
