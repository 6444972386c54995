// Command outpost-testreport reads `go test -json` on standard input and prints the report of
// package testreport: a line per package, the output of failed tests, the skipped tests by reason
// and the closing "tests: N passed, N failed, N skipped" line. It exits 1 when the run failed.
//
//	go test -json ./... | go run ./tools/testreport/cmd/outpost-testreport [-strict] [-list-skips] [-slowest N]
//
// -strict defaults to true when the CI environment variable is true: there, a skipped test fails.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/outpost-dev/terraform-provider-outpost/tools/testreport"
)

func main() {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	var opts testreport.Options
	flag.BoolVar(&opts.Strict, "strict", ci, "fail when a test was skipped (helper processes named TestHelper… excepted); default true when CI=true")
	flag.BoolVar(&opts.ListSkips, "list-skips", false, "name every skipped test, not only the reasons and packages")
	flag.IntVar(&opts.Slowest, "slowest", 10, "list this many of the longest-running tests (0: none)")
	flag.StringVar(&opts.ModulePath, "module", "github.com/outpost-dev/terraform-provider-outpost", "module path trimmed from package names in the summary")
	flag.Parse()
	_, ok, err := testreport.Run(os.Stdin, os.Stdout, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outpost-testreport:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}
