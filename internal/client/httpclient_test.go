package client

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The CA bundle is trusted on top of the system's: a server whose certificate only the bundle
// vouches for is reached with it and refused without it.
func TestNewHTTPClientTrustsTheBundle(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer srv.Close()
	dir := t.TempDir()
	bundle := filepath.Join(dir, "ca.crt")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(bundle, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	get := func(c *http.Client) error {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	with, pemOut, err := NewHTTPClient(bundle, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(with); err != nil {
		t.Fatalf("with the bundle: %v", err)
	}
	if string(pemOut) != string(certPEM) || with.Timeout != time.Minute {
		t.Errorf("bundle PEM %q, timeout %v", pemOut, with.Timeout)
	}
	without, pemOut, err := NewHTTPClient("", time.Minute)
	if err != nil || pemOut != nil {
		t.Fatalf("without a bundle: %v, %q", err, pemOut)
	}
	if err := get(without); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a certificate only the bundle vouches for was accepted without it: %v", err)
	}

	notPEM := filepath.Join(dir, "not.pem")
	_ = os.WriteFile(notPEM, []byte("hello"), 0o600)
	if _, _, err := NewHTTPClient(notPEM, time.Minute); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a file without certificates: %v", err)
	}
	if _, _, err := NewHTTPClient(filepath.Join(dir, "absent"), time.Minute); err == nil {
		t.Error("a missing bundle file was accepted")
	}
}
