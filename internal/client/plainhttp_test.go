package client_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

func TestCheckPlainHTTP(t *testing.T) {
	t.Parallel()
	for url, refused := range map[string]bool{
		"http://orchestrator.example.com":      true,
		"http://10.0.0.5:8700":                 true,
		"HTTP://Orchestrator.Example.com/":     true,
		"http://127.0.0.1:8700":                false,
		"http://127.9.9.9":                     false,
		"http://localhost:8700":                false,
		"http://[::1]:8700":                    false,
		"https://orchestrator.example.com":     false,
		"https://10.0.0.5:8443/prefix":         false,
		"http://localhost.evil.example.com:80": true,
	} {
		err := client.CheckPlainHTTP(url, false, "--insecure-allow-http")
		if got := errors.Is(err, client.ErrPlainHTTP); got != refused {
			t.Errorf("%s: refused %v (%v), want %v", url, got, err, refused)
			continue
		}
		if refused && (!strings.Contains(err.Error(), "--insecure-allow-http") || !strings.Contains(err.Error(), "https://") || !strings.Contains(err.Error(), "tokens")) {
			t.Errorf("%s: %v must say why (tokens), name https:// and the opt-in", url, err)
		}
		if err := client.CheckPlainHTTP(url, true, "x"); err != nil {
			t.Errorf("%s with the opt-in: %v", url, err)
		}
	}
}

// countingTransport counts the requests that would leave the process.
type countingTransport struct{ n int }

func (c *countingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	c.n++
	return nil, errors.New("no network in this test")
}

// TestClientsRefusePlainHTTP: every client refuses to be built for an http:// orchestrator that
// is not loopback, so no credential is ever sent there, unless AllowInsecureHTTP is given.
func TestClientsRefusePlainHTTP(t *testing.T) {
	t.Parallel()
	_, priv, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	const url = "http://orchestrator.example.com:8700"
	ct := &countingTransport{}
	hc := client.WithHTTPClient(&http.Client{Transport: ct})
	builds := map[string]func(...client.Option) error{
		"admin": func(o ...client.Option) error {
			_, err := client.NewAdminClient(url, "acme", "opo_secret", o...)
			return err
		},
		"agent": func(o ...client.Option) error {
			_, err := client.NewAgentClient(url, agentauth.NewSigner("acme", "r1", priv), o...)
			return err
		},
		"job": func(o ...client.Option) error { _, err := client.NewJobClient(url, "opj_x.y", o...); return err },
	}
	for name, build := range builds {
		if err := build(hc); !errors.Is(err, client.ErrPlainHTTP) {
			t.Errorf("%s client for %s: %v, want ErrPlainHTTP", name, url, err)
		}
		if err := build(hc, client.AllowInsecureHTTP()); err != nil {
			t.Errorf("%s client with AllowInsecureHTTP: %v", name, err)
		}
	}
	if ct.n != 0 {
		t.Fatalf("%d requests left the process", ct.n)
	}
}
