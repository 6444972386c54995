// Command outpost-benchreport prints the one table of a `make bench` run from the results the
// benchmarks wrote into the results folder (first argument), with the machine it ran on, and
// writes the whole run as summary.json beside them.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/benchtest"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: outpost-benchreport RESULTS-DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	results, err := benchtest.ReadAll(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outpost-benchreport:", err)
		os.Exit(1)
	}
	machine := fmt.Sprintf("%d CPUs (%s/%s)", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nOutpost benchmarks — %s, %s\n", time.Now().UTC().Format(time.RFC3339), machine)
	for _, r := range results {
		load := ""
		if r.Load != "" {
			load = ", load average " + r.Load + " at its end"
		}
		fmt.Fprintf(&sb, "  %s: %s, %.0f s%s", r.Benchmark, r.Started.UTC().Format(time.RFC3339), r.Seconds, load)
		if r.Warmup != "" {
			fmt.Fprintf(&sb, "; left out of the figures: %s", r.Warmup)
		}
		sb.WriteString("\n")
	}
	sb.WriteString("\n")
	sb.WriteString(benchtest.Table(results))
	var notes []string
	for _, r := range results {
		for _, f := range r.Figures {
			if f.Note != "" {
				notes = append(notes, fmt.Sprintf("  %s / %s: %s", f.Section, f.Name, f.Note))
			}
		}
	}
	if len(notes) > 0 {
		sb.WriteString("\nnotes:\n" + strings.Join(notes, "\n") + "\n")
	}
	fmt.Print(sb.String())
	summary, _ := json.MarshalIndent(map[string]any{"machine": machine, "at": time.Now().UTC(), "results": results}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, benchtest.SummaryFile), append(summary, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "outpost-benchreport:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(filepath.Join(dir, "table.txt"), []byte(sb.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "outpost-benchreport:", err)
		os.Exit(1)
	}
}
