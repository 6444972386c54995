package main

import (
	"crypto/tls"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// TestServesTLSFromCertificateFiles runs the command with the TLS flags from the environment and
// talks to it over real TCP: HTTPS with the test CA works, plain HTTP and TLS 1.1 do not.
func TestServesTLSFromCertificateFiles(t *testing.T) {
	ca := orchestratortest.NewCA(t)
	certFile, keyFile := ca.Issue(t, t.TempDir(), "orchestrator", time.Now().Add(time.Hour))
	env := map[string]string{"OUTPOST_ORCHESTRATOR_TLS_CERT_FILE": certFile, "OUTPOST_ORCHESTRATOR_TLS_KEY_FILE": keyFile}
	srv := startServeEnv(t, filepath.Join(t.TempDir(), "data"), func(k string) string { return env[k] }, "--admin-token", "a-long-enough-admin-token")

	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}, Timeout: 5 * time.Second}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+srv.addr+"/api/v1/orgs/acme/runners", nil)
	req.Header.Set("Authorization", "Bearer a-long-enough-admin-token")
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("HTTPS with the test CA: %v", err)
	}
	resp.Body.Close()
	// 404: the API answered, about an organisation that does not exist on a fresh server.
	if resp.StatusCode != http.StatusNotFound || resp.TLS == nil || resp.TLS.PeerCertificates[0].Subject.CommonName != "orchestrator" {
		t.Fatalf("HTTPS answer %d, TLS %v; want the API's 404 (no such organisation) with the test certificate", resp.StatusCode, resp.TLS != nil)
	}
	// Plain HTTP on the same port gets net/http's refusal, never the API.
	plainReq, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+srv.addr+"/healthz", nil)
	plain, err := http.DefaultClient.Do(plainReq)
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP on the TLS port: HTTP %d, want 400", plain.StatusCode)
		}
	}
	if _, err := (&tls.Dialer{Config: &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS11}}).DialContext(t.Context(), "tcp", srv.addr); err == nil {
		t.Fatal("a TLS 1.1 client connected")
	}
	if !strings.Contains(srv.logs.String(), "tls=true") {
		t.Fatalf("the start line does not say TLS is on:\n%s", srv.logs)
	}
}

func TestTLSFlagsAreCheckedAtStart(t *testing.T) {
	ca := orchestratortest.NewCA(t)
	dir := t.TempDir()
	certFile, _ := ca.Issue(t, dir, "one", time.Now().Add(time.Hour))
	_, otherKey := ca.Issue(t, dir, "two", time.Now().Add(time.Hour))
	base := []string{"--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--admin-token", "a-long-enough-admin-token"}
	for name, c := range map[string]struct {
		flags []string
		want  string
	}{
		"cert without key": {[]string{"--tls-cert-file", certFile}, "go together"},
		"key without cert": {[]string{"--tls-key-file", otherKey}, "go together"},
		"mismatched pair":  {[]string{"--tls-cert-file", certFile, "--tls-key-file", otherKey}, "--tls-key-file"},
	} {
		err := run(t.Context(), append(base, c.flags...), noEnv, &clienttest.Buffer{}, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}
	help := &clienttest.Buffer{}
	_, _ = parseFlags([]string{"--help"}, noEnv, help)
	for _, want := range []string{"OUTPOST_ORCHESTRATOR_TLS_CERT_FILE", "OUTPOST_ORCHESTRATOR_TLS_KEY_FILE", "TLS 1.2"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("--help does not show %s", want)
		}
	}
}
