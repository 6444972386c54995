package jobrun

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// leakyConfig declares its secrets sensitive and then prints them anyway, in the encodings
// configurations use: the local-exec lines and the outputs of the plan.
const leakyConfig = `
variable "db_password" {
  type      = string
  sensitive = true
}
variable "conn" {
  type      = object({ user = string, password = string })
  sensitive = true
}
variable "tls_key" {
  type      = string
  sensitive = true
}
variable "region" {
  type = string
}
resource "terraform_data" "leak" {
  input = var.region
  provisioner "local-exec" {
    command = <<-EOC
      printf '%s\n' 'plain=${nonsensitive(var.db_password)}'
      printf '%s\n' 'b64=${nonsensitive(base64encode(var.db_password))}'
      printf '%s\n' 'json=${nonsensitive(jsonencode(var.conn))}'
      printf '%s\n' 'url=${nonsensitive(urlencode(var.db_password))}'
    EOC
  }
}
output "leaked_plain" { value = nonsensitive(var.db_password) }
output "leaked_json" { value = nonsensitive(jsonencode({ p = var.db_password })) }
output "leaked_key" { value = nonsensitive(var.tls_key) }
output "region" { value = var.region }
`

// TestSensitiveVariablesNeverReachTheLog runs the real CLIs on a configuration that prints its
// sensitive variables in several encodings; the orchestrator's log holds none of them, and the
// places they were printed show the redaction mark.
func TestSensitiveVariablesNeverReachTheLog(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real terraform and tofu")
	}
	const password = `p@ss"w<o>rd&42\x`
	tlsKey := "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\nVJTUt9Us8cKjMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jN\n-----END PRIVATE KEY-----"
	conn := map[string]any{"user": "admin", "password": password}
	connJSON, _ := json.Marshal(conn)
	for _, name := range []string{"terraform", "tofu"} {
		path := cliUnderTest()[name]
		t.Run(name, func(t *testing.T) {
			if path == "" {
				t.Skip("the CLI is not available (OUTPOST_TOFU unset or terraform not installed)")
			}
			h := newHarness(t, path)
			vars := map[string]any{"db_password": password, "conn": conn, "tls_key": tlsKey, "region": "eu-central-1"}
			src := inlineSource(t, map[string]string{"main.tf": leakyConfig})
			for _, op := range []api.Operation{api.OperationPlan, api.OperationApply} {
				r := h.runJob(h.deploy(op, src, vars, "leaky"), runOptions{})
				if r.Code != 0 {
					t.Fatalf("%s %s exited %d:\n%s", name, op, r.Code, r.Log)
				}
				checkLogDelivery(t, r)
				t.Logf("%s %s log:\n%s", name, op, r.Log)
				for _, leak := range []string{password, jsonEscaped(password, true), jsonEscaped(password, false),
					base64.StdEncoding.EncodeToString([]byte(password)), url.QueryEscape(password), string(connJSON),
					jsonEscaped(string(connJSON), true), "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"} {
					if strings.Contains(r.Log, leak) {
						t.Errorf("%s %s: the log holds %q", name, op, leak)
					}
				}
				if !strings.Contains(r.Log, "eu-central-1") {
					t.Errorf("%s %s: a variable that is not sensitive was redacted too", name, op)
				}
				if op == api.OperationApply {
					for _, mark := range []string{"plain=" + redactedMark, "b64=" + redactedMark, "url=" + redactedMark} {
						if !strings.Contains(r.Log, mark) {
							t.Errorf("%s apply: the log lacks %q: the leak was not printed, so the test proves nothing:\n%s", name, mark, r.Log)
						}
					}
				}
			}
		})
	}
}

func TestDeclaredSensitive(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("vars.tf", `variable "a" { sensitive = true }
variable "b" { sensitive = false }
variable "c" {}
resource "x" "y" { z = 1 }`)
	write("more.tf.json", `{"variable": {"d": {"sensitive": true}, "e": {"type": "string"}}}`)
	write("notes.md", "variable \"f\" { sensitive = true }")
	names, all := declaredSensitive(dir)
	var got []string
	for n := range names {
		got = append(got, n)
	}
	slices.Sort(got)
	if all || !slices.Equal(got, []string{"a", "d"}) {
		t.Errorf("declaredSensitive = %v (all %v), want [a d]", got, all)
	}
	write("broken.tf", `variable "g" {`)
	if _, all := declaredSensitive(dir); !all {
		t.Error("an unreadable file must make every variable count as sensitive")
	}
}
