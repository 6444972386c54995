// Package version is the version of Outpost's binaries (the provider, the agent and the
// orchestrator), stamped by the release build:
//
//	go build -ldflags "-X github.com/outpost-dev/terraform-provider-outpost/internal/version.Version=1.2.3 \
//	  -X github.com/outpost-dev/terraform-provider-outpost/internal/version.Commit=0123abc" ...
//
// .goreleaser.yml sets exactly these two. A build without them takes what the go command recorded
// instead: the module version of `go install …@v1.2.3` (or of a build in a tagged checkout), the
// VCS revision of a build in a git checkout, else Version "dev".
package version

import (
	"runtime/debug"
	"strings"
)

var (
	// Version is the release version without a leading "v" (e.g. "1.2.3"); "dev" when neither the
	// release build nor the go command recorded one.
	Version = ""
	// Commit is the git commit the binary was built from; empty when unknown.
	Commit = ""
)

// stamped is true when the release build set Version.
var stamped bool

// Release reports whether the release build stamped Version (-ldflags -X): only then is there a
// released agent image and chart of exactly this version, which the provider installs by
// default. A version the go command recorded (a pseudo-version of a git checkout, say) has none.
func Release() bool { return stamped }

func init() {
	stamped = Version != ""
	bi, ok := debug.ReadBuildInfo()
	if Version == "" {
		Version = "dev"
		if ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			Version = strings.TrimPrefix(bi.Main.Version, "v")
		}
	}
	if Commit == "" && ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				Commit = s.Value
			}
		}
	}
}

// String is the version and, when known, the commit: "1.2.3 (commit 0123abc)".
func String() string {
	if Commit == "" {
		return Version
	}
	c := Commit
	if len(c) > 12 {
		c = c[:12]
	}
	return Version + " (commit " + c + ")"
}
