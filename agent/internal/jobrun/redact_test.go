package jobrun

import (
	"bytes"
	"strings"
	"testing"
)

func TestRedactorHidesSecretsAcrossWrites(t *testing.T) {
	const token = "opj_c2VjcmV0LXRva2Vu.bWFj"
	text := "token=" + token + "\nagain " + token + token + " end\nopj_ but not the token\nfinal o"
	want := strings.ReplaceAll(text, token, redactedMark)
	// Every split of the text into two writes, and byte-by-byte writes.
	for cut := 0; cut <= len(text); cut++ {
		var out bytes.Buffer
		r := newRedactor(&out, token)
		for _, part := range []string{text[:cut], text[cut:]} {
			if n, err := r.Write([]byte(part)); err != nil || n != len(part) {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Fatalf("cut at %d: got %q, want %q", cut, out.String(), want)
		}
	}
	var out bytes.Buffer
	r := newRedactor(&out, token, "git", "ghp_abcdef123456")
	for i := range len(text) {
		_, _ = r.Write([]byte{text[i]})
	}
	_, _ = r.Write([]byte("clone https://ghp_abcdef123456@github.com with git\n"))
	_ = r.Flush()
	got := out.String()
	if strings.Contains(got, token) || strings.Contains(got, "ghp_abcdef123456") {
		t.Fatalf("secret leaked: %q", got)
	}
	if !strings.Contains(got, "with git") {
		t.Fatalf("short strings must not be treated as secrets: %q", got)
	}
}

func TestRedactorDoesNotDelayOrdinaryOutput(t *testing.T) {
	var out bytes.Buffer
	r := newRedactor(&out, "opj_secret_token")
	_, _ = r.Write([]byte("Still creating... [10s elapsed]\n"))
	if out.String() != "Still creating... [10s elapsed]\n" {
		t.Fatalf("held back ordinary output: %q", out.String())
	}
	_, _ = r.Write([]byte("value: op"))
	if out.String() != "Still creating... [10s elapsed]\nvalue: " {
		t.Fatalf("should hold back exactly the possible secret prefix: %q", out.String())
	}
}
