package orchestrator_test

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// servedName makes a new TLS connection to addr trusting only the test CA and returns the
// common name of the certificate the server presented.
func servedName(t *testing.T, addr string, ca *orchestratortest.CA) string {
	t.Helper()
	conn, err := (&tls.Dialer{Config: &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"}}).DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("TLS handshake with a client trusting the test CA: %v", err)
	}
	defer conn.Close()
	tc, ok := conn.(*tls.Conn)
	if !ok {
		t.Fatalf("dialed a %T, want a TLS connection", conn)
	}
	return tc.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// replacePair moves a freshly issued pair over the served files, as a renewal does.
func replacePair(t *testing.T, certFile, keyFile, newCert, newKey string) {
	t.Helper()
	if err := os.Rename(newCert, certFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(newKey, keyFile); err != nil {
		t.Fatal(err)
	}
}

func TestTLSCertificateIsReloadedWhenItsFilesChange(t *testing.T) {
	ca := orchestratortest.NewCA(t)
	dir, issued := t.TempDir(), t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c, k := ca.Issue(t, issued, "first", time.Now().Add(time.Hour))
	replacePair(t, certFile, keyFile, c, k)

	logs := &clienttest.Buffer{}
	files, err := orchestrator.LoadCertificateFiles(certFile, keyFile, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	const every = 20 * time.Millisecond
	files.CheckInterval = every
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }),
		TLSConfig: files.TLSConfig(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = hs.Close() })
	addr := ln.Addr().String()

	// A client trusting the test CA gets the first certificate, over HTTP too.
	if got := servedName(t, addr, ca); got != "first" {
		t.Fatalf("served %q, want first", got)
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}, Timeout: 5 * time.Second}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+addr+"/", nil)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("HTTPS request: %v", err)
	}
	resp.Body.Close()
	// A client that does not trust the CA, and one that offers only TLS 1.1, are refused.
	if _, err := (&tls.Dialer{Config: &tls.Config{ServerName: "127.0.0.1"}}).DialContext(t.Context(), "tcp", addr); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client without the test CA connected (%v)", err)
	}
	if _, err := (&tls.Dialer{Config: &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS11}}).DialContext(t.Context(), "tcp", addr); err == nil {
		t.Fatal("a TLS 1.1 client connected; the server must require TLS 1.2 or later")
	}

	// waitFor makes new connections until the server presents want, for at most 5 s.
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for got := servedName(t, addr, ca); got != want; got = servedName(t, addr, ca) {
			if time.Now().After(deadline) {
				t.Fatalf("new connections still see %q, want %q after the files changed", got, want)
			}
			time.Sleep(every)
		}
	}
	// Renewal: the files are replaced by a new pair, and new connections see it.
	c, k = ca.Issue(t, issued, "second", time.Now().Add(time.Hour))
	replacePair(t, certFile, keyFile, c, k)
	waitFor("second")

	// A broken new pair (a certificate with another key; then garbage) keeps the old one.
	c, _ = ca.Issue(t, issued, "third", time.Now().Add(time.Hour))
	if err := os.Rename(c, certFile); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		time.Sleep(2 * every)
		if got := servedName(t, addr, ca); got != "second" {
			t.Fatalf("after a mismatched pair was written, served %q; the last good pair (second) must stay", got)
		}
	}
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * every)
	if got := servedName(t, addr, ca); got != "second" {
		t.Fatalf("after a garbage key was written, served %q; want second", got)
	}
	if n := strings.Count(logs.String(), "do not load"); n != 2 {
		t.Fatalf("the log must say once per change why the new files were not taken; %d times:\n%s", n, logs)
	}
	// An expired certificate is not taken either.
	c, k = ca.Issue(t, issued, "expired", time.Now().Add(-time.Minute))
	replacePair(t, certFile, keyFile, c, k)
	time.Sleep(3 * every)
	if got := servedName(t, addr, ca); got != "second" {
		t.Fatalf("after an expired pair was written, served %q; want second", got)
	}
	if !strings.Contains(logs.String(), "expired") {
		t.Fatalf("the log does not say the new certificate expired:\n%s", logs)
	}

	// Fixed files are taken at the next look.
	c, k = ca.Issue(t, issued, "fourth", time.Now().Add(time.Hour))
	replacePair(t, certFile, keyFile, c, k)
	waitFor("fourth")
	if strings.Contains(logs.String(), "PRIVATE KEY") {
		t.Fatal("the log holds key material")
	}
}

func TestTLSCertificateFilesMustLoadAtStart(t *testing.T) {
	ca := orchestratortest.NewCA(t)
	dir := t.TempDir()
	c1, _ := ca.Issue(t, dir, "one", time.Now().Add(time.Hour))
	_, k2 := ca.Issue(t, dir, "two", time.Now().Add(time.Hour))
	log := slog.New(slog.NewTextHandler(&clienttest.Buffer{}, nil))
	for name, files := range map[string][2]string{
		"mismatched": {c1, k2},
		"missing":    {filepath.Join(dir, "none.crt"), k2},
	} {
		if _, err := orchestrator.LoadCertificateFiles(files[0], files[1], log); err == nil || !strings.Contains(err.Error(), "TLS certificate") {
			t.Errorf("%s pair: error %v, want one naming the TLS certificate", name, err)
		}
	}
}
