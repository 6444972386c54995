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
	load, _ := os.ReadFile("/proc/loadavg")
	machine := fmt.Sprintf("%d CPUs (%s/%s), load average %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nOutpost benchmarks — %s, %s\n", time.Now().UTC().Format(time.RFC3339), machine)
	for _, r := range results {
		if r.Warmup != "" {
			fmt.Fprintf(&sb, "  %s (%.0f s); left out of the figures: %s\n", r.Benchmark, r.Seconds, r.Warmup)
		} else {
			fmt.Fprintf(&sb, "  %s (%.0f s)\n", r.Benchmark, r.Seconds)
		}
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
