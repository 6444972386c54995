package stateproxy

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Test credentials: what the CLI sends as Basic authentication (TF_HTTP_USERNAME and
// TF_HTTP_PASSWORD in the job pod).
const (
	testUser     = "dep-1"
	testPassword = "opst_proxytest-credential-0123456789"
)

// backend is a small in-memory Terraform `http` backend, shared by several servers the way the
// agent's replicas share one state backend. ops records "server METHOD" for every request that
// carried the right credential.
type backend struct {
	mu     sync.Mutex
	state  []byte
	lockID string
	ops    []string
	at     []time.Time // when each of ops was answered
	bad    int         // requests with a missing or wrong credential
	// written, when set, is called (under the backend's lock) once a write was stored, before
	// its answer goes out.
	written func(server string)
}

// handler serves the backend as the server called name.
func (b *backend) handler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if u, p, ok := r.BasicAuth(); !ok || u != testUser || p != testPassword {
			b.bad++
			http.Error(w, "bad credentials", http.StatusUnauthorized)
			return
		}
		b.ops = append(b.ops, name+" "+r.Method)
		b.at = append(b.at, time.Now())
		switch r.Method {
		case http.MethodGet:
			if b.state == nil {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			_, _ = w.Write(b.state)
		case http.MethodPost:
			b.state = body
			if b.written != nil {
				b.written(name)
			}
		case "LOCK":
			var id struct{ ID string }
			_ = json.Unmarshal(body, &id)
			if b.lockID != "" && b.lockID != id.ID {
				w.WriteHeader(http.StatusLocked)
				return
			}
			b.lockID = id.ID
		case "UNLOCK":
			b.lockID = ""
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	})
}

// served returns the ops recorded so far.
func (b *backend) served() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.ops...)
}

// silentListener accepts connections and never answers: a peer that is there but says nothing.
func silentListener(t *testing.T) string {
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// closedPort is an address nothing listens on: dials to it are refused.
func closedPort(t *testing.T) string {
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// sequence stands in for a Service: the n-th new connection goes to addrs[n], the last one for
// every connection after.
func sequence(addrs ...string) func(string) string {
	var n atomic.Int32
	return func(string) string {
		i := int(n.Add(1)) - 1
		return addrs[min(i, len(addrs)-1)]
	}
}

// request sends a request with the test credential and returns the answer's status and body.
func request(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(testUser, testPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s through the proxy: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSilentUpstreamReadsFailOver: a read and a lock call sent to an upstream that accepted the
// connection and never answers are sent again on a new connection, to the healthy upstream, once
// their answer-head timeout passes; the CLI gets the healthy upstream's answer.
func TestSilentUpstreamReadsFailOver(t *testing.T) {
	b := &backend{state: []byte(`{"serial":1}`)}
	healthy := httptest.NewServer(b.handler("healthy"))
	defer healthy.Close()
	for _, method := range []string{http.MethodGet, "LOCK"} {
		t.Run(method, func(t *testing.T) {
			p, err := Start(t.Context(), Options{Upstream: healthy.URL, ReadHeaderTimeout: time.Second,
				dialAddr: sequence(silentListener(t), healthy.Listener.Addr().String())})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			start := time.Now()
			status, body := request(t, method, p.URL()+"/v1/states/app", `{"ID":"lock-1"}`)
			took := time.Since(start)
			if status != http.StatusOK || (method == http.MethodGet && body != `{"serial":1}`) {
				t.Fatalf("%s: %d %q, want the healthy upstream's answer", method, status, body)
			}
			if took < time.Second || took > 5*time.Second || p.Retries() != 1 {
				t.Errorf("answered after %s with %d retries; want one retry after the 1 s answer-head timeout", took, p.Retries())
			}
			t.Logf("%s answered by the healthy upstream %s after the silent one", method, took.Round(time.Millisecond))
		})
	}
}

// TestWritesAreNotSentTwice: a state write that went out on a connection whose upstream then
// said nothing is not sent again by the proxy (the CLI gets 502 and resends it itself, see the
// package documentation); a write whose connection could not be made is sent again, once.
func TestWritesAreNotSentTwice(t *testing.T) {
	b := &backend{}
	healthy := httptest.NewServer(b.handler("healthy"))
	defer healthy.Close()

	p, err := Start(t.Context(), Options{Upstream: healthy.URL, WriteHeaderTimeout: time.Second,
		dialAddr: sequence(silentListener(t), healthy.Listener.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	status, _ := request(t, http.MethodPost, p.URL()+"/v1/states/app", `{"serial":2}`)
	p.Close()
	if status != http.StatusBadGateway || len(b.served()) != 0 {
		t.Fatalf("a write to a silent upstream: %d, the healthy one served %v; want 502 and no second write", status, b.served())
	}

	p, err = Start(t.Context(), Options{Upstream: healthy.URL, dialAddr: sequence(closedPort(t), healthy.Listener.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	status, _ = request(t, http.MethodPost, p.URL()+"/v1/states/app", `{"serial":3}`)
	if got := b.served(); status != http.StatusOK || len(got) != 1 || string(b.state) != `{"serial":3}` {
		t.Fatalf("a write whose first dial was refused: %d, served %v, state %q; want it written once", status, got, b.state)
	}
}

// TestTLSVerifiedAndCredentialKept: the proxy verifies the upstream's certificate against the
// roots it was given (the state CA), refuses an upstream it does not trust with a status the
// CLI does not retry, passes the CLI's credential to the upstream it trusts, and never logs it.
func TestTLSVerifiedAndCredentialKept(t *testing.T) {
	b := &backend{}
	srv := httptest.NewTLSServer(b.handler("tls"))
	defer srv.Close()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	trusted := x509.NewCertPool()
	trusted.AddCert(srv.Certificate())
	p, err := Start(t.Context(), Options{Upstream: srv.URL, RootCAs: trusted, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := request(t, http.MethodPost, p.URL()+"/v1/states/app", `{"serial":4}`); status != http.StatusOK || string(b.state) != `{"serial":4}` {
		t.Fatalf("write over verified TLS: %d, state %q", status, b.state)
	}
	p.Close()

	p, err = Start(t.Context(), Options{Upstream: srv.URL, RootCAs: x509.NewCertPool(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	status, body := request(t, http.MethodGet, p.URL()+"/v1/states/app", "")
	if status != StatusCertificateError || !strings.Contains(body, "not trusted") || p.Retries() != 0 {
		t.Fatalf("an untrusted upstream: %d %q after %d retries; want %d at once", status, body, p.Retries(), StatusCertificateError)
	}
	if len(b.served()) != 1 || b.bad != 0 {
		t.Errorf("the upstream served %v (and %d without the credential); want only the trusted write", b.served(), b.bad)
	}
	if strings.Contains(logs.String(), testPassword) || !strings.Contains(logs.String(), "OUTPOST_STATE_CA") {
		t.Errorf("the proxy's log holds the credential or lacks the hint:\n%s", logs.String())
	}
}
