package jobrun

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzRedaction writes a secret (a sensitive value, the job token or the state credential all go
// through secretForms) inside fuzzed text, as is, base64 of the whole line, hex and spaced out,
// in fuzzed chunk sizes, and checks that none of those forms of it reaches the log and no run of
// base64 in the log decodes to it at any offset. The variables come from the orchestrator and
// the text from the deployment's code: both untrusted. Seeds: testdata/fuzz/FuzzRedaction.
func FuzzRedaction(f *testing.F) {
	f.Add("hunter2-passw0rd", "password=", "; next", uint8(3))
	f.Add("opst_Zm9vYmFyYmF6", "Authorization: Basic ", "", uint8(0))
	f.Add("aaaaaaa", "aaa", "aaaa", uint8(1))
	f.Fuzz(func(t *testing.T, value, prefix, suffix string, chunk uint8) {
		if len(value) < minSecretLen || len(value) > 64 || len(prefix)+len(suffix) > 256 || !utf8.ValidString(value) ||
			strings.ContainsAny(value, "[]\x00\n") || strings.ContainsAny(prefix+suffix, "\x00") {
			return
		}
		var out bytes.Buffer
		r := newRedactor(&out, secretForms(value)...)
		line := prefix + value + suffix
		text := line + "\n" + base64.StdEncoding.EncodeToString([]byte(line)) + "\n" + hex.EncodeToString([]byte(value)) + "\n" +
			strings.Join(strings.Split(value, ""), " ") + "\n"
		n := int(chunk)%16 + 1
		for i := 0; i < len(text); i += n {
			_, _ = r.Write([]byte(text[i:min(i+n, len(text))]))
		}
		_ = r.Flush()
		got := strings.ReplaceAll(out.String(), redactedMark, "\x00")
		for _, form := range []string{value, hex.EncodeToString([]byte(value)), strings.Join(strings.Split(value, ""), " ")} {
			if strings.Contains(got, form) {
				t.Fatalf("%q reached the log as %q:\n%s", value, form, out.String())
			}
		}
		if revealsInBase64(got, value) {
			t.Fatalf("%q can be decoded from the log:\n%s", value, out.String())
		}
	})
}
