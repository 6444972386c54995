// Package benchtest holds what `make bench` measures with and reports: the figures each
// benchmark writes as JSON into one results folder, percentiles, a process's memory and CPU from
// /proc, and the one table printed at the end with each figure next to its comparison from the
// same run and the goal.
package benchtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// DirEnv names the folder the benchmarks write their results into (make bench: bench-results).
const DirEnv = "OUTPOST_BENCH_DIR"

// Figure is one measured number, with its comparison from the same run when it has one.
type Figure struct {
	// Section groups figures in the table (pickup, throughput, ...).
	Section string `json:"section"`
	// Name says what was measured, e.g. "enqueue → Job created p99".
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Floor is the comparison measured in the same run (a bare client, the stock backend), and
	// FloorName what it is; zero FloorName means none.
	Floor     float64 `json:"floor,omitempty"`
	FloorName string  `json:"floor_name,omitempty"`
	// Goal is the target as text ("≤ 15 ms"), and Met whether the value reaches it
	// (nil when there is no goal).
	Goal string `json:"goal,omitempty"`
	Met  *bool  `json:"met,omitempty"`
	// Note says how it was measured, when the name alone does not.
	Note string `json:"note,omitempty"`
}

// Ratio is value / floor, or 0 without a floor.
func (f Figure) Ratio() float64 {
	if f.FloorName == "" || f.Floor == 0 {
		return 0
	}
	return f.Value / f.Floor
}

// Check sets Goal and Met.
func (f Figure) Check(goal string, met bool) Figure {
	f.Goal, f.Met = goal, &met
	return f
}

// Results is what one benchmark writes: its figures and the conditions of the run.
type Results struct {
	Benchmark string    `json:"benchmark"`
	Started   time.Time `json:"started"`
	Seconds   float64   `json:"seconds"`
	// Warmup says what was run before the timed regions and left out of the figures.
	Warmup string `json:"warmup,omitempty"`
	// Load is the machine's load average (1, 5, 15 min) when the benchmark ended; Write fills it.
	Load    string   `json:"load,omitempty"`
	Figures []Figure `json:"figures"`
}

// Dir returns the results folder, or "" when the benchmark runs outside make bench.
func Dir() string { return os.Getenv(DirEnv) }

// Write stores r as <dir>/<benchmark>.json; without a results folder it does nothing.
func Write(r Results) error {
	dir := Dir()
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if r.Load == "" {
		r.Load = LoadAverage()
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, r.Benchmark+".json"), append(b, '\n'), 0o644)
}

// ReadAll reads every benchmark's results from dir, in name order.
func ReadAll(dir string) ([]Results, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []Results
	for _, n := range names {
		if filepath.Base(n) == SummaryFile {
			continue
		}
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		var r Results
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, errors.New("no benchmark results in " + dir + "; run make bench")
	}
	return out, nil
}

// LoadAverage is the machine's 1, 5 and 15 minute load averages, from /proc/loadavg.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}

// SummaryFile is the one JSON document of a whole make bench run, next to the benchmarks' own.
const SummaryFile = "summary.json"

// Percentile returns the p-th percentile (0–100, nearest rank) of ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// Ms is a duration in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Format prints a value with its unit, with as many decimals as its size needs.
func Format(v float64, unit string) string {
	var s string
	switch {
	case v == 0:
		s = "0"
	case v >= 100 || v <= -100:
		s = fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		s = fmt.Sprintf("%.1f", v)
	default:
		s = fmt.Sprintf("%.2f", v)
	}
	if unit == "" {
		return s
	}
	return s + " " + unit
}

// Table renders every figure of results as one table: section, figure, value, comparison,
// ratio, goal.
func Table(results []Results) string {
	type line struct{ cells [6]string }
	var lines []line
	for _, r := range results {
		for _, f := range r.Figures {
			l := line{cells: [6]string{f.Section, f.Name, Format(f.Value, f.Unit), "", "", ""}}
			if f.FloorName != "" {
				l.cells[3] = f.FloorName + " " + Format(f.Floor, f.Unit)
				l.cells[4] = fmt.Sprintf("%.2f×", f.Ratio())
			}
			if f.Goal != "" {
				mark := "no"
				if f.Met != nil && *f.Met {
					mark = "yes"
				}
				l.cells[5] = f.Goal + " (" + mark + ")"
			}
			lines = append(lines, l)
		}
	}
	head := [6]string{"section", "figure", "value", "comparison (same run)", "value ÷ comparison", "goal (met)"}
	width := [6]int{}
	for i, h := range head {
		width[i] = len([]rune(h))
	}
	for _, l := range lines {
		for i, c := range l.cells {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	var sb strings.Builder
	row := func(cells [6]string) {
		for i, c := range cells {
			sb.WriteString(c)
			if i < len(cells)-1 {
				sb.WriteString(strings.Repeat(" ", width[i]-len([]rune(c))+2))
			}
		}
		sb.WriteString("\n")
	}
	row(head)
	total := 0
	for _, w := range width {
		total += w + 2
	}
	sb.WriteString(strings.Repeat("-", total-2) + "\n")
	for _, l := range lines {
		row(l.cells)
	}
	return sb.String()
}

// Progress prints one line saying how far a long step got, as it happens ("bench: " first, so
// make bench shows these lines while the rest of go test's output goes to its log).
func Progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: %s %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}
