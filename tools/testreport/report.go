// Package testreport turns the event stream of `go test -json` into what a person reads at the
// end of `make check` or `make test`: one line per package as it finishes, the output of every
// failed test, and a closing summary that names every skipped test's reason, so a skip is never
// silent. In strict mode (CI) a skipped test fails the run.
package testreport

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output events
	Test       string
	Output     string
	Elapsed    float64
}

// Skip is a skipped test and the message it gave.
type Skip struct {
	Package, Test, Reason string
}

// Summary is what a run counted. Tests include subtests.
type Summary struct {
	Passed, Failed, Skipped int
	// FailedPackages failed as a whole: a failed test, a failed build, a TestMain that exited
	// non-zero, a timeout.
	FailedPackages []string
	Skips          []Skip
	// Slowest are the top-level tests that took longest, longest first (Options.Slowest of them).
	Slowest []Timing
}

// Timing is how long one top-level test ran, subtests included.
type Timing struct {
	Package, Test string
	Seconds       float64
}

// Options tune Run.
type Options struct {
	// Strict makes every skipped test a failure, except helper processes (tests named
	// TestHelper…, os/exec's pattern for a test binary that re-executes itself).
	Strict bool
	// ListSkips lists every skipped test, not just the reasons with their counts.
	ListSkips bool
	// ModulePath is trimmed from package names in the summary.
	ModulePath string
	// Slowest lists this many of the longest top-level tests in the summary, so a run that got
	// slower says where the time went without a second run (0: none).
	Slowest int
}

// test is the buffered output of one test, kept until the test's outcome is known.
type test struct {
	name   string
	output []string
	done   bool
}

// pkg is the state of one package while its tests run.
type pkg struct {
	output []string // package-level output: TestMain, the final ok/FAIL line
	tests  map[string]*test
	order  []*test // in the order they started
	failed []*test
}

// Run reads `go test -json` events from in and writes the report to out. It returns the counts and
// whether the run passed: no failed test or package and, in strict mode, no skipped test. Lines
// that are not JSON (go test's own messages when it cannot start) are passed through.
func Run(in io.Reader, out io.Writer, opts Options) (Summary, bool, error) {
	var sum Summary
	pkgs := map[string]*pkg{}
	get := func(name string) *pkg {
		p := pkgs[name]
		if p == nil {
			p = &pkg{tests: map[string]*test{}}
			pkgs[name] = p
		}
		return p
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		switch {
		case ev.Action == "build-output":
			fmt.Fprint(out, ev.Output)
		case ev.Test != "":
			p := get(ev.Package)
			t := p.tests[ev.Test]
			if t == nil {
				t = &test{name: ev.Test}
				p.tests[ev.Test] = t
				p.order = append(p.order, t)
			}
			switch ev.Action {
			case "output":
				t.output = append(t.output, ev.Output)
			case "pass":
				sum.Passed++
				t.done, t.output = true, nil
				if !strings.Contains(ev.Test, "/") {
					sum.Slowest = append(sum.Slowest, Timing{Package: ev.Package, Test: ev.Test, Seconds: ev.Elapsed})
				}
			case "fail":
				sum.Failed++
				t.done = true
				p.failed = append(p.failed, t)
			case "skip":
				sum.Skipped++
				sum.Skips = append(sum.Skips, Skip{Package: ev.Package, Test: ev.Test, Reason: skipReason(t.output)})
				t.done, t.output = true, nil
			}
		case ev.Action == "output":
			get(ev.Package).output = append(get(ev.Package).output, ev.Output)
		case ev.Action == "pass" || ev.Action == "skip":
			for _, l := range get(ev.Package).output {
				if strings.HasPrefix(l, "ok  ") || strings.HasPrefix(l, "?   ") {
					fmt.Fprint(out, l)
				}
			}
			delete(pkgs, ev.Package)
		case ev.Action == "fail":
			p := get(ev.Package)
			// The failed tests in the order they failed (a subtest before its parent), then
			// those that never finished (a timeout or a crash interrupts one), then the
			// package's own output with its FAIL line.
			for _, t := range p.failed {
				writeOutput(out, t.output)
			}
			for _, t := range p.order {
				if !t.done {
					writeOutput(out, t.output)
				}
			}
			writeOutput(out, p.output)
			sum.FailedPackages = append(sum.FailedPackages, ev.Package)
			delete(pkgs, ev.Package)
		}
	}
	if err := sc.Err(); err != nil {
		return sum, false, fmt.Errorf("reading go test -json output: %w", err)
	}
	slices.SortStableFunc(sum.Slowest, func(a, b Timing) int { return cmp.Compare(b.Seconds, a.Seconds) })
	sum.Slowest = sum.Slowest[:min(opts.Slowest, len(sum.Slowest))]
	ok := writeSummary(out, sum, opts)
	return sum, ok, nil
}

// writeOutput writes a test's output without the "=== RUN" lines of verbose mode, which
// `go test -json` implies and a person reading a failure does not need.
func writeOutput(out io.Writer, lines []string) {
	for _, l := range lines {
		if !strings.HasPrefix(l, "=== ") {
			fmt.Fprint(out, l)
		}
	}
}

// fileLine is the prefix testing puts on a logged line: "    foo_test.go:12: ".
var fileLine = regexp.MustCompile(`^\s+\S+\.go:\d+: `)

// skipReason is the last message a test logged before it was skipped: t.Skip's argument, with
// the lines of a multi-line message joined.
func skipReason(output []string) string {
	start := -1
	for i, l := range output {
		if fileLine.MatchString(l) {
			start = i
		}
	}
	if start < 0 {
		return "(no reason given)"
	}
	var parts []string
	for _, l := range output[start:] {
		if strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "=== ") {
			break
		}
		parts = append(parts, strings.TrimSpace(fileLine.ReplaceAllString(l, "")))
	}
	return strings.Join(parts, " ")
}

// helperProcess reports whether a test is a helper process rather than a test: it skips itself
// unless a parent test runs it.
func helperProcess(name string) bool {
	return strings.HasPrefix(name, "TestHelper")
}

// writeSummary writes the skipped tests grouped by reason and the closing line, and reports
// whether the run passed.
func writeSummary(out io.Writer, sum Summary, opts Options) bool {
	short := func(p string) string {
		if opts.ModulePath == "" {
			return p
		}
		if p == opts.ModulePath {
			return "."
		}
		return strings.TrimPrefix(p, opts.ModulePath+"/")
	}
	if len(sum.Slowest) > 0 {
		fmt.Fprintf(out, "\nslowest tests (passed, subtests included):\n")
		for _, t := range sum.Slowest {
			fmt.Fprintf(out, "  %7.1fs  %s %s\n", t.Seconds, short(t.Package), t.Test)
		}
	}
	var refused []Skip
	byReason := map[string][]Skip{}
	for _, s := range sum.Skips {
		byReason[s.Reason] = append(byReason[s.Reason], s)
		if opts.Strict && !helperProcess(s.Test) {
			refused = append(refused, s)
		}
	}
	if len(sum.Skips) > 0 {
		fmt.Fprintf(out, "\nskipped tests, by reason:\n")
		reasons := slices.SortedFunc(maps.Keys(byReason), func(a, b string) int {
			return len(byReason[b]) - len(byReason[a]) // most first
		})
		for _, r := range reasons {
			skips := byReason[r]
			pkgSet := map[string]bool{}
			for _, s := range skips {
				pkgSet[short(s.Package)] = true
			}
			fmt.Fprintf(out, "  %4d  %s\n        in %s\n", len(skips), r, strings.Join(slices.Sorted(maps.Keys(pkgSet)), ", "))
			if opts.ListSkips {
				for _, s := range skips {
					fmt.Fprintf(out, "        - %s %s\n", short(s.Package), s.Test)
				}
			}
		}
	}
	ok := sum.Failed == 0 && len(sum.FailedPackages) == 0
	if len(sum.FailedPackages) > 0 {
		fmt.Fprintf(out, "\nfailed packages:\n")
		for _, p := range sum.FailedPackages {
			fmt.Fprintf(out, "  %s\n", short(p))
		}
	}
	if len(refused) > 0 {
		ok = false
		fmt.Fprintf(out, "\nFAIL: this run must skip no test (strict mode, on when CI=true: CI runs the full suite), and it skipped %d:\n", len(refused))
		for _, s := range refused {
			fmt.Fprintf(out, "  %s %s: %s\n", short(s.Package), s.Test, s.Reason)
		}
		fmt.Fprintf(out, "Provide what they ask for (make test provisions every tool), or fix the test.\n")
	}
	fmt.Fprintf(out, "\ntests: %d passed, %d failed, %d skipped\n", sum.Passed, sum.Failed, sum.Skipped)
	return ok
}
