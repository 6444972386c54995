package console

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestSessionCookieUnderTLS: under TLS the session cookie is Secure and __Host- prefixed (so the
// browser sends it only over HTTPS, to this host); over plain HTTP it is neither, and both are
// HttpOnly and SameSite=Strict.
func TestSessionCookieUnderTLS(t *testing.T) {
	c := &Console{}
	plain := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/signin", nil)
	secure := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/signin", nil)
	secure.TLS = &tls.ConnectionState{}
	if ck := c.cookie(secure, "v", time.Hour); !ck.Secure || ck.Name != "__Host-outpost_session" || !ck.HttpOnly ||
		ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Domain != "" || ck.MaxAge != 3600 {
		t.Fatalf("cookie under TLS: %+v", ck)
	}
	if ck := c.cookie(plain, "v", time.Hour); ck.Secure || ck.Name != "outpost_session" || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie over plain HTTP: %+v", ck)
	}
	if ck := c.cookie(secure, "", -1); ck.MaxAge != -1 {
		t.Fatalf("sign-out cookie %+v does not expire at once", ck)
	}
}
