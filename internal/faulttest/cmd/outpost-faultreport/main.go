// Command outpost-faultreport prints the one table of `make faults`: the rows every fault suite
// wrote into the folder it is given (faulttest.ReportEnv). It exits 1 when a row counts a
// deployment lost, run twice or with events lost, or when no suite wrote any row.
package main

import (
	"fmt"
	"os"

	"github.com/outpost-dev/terraform-provider-outpost/internal/faulttest"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: outpost-faultreport DIR (the folder the fault suites wrote their rows into)")
		os.Exit(2)
	}
	rows, err := faulttest.Read(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "outpost-faultreport:", err)
		os.Exit(1)
	}
	if len(rows) == 0 {
		fmt.Fprintf(os.Stderr, "outpost-faultreport: no fault suite wrote its rows into %s; see the go test output above\n", os.Args[1])
		os.Exit(1)
	}
	fmt.Printf("Fault table (%s):\n\n%s", faulttest.Caption, faulttest.Table(rows))
	for _, r := range rows {
		if r.Failed() {
			os.Exit(1)
		}
	}
}
