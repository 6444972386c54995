package jobrun

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// A root variable the configuration declares sensitive keeps its value out of the CLI's own
// output, but nothing stops the configuration from printing it anyway: nonsensitive(), a
// local-exec that echoes it, an error message that quotes it, often encoded on the way
// (jsonencode, base64encode, urlencode). The job runner knows the values it was given, so it adds
// each sensitive one to the log's redactor in every form those paths print it.

// variableSchema and sensitiveSchema pick the variable blocks and their `sensitive` argument out
// of a configuration file, whatever else it holds.
var (
	variableSchema  = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "variable", LabelNames: []string{"name"}}}}
	sensitiveSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "sensitive"}}}
)

// declaredSensitive returns the root module's variables declared `sensitive = true`. all is true
// when a file could not be read: then every variable counts as sensitive, since the CLI will say
// what is wrong with the file, and a value must not leak in the meantime.
func declaredSensitive(configDir string) (names map[string]bool, all bool) {
	names = map[string]bool{}
	entries, err := os.ReadDir(configDir)
	if err != nil {
		return names, true
	}
	p := hclparse.NewParser()
	for _, e := range entries {
		name := e.Name()
		var f *hcl.File
		var diags hcl.Diagnostics
		switch {
		case e.IsDir():
			continue
		case strings.HasSuffix(name, ".tf") || strings.HasSuffix(name, ".tofu"):
			f, diags = p.ParseHCLFile(filepath.Join(configDir, name))
		case strings.HasSuffix(name, ".tf.json") || strings.HasSuffix(name, ".tofu.json"):
			f, diags = p.ParseJSONFile(filepath.Join(configDir, name))
		default:
			continue
		}
		if diags.HasErrors() || f == nil {
			all = true
			continue
		}
		content, _, _ := f.Body.PartialContent(variableSchema)
		for _, b := range content.Blocks {
			attrs, _, _ := b.Body.PartialContent(sensitiveSchema)
			a, ok := attrs.Attributes["sensitive"]
			if !ok {
				continue
			}
			v, d := a.Expr.Value(nil)
			if d.HasErrors() || (v.IsKnown() && !v.IsNull() && v.True()) {
				names[b.Labels[0]] = true
			}
		}
	}
	return names, all
}

// sensitiveSecrets is every form of the sensitive variables' values to redact, and the names of
// the sensitive variables with a value (or a string inside it) too short to redact: shorter than
// minSecretLen, it cannot be told from ordinary words, so the log says so instead (the values
// stay out of the log by Terraform's own masking only).
func sensitiveSecrets(configDir string, vars map[string]json.RawMessage) (forms, tooShort []string) {
	if len(vars) == 0 {
		return nil, nil
	}
	names, all := declaredSensitive(configDir)
	for name, raw := range vars {
		if !all && !names[name] {
			continue
		}
		short := false
		for _, v := range valueStrings(raw) {
			if v != "" && len(v) < minSecretLen {
				short = true
			}
			forms = append(forms, secretForms(v)...)
		}
		if short {
			tooShort = append(tooShort, name)
		}
	}
	sort.Strings(tooShort)
	return forms, tooShort
}

// valueStrings are the strings a variable's value can print as: a string as itself; any other
// value as its JSON and every string inside it.
func valueStrings(raw json.RawMessage) []string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var compact bytes.Buffer
	if json.Compact(&compact, raw) != nil {
		return nil
	}
	out := []string{compact.String()}
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case string:
			out = append(out, t)
		case []any:
			for _, e := range t {
				walk(e)
			}
		case map[string]any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	var v any
	if json.Unmarshal(raw, &v) == nil {
		walk(v)
	}
	return out
}

// secretForms are the ways a value commonly reaches a log: as is; JSON-escaped with and without
// HTML escaping (jsonencode, `output -json`); base64 with either alphabet, padded or not
// (base64encode), and the part of it that stands for the value alone when the value sits at any
// byte offset inside a larger encoded string (a credential inside an encoded config or header);
// URL-escaped (urlencode); hex; its characters joined by a separator (join(" ", split("", v)) and
// the like); and, for a multi-line value, each of its lines (plans print those one per line).
func secretForms(v string) []string {
	forms := []string{v, jsonEscaped(v, true), jsonEscaped(v, false),
		base64.StdEncoding.EncodeToString([]byte(v)), base64.RawStdEncoding.EncodeToString([]byte(v)),
		base64.URLEncoding.EncodeToString([]byte(v)), base64.RawURLEncoding.EncodeToString([]byte(v)),
		url.QueryEscape(v), url.PathEscape(v), hex.EncodeToString([]byte(v)), strings.ToUpper(hex.EncodeToString([]byte(v)))}
	forms = append(forms, base64Inside([]byte(v), base64.RawStdEncoding)...)
	forms = append(forms, base64Inside([]byte(v), base64.RawURLEncoding)...)
	if chars := strings.Split(v, ""); len(chars) > 1 {
		// Not "\n": a line ending in a value's first character would be held back by the
		// redactor (which keeps a tail that could start a secret) until the next write.
		for _, sep := range []string{" ", ",", ", ", "-", "_", ".", ":", "|", "/", `","`, `", "`} {
			forms = append(forms, strings.Join(chars, sep))
		}
	}
	if strings.Contains(v, "\n") {
		for _, line := range strings.Split(v, "\n") {
			forms = append(forms, strings.TrimSpace(line))
		}
	}
	return forms
}

// base64Inside is, for each byte offset of v within a larger string modulo 3, the run of base64
// characters that depend on v's bytes alone: what the encoding of any string holding v there
// contains, whatever comes before and after.
func base64Inside(v []byte, enc *base64.Encoding) []string {
	var out []string
	for k := range 3 {
		s := enc.EncodeToString(append(make([]byte, k), v...))
		start := (8*k + 5) / 6        // the first character whose bits are all v's
		end := (8*(k+len(v))-6)/6 + 1 // one past the last such character
		if end > start && end <= len(s) {
			out = append(out, s[start:end])
		}
	}
	return out
}

// jsonEscaped is v as a JSON string without its quotes.
func jsonEscaped(v string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(v)
	s := strings.TrimSuffix(b.String(), "\n")
	return strings.TrimSuffix(strings.TrimPrefix(s, `"`), `"`)
}
