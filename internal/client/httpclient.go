package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"
)

// NewHTTPClient returns the HTTP client for the orchestrator that every Outpost process builds
// the same way: proxies from the environment (HTTPS_PROXY, NO_PROXY), TLS 1.2 or later, and
// the system trust store plus the PEM certificates in caBundleFile when one is named. The bundle
// is appended, never a replacement: a private CA for the orchestrator must not cut the process
// off from public endpoints it also reaches through the same trust store. timeout bounds one
// try, long-poll wait included. It also returns the bundle's PEM (nil without one), which
// the job runner hands on to the CLI's http backend.
func NewHTTPClient(caBundleFile string, timeout time.Duration) (*http.Client, []byte, error) {
	base, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, nil, fmt.Errorf("unexpected default HTTP transport %T", http.DefaultTransport)
	}
	tr := base.Clone() // keeps the standard dial and TLS timeouts, keep-alive and HTTP/2
	tr.Proxy = http.ProxyFromEnvironment
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	var bundle []byte
	if caBundleFile != "" {
		pem, err := os.ReadFile(caBundleFile)
		if err != nil {
			return nil, nil, fmt.Errorf("read the CA bundle: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, errors.New(caBundleFile + " holds no PEM certificate")
		}
		tr.TLSClientConfig.RootCAs = pool
		bundle = pem
	}
	return &http.Client{Transport: tr, Timeout: timeout}, bundle, nil
}
