package release

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"runtime/debug"
	"strings"
)

// ModulePath is Outpost's Go module: programs built from it take the release version, which the
// go command does not record (-ldflags -X sets it).
const ModulePath = "github.com/outpost-dev/terraform-provider-outpost"

// executableMagic are the first bytes of ELF, Mach-O (both byte orders, 64 and 32 bit) and PE
// files: only those can hold Go build information.
var executableMagic = [][]byte{
	[]byte("\x7fELF"), {0xcf, 0xfa, 0xed, 0xfe}, {0xfe, 0xed, 0xfa, 0xcf}, {0xce, 0xfa, 0xed, 0xfe}, {0xfe, 0xed, 0xfa, 0xce}, []byte("MZ"),
}

// isExecutable reports whether head (a file's first bytes) looks like an executable.
func isExecutable(head []byte) bool {
	for _, m := range executableMagic {
		if bytes.HasPrefix(head, m) {
			return true
		}
	}
	return false
}

// program is what a bill of materials says about one Go program: where it is, its digest and
// its build information.
type program struct {
	path   string
	sha256 string
	info   *buildinfo.BuildInfo
}

// readProgram reads the Go build information of the file at path with content data; ok is false
// when the file is not a Go program.
func readProgram(path string, data []byte) (p program, ok bool) {
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		return program{}, false
	}
	return program{path: path, sha256: sha256Hex(data), info: bi}, true
}

// addProgram adds a Go program to the document: the program, CONTAINED by parent, and the Go
// modules and standard library it DEPENDS_ON. versions gives the version of a main module the
// go command recorded none for ((devel): a build inside a module directory, or Outpost's own,
// whose release version -ldflags -X sets).
func (b *bom) addProgram(parent string, p program, versions map[string]string) {
	bi := p.info
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	version := bi.Main.Version
	if v, ok := versions[bi.Main.Path]; ok || version == "" || version == "(devel)" {
		version = v
	}
	name := bi.Path
	if name == "" {
		name = bi.Main.Path
	}
	purl := "pkg:golang/" + name
	if version != "" {
		purl += "@" + purlVersion(version)
	}
	prog := b.add(Package{
		Name: name, VersionInfo: strings.TrimPrefix(version, "v"), PrimaryPurpose: "APPLICATION",
		Checksums:    []Checksum{{Algorithm: "SHA256", Value: p.sha256}},
		Comment:      fmt.Sprintf("%s: a Go program for %s/%s built with %s (CGO_ENABLED=%s)", p.path, settings["GOOS"], settings["GOARCH"], bi.GoVersion, settings["CGO_ENABLED"]),
		ExternalRefs: purlRef(purl),
	})
	b.relate(parent, "CONTAINS", prog)
	std := b.add(Package{Name: "stdlib", VersionInfo: bi.GoVersion, PrimaryPurpose: "LIBRARY",
		Comment: "the Go standard library and runtime", ExternalRefs: purlRef("pkg:golang/stdlib@" + bi.GoVersion)})
	b.relate(prog, "DEPENDS_ON", std)
	for _, m := range bi.Deps {
		b.relate(prog, "DEPENDS_ON", b.goModule(m))
	}
}

// goModule adds a dependency module (its replacement, when replaced) and returns its id.
func (b *bom) goModule(m *debug.Module) string {
	comment := ""
	if m.Replace != nil {
		comment = "replaces " + m.Path + "@" + m.Version
		m = m.Replace
	}
	return b.add(Package{
		Name: m.Path, VersionInfo: m.Version, PrimaryPurpose: "LIBRARY", Comment: comment,
		ExternalRefs: purlRef("pkg:golang/" + m.Path + "@" + purlVersion(m.Version)),
	})
}
