package jobrun

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
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

// revealsInBase64 reports whether any run of base64 characters in out decodes, at any of its
// four character offsets and in either alphabet, to bytes holding secret: what someone reading
// the log would try.
func revealsInBase64(out, secret string) bool {
	isB64 := func(c byte) bool {
		return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("+/-_", c) >= 0
	}
	for i := 0; i < len(out); {
		if !isB64(out[i]) {
			i++
			continue
		}
		j := i
		for j < len(out) && isB64(out[j]) {
			j++
		}
		run := out[i:j]
		i = j
		for off := range 4 {
			if off >= len(run) {
				break
			}
			r := run[off:]
			r = r[:len(r)/4*4]
			for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
				var norm string
				if enc == base64.RawStdEncoding {
					norm = strings.NewReplacer("-", "+", "_", "/").Replace(r)
				} else {
					norm = strings.NewReplacer("+", "-", "/", "_").Replace(r)
				}
				if b, err := enc.DecodeString(norm); err == nil && bytes.Contains(b, []byte(secret)) {
					return true
				}
			}
		}
	}
	return false
}

// TestRedactionCoversEveryEncoding (N7): the job token, the state credential (and its Basic-auth
// pair) and a sensitive value are hidden in every form the log could carry them: base64 of a
// larger string at every byte offset and either alphabet, hex, URL- and JSON-escaped, and their
// characters spaced out; a sensitive value too short to redact is named in the log instead.
func TestRedactionCoversEveryEncoding(t *testing.T) {
	const (
		token = "opj_c2VjcmV0LXRva2Vu.bWFj"
		state = "opst_Zm9vYmFyYmF6cXV4"
		pair  = "dep-abc:" + state
		value = "hunter2-passw0rd"
	)
	var out bytes.Buffer
	r := newRedactor(&out, secretForms(token)...)
	r.add(secretForms(state)...)
	r.add(secretForms(pair)...)
	r.add(secretForms(value)...)
	var lines []string
	for _, s := range []string{token, state, pair, value} {
		for k := range 6 {
			for tail := range 4 {
				in := []byte(strings.Repeat("x", k) + s + strings.Repeat("y", tail))
				lines = append(lines, "Authorization: Basic "+base64.StdEncoding.EncodeToString(in),
					"cfg="+base64.URLEncoding.EncodeToString(in)+";")
			}
		}
		lines = append(lines, "hex "+hex.EncodeToString([]byte(s)), "url "+url.QueryEscape(s), "spaced "+strings.Join(strings.Split(s, ""), " "),
			"dashed "+strings.Join(strings.Split(s, ""), "-"), `json ["`+strings.Join(strings.Split(s, ""), `","`)+`"]`)
	}
	for _, l := range lines {
		_, _ = r.Write([]byte(l + "\n"))
	}
	_ = r.Flush()
	got := out.String()
	for _, s := range []string{token, state, pair, value} {
		if strings.Contains(got, s) || revealsInBase64(got, s) || strings.Contains(got, hex.EncodeToString([]byte(s))) ||
			strings.Contains(got, strings.Join(strings.Split(s, ""), " ")) || strings.Contains(got, strings.Join(strings.Split(s, ""), `","`)) {
			t.Errorf("%s can be read from the log:\n%s", s, got)
		}
	}
	if n := strings.Count(got, redactedMark); n < len(lines) {
		t.Errorf("%d redactions for %d lines that each hold a secret", n, len(lines))
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "vars.tf"), []byte(`variable "pin" { sensitive = true }
variable "password" { sensitive = true }`), 0o600); err != nil {
		t.Fatal(err)
	}
	forms, short := sensitiveSecrets(dir, map[string]json.RawMessage{"pin": json.RawMessage(`"4711"`), "password": json.RawMessage(`"long-enough-secret"`)})
	if !slices.Equal(short, []string{"pin"}) || !slices.Contains(forms, "long-enough-secret") {
		t.Errorf("too short: %v; forms %d", short, len(forms))
	}
}
