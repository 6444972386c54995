package connguard

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// serve starts an http.Server with g installed on a loopback port: a request with
// "Authorization: Bearer <id>" is authenticated as <id> and answered 200, any other one 401.
// hold, when not nil, keeps authenticated requests to /hold until it is closed.
func serve(t *testing.T, l Limits, hold chan struct{}) (*Listener, string) {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 30 * time.Second, IdleTimeout: time.Minute,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, ok := bearer(r)
			if !ok {
				http.Error(w, "who are you", http.StatusUnauthorized)
				return
			}
			Authenticated(r.Context(), id)
			if r.URL.Path == "/hold" && hold != nil {
				<-hold
			}
			_, _ = io.WriteString(w, "ok")
		})}
	Install(srv)
	g := Listen(ln, l)
	go func() { _ = srv.Serve(g) }()
	t.Cleanup(func() { _ = srv.Close() })
	return g, ln.Addr().String()
}

func bearer(r *http.Request) (string, bool) {
	const p = "Bearer "
	a := r.Header.Get("Authorization")
	if len(a) <= len(p) || a[:len(p)] != p {
		return "", false
	}
	return a[len(p):], true
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closed reports whether the server closed c within d (after any answer it sent).
func closed(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

// get sends one request on c and returns its status (0 when none came).
func get(c net.Conn, path, token string) int {
	req := "GET " + path + " HTTP/1.1\r\nHost: x\r\n"
	if token != "" {
		req += "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		return 0
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	return readStatus(c)
}

// readStatus reads one response from c and returns its status (0 when none came).
func readStatus(c net.Conn) int {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestRefusedAnswerClosesTheConnection: a 401 keeps nothing open, an authenticated answer
// keeps its connection for the next request.
func TestRefusedAnswerClosesTheConnection(t *testing.T) {
	_, addr := serve(t, Limits{MaxConns: 8}, nil)
	c := dial(t, addr)
	if code := get(c, "/", ""); code != 401 {
		t.Fatalf("unauthenticated request: %d", code)
	}
	if !closed(c, 2*time.Second) {
		t.Error("the connection stayed open after a 401")
	}
	ok := dial(t, addr)
	for i := range 3 {
		if code := get(ok, "/", "job-a"); code != 200 {
			t.Fatalf("authenticated request %d on one connection: %d", i, code)
		}
	}
}

// TestHostileConnectionsMakeRoom: with the server full of connections of one client that never
// send a byte, send headers that never end, or were answered 401, and that client reopening at
// once whatever is closed, an authenticated client of another address is still served at once,
// every time; a connection serving a request is never closed to make room.
func TestHostileConnectionsMakeRoom(t *testing.T) {
	const limit = 16
	hold := make(chan struct{})
	g, addr := serve(t, Limits{MaxConns: limit}, hold)

	// A long request of another identity holds one connection for the whole test.
	held := dial(t, addr)
	_, _ = io.WriteString(held, "GET /hold HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer long\r\n\r\n")
	time.Sleep(100 * time.Millisecond)

	// The hostile client has an address of its own, as a job pod has its pod IP.
	hostile := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var mu sync.Mutex
	reopened := 0
	for i := range 2 * limit {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := hostile.DialContext(ctx, "tcp", addr)
				if err != nil {
					return
				}
				switch i % 3 {
				case 0: // nothing at all
				case 1: // headers that never end
					_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
				case 2: // a refused request, then the connection kept
					_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
				}
				for ctx.Err() == nil { // until the server closes it
					_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
					_, err := c.Read(make([]byte, 512))
					var ne net.Error
					if err != nil && (!errors.As(err, &ne) || !ne.Timeout()) {
						break
					}
				}
				_ = c.Close()
				mu.Lock()
				reopened++
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	var worst time.Duration
	client := &http.Client{Timeout: 5 * time.Second}
	for i := range 20 {
		start := time.Now()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/", nil)
		req.Header.Set("Authorization", "Bearer job-b")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d of the authenticated client: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
		worst = max(worst, time.Since(start))
		time.Sleep(20 * time.Millisecond)
	}
	st := g.Stats()
	stop()
	t.Logf("authenticated client: 20 requests, slowest %v; guard: %+v; hostile connections reopened %d times", worst, st, reopened)
	if worst > time.Second {
		t.Errorf("an authenticated request took %v with the server full of hostile connections", worst)
	}
	if st.Open > limit+1 {
		t.Errorf("%d connections open, limit %d", st.Open, limit)
	}
	close(hold)
	_ = held.SetReadDeadline(time.Now().Add(5 * time.Second))
	if code := readStatus(held); code != 200 {
		t.Errorf("the long request was cut to make room: %d", code)
	}
	wg.Wait()
}

// TestOneIdentityKeepsItsShare: connections of one identity beyond its share are closed once
// answered; those within it stay.
func TestOneIdentityKeepsItsShare(t *testing.T) {
	_, addr := serve(t, Limits{MaxConns: 8, MaxPerIdentity: 2}, nil)
	var cs []net.Conn
	for range 4 {
		c := dial(t, addr)
		if code := get(c, "/", "greedy"); code != 200 {
			t.Fatalf("greedy: %d", code)
		}
		cs = append(cs, c)
	}
	kept := 0
	for _, c := range cs {
		if !closed(c, 300*time.Millisecond) {
			kept++
		}
	}
	if kept != 2 {
		t.Errorf("greedy keeps %d connections open, want its share of 2", kept)
	}
}
