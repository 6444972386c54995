package flagenv

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// A flag on the command line wins over its variable, the variable over what the flag held
// before; a flag named in noEnv reads no variable; a bad variable is named in the error.
func TestParsePrecedence(t *testing.T) {
	env := map[string]string{"APP_A": "env-a", "APP_B": "env-b", "APP_SECRET_FLAG": "ignored"}
	fs := pflag.NewFlagSet("app", pflag.ContinueOnError)
	a := fs.String("a", "default-a", "")
	b := fs.String("b", "default-b", "")
	c := fs.String("c", "default-c", "")
	noEnv := fs.String("secret-flag", "", "")
	if err := Parse(fs, []string{"--a", "flag-a"}, "APP_", func(k string) string { return env[k] }, "secret-flag"); err != nil {
		t.Fatal(err)
	}
	if *a != "flag-a" || *b != "env-b" || *c != "default-c" || *noEnv != "" {
		t.Errorf("a %q b %q c %q secret-flag %q", *a, *b, *c, *noEnv)
	}
	if u := fs.Lookup("b").Usage; !strings.Contains(u, "(env APP_B)") {
		t.Errorf("usage %q does not name the variable", u)
	}
	if u := fs.Lookup("secret-flag").Usage; strings.Contains(u, "env") {
		t.Errorf("usage %q names a variable the flag does not read", u)
	}

	fs = pflag.NewFlagSet("app", pflag.ContinueOnError)
	fs.Int("count", 1, "")
	fs.Bool("on", false, "")
	err := Parse(fs, nil, "APP_", func(k string) string { return map[string]string{"APP_COUNT": "many", "APP_ON": "maybe"}[k] })
	if err == nil || !strings.Contains(err.Error(), `APP_COUNT="many"`) || !strings.Contains(err.Error(), `APP_ON="maybe"`) {
		t.Errorf("bad variables: %v, want both named", err)
	}
	if got := Name("OUTPOST_", "kube-qps"); got != "OUTPOST_KUBE_QPS" {
		t.Errorf("Name = %q", got)
	}
}
