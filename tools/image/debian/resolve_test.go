package debian

import (
	"fmt"
	"strings"
	"testing"
)

// Real `apt-cache depends` output of bookworm (arm64), trimmed.
const dependsOutput = `git
  Depends: libc6
  Depends: libcurl3-gnutls
  Depends: perl
  Depends: git-man
  Depends: git-man
ca-certificates
  Depends: openssl
 |Depends: debconf
  Depends: <debconf-2.0>
    cdebconf
    debconf
base-files
  PreDepends: <awk>
    gawk
    original-awk
    mawk
netbase
`

func TestParseDepends(t *testing.T) {
	deps, err := parseDepends(dependsOutput)
	if err != nil {
		t.Fatal(err)
	}
	show := func(gs []group) string {
		var parts []string
		for _, g := range gs {
			var alts []string
			for _, a := range g {
				s := a.name
				if a.virtual {
					s = "<" + s + ">" + strings.Join(a.providers, ",")
				}
				alts = append(alts, s)
			}
			parts = append(parts, strings.Join(alts, "|"))
		}
		return strings.Join(parts, " ")
	}
	want := map[string]string{
		"git":             "libc6 libcurl3-gnutls perl git-man git-man",
		"ca-certificates": "openssl debconf|<debconf-2.0>cdebconf,debconf",
		"base-files":      "<awk>gawk,original-awk,mawk",
		"netbase":         "",
	}
	if len(deps) != len(want) {
		t.Errorf("parsed %d packages, want %d", len(deps), len(want))
	}
	for pkg, w := range want {
		if got := show(deps[pkg]); got != w {
			t.Errorf("%s: %q, want %q", pkg, got, w)
		}
	}
	for _, bad := range []string{"git\n |Depends: a\n", "git\n  Recommends: x\n", "    orphan\n"} {
		if _, err := parseDepends(bad); err == nil {
			t.Errorf("parseDepends accepted %q", bad)
		}
	}
}

func fakeDepends(graph map[string]string) func([]string) (map[string][]group, error) {
	return func(names []string) (map[string][]group, error) {
		var out strings.Builder
		for _, n := range names {
			deps, ok := graph[n]
			if !ok {
				return nil, fmt.Errorf("E: No packages found: %s", n)
			}
			fmt.Fprintf(&out, "%s\n%s", n, deps)
		}
		return parseDepends(out.String())
	}
}

func TestResolve(t *testing.T) {
	graph := map[string]string{
		"git":             "  Depends: libc6\n  Depends: libcurl\n  Depends: perl\n",
		"libcurl":         "  Depends: libc6\n  Depends: libssl\n",
		"libssl":          "  Depends: libc6\n",
		"libc6":           "  Depends: libgcc\n",
		"libgcc":          "  Depends: libc6\n", // a cycle
		"perl":            "  Depends: perl-base\n",
		"ca-certificates": "  Depends: openssl\n |Depends: debconf\n  Depends: <debconf-2.0>\n    cdebconf\n    debconf\n",
		"base-files":      "  PreDepends: <awk>\n    mawk\n",
		"gawk":            "",
		"dash":            " |Depends: <awk>\n    mawk\n  Depends: gawk\n",
	}
	exclude := map[string]string{"perl": "scripts", "openssl": "scripts", "debconf": "scripts", "awk": "scripts"}
	got, err := resolve([]string{"git", "ca-certificates", "base-files"}, exclude, fakeDepends(graph))
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(got, " "); s != "base-files ca-certificates git libc6 libcurl libgcc libssl" {
		t.Errorf("resolved %s", s)
	}

	// A dependency only virtual packages satisfy must be decided by the request.
	_, err = resolve([]string{"base-files"}, nil, fakeDepends(graph))
	if err == nil || !strings.Contains(err.Error(), "provided by mawk") {
		t.Errorf("virtual-only dependency: %v", err)
	}
	// A virtual alternative is skipped for the first real one.
	got, err = resolve([]string{"dash"}, nil, fakeDepends(graph))
	if err != nil || strings.Join(got, " ") != "dash gawk" {
		t.Errorf("dash resolved to %v, %v; want dash gawk", got, err)
	}
	if _, err := resolve([]string{"perl"}, exclude, fakeDepends(graph)); err == nil {
		t.Error("a package both requested and excluded was accepted")
	}
	if _, err := resolve([]string{"nonexistent"}, nil, fakeDepends(graph)); err == nil {
		t.Error("an unknown package was accepted")
	}
}
