package client

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// ErrPlainHTTP is the refusal of an http:// orchestrator URL that leaves the machine without the
// insecure opt-in. Everything that talks to the orchestrator carries credentials in its requests
// (admin and organisation tokens, job tokens, and agent requests whose signed tokens a listener
// could replay within their minute), so plain http is safe only over loopback.
var ErrPlainHTTP = errors.New("plain http to a host that is not loopback")

// CheckPlainHTTP refuses an http:// URL whose host is not loopback (localhost, 127.0.0.0/8, ::1)
// unless allowInsecure is set; optIn names the setting that sets it, for the message. Other URLs
// pass: whether they are well formed is for the caller's own validation.
func CheckPlainHTTP(rawURL string, allowInsecure bool, optIn string) error {
	u, err := url.Parse(rawURL)
	if err == nil && strings.EqualFold(u.Scheme, "http") && !allowInsecure && !isLoopback(u.Hostname()) {
		return plainHTTPError(rawURL, optIn)
	}
	return nil
}

func plainHTTPError(rawURL, optIn string) error {
	return fmt.Errorf("%w: the orchestrator URL %s would send tokens and signed requests unencrypted across the network, "+
		"where anyone on the way can read them and act with them; use https://, or set %s if this network is trusted and you accept that",
		ErrPlainHTTP, rawURL, optIn)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// AllowInsecureHTTP lets the client use an http:// orchestrator URL that is not loopback. Give
// it only when the user asked for it by name (the provider's insecure_allow_http, the agent's
// --insecure-allow-http).
func AllowInsecureHTTP() Option { return func(t *transport) { t.allowInsecureHTTP = true } }
