package jobrun

import (
	"regexp"
	"strings"
	"testing"
)

// FuzzGitURL feeds the git source's URL (from the job spec, so the orchestrator's choice) to
// what the job runner logs of it: the shown URL never holds the credentials in it, whether the
// URL parses or not. Seeds: testdata/fuzz/FuzzGitURL.
func FuzzGitURL(f *testing.F) {
	f.Add("https", "x-access-token", "ghp_abcdef123456", "github.com/org/repo.git")
	f.Add("https", "tok@en", "pass@word", "host/%zz")
	f.Add("http", "", "only-a-password", "[::1]:8080/r")
	f.Fuzz(func(t *testing.T, scheme, user, pass, rest string) {
		userinfo := user
		if pass != "" {
			userinfo += ":" + pass
		}
		if !validScheme(scheme) || strings.ContainsAny(userinfo, "/?#") || len(userinfo) < minSecretLen || strings.Contains("@"+rest, userinfo) || strings.Contains(scheme, userinfo) {
			return // not a URL with credentials ("/?#" end the authority before any "@")
		}
		raw := scheme + "://" + userinfo + "@" + rest
		shown := displayGitURL(raw)
		// A password is looked for when it has a character the rest of the URL (escaped or not)
		// cannot have brought into what is shown.
		own := strings.IndexFunc(pass, func(c rune) bool { return !strings.ContainsRune(rest+scheme+user+"@*%0123456789ABCDEFabcdef", c) }) >= 0
		if (scheme != "ssh" && strings.Contains(shown, userinfo)) || (len(pass) >= minSecretLen && own && strings.Contains(shown, pass)) {
			t.Fatalf("%q is shown as %q", raw, shown)
		}
	})
}

// validScheme is RFC 3986's scheme syntax.
var validSchemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

func validScheme(s string) bool { return validSchemeRE.MatchString(s) }
