package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"
)

// Output formats of -o.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// checkFormat refuses an unknown -o before the command does anything.
func (a *app) checkFormat() error {
	switch a.global.output {
	case formatTable, formatJSON, formatYAML:
		return nil
	}
	return &usageError{fmt.Errorf("-o %q is not an output format; use table, json or yaml", a.global.output)}
}

// machine reports whether the output is for scripts (json or yaml).
func (a *app) machine() bool { return a.global.output == formatJSON || a.global.output == formatYAML }

// print writes v in the API's shape for -o json and -o yaml, else calls human.
func (a *app) print(v any, human func(w io.Writer)) error {
	w := a.env.Stdout
	switch a.global.output {
	case formatJSON:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case formatYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	human(w)
	return nil
}

// table writes aligned columns; the first row is the header.
func table(w io.Writer, rows [][]string) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
	// An empty last column would leave the padding of the one before it.
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
}

// details writes "Label:  value" lines, aligned, skipping empty values.
func details(w io.Writer, pairs [][2]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range pairs {
		if p[1] != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", p[0], p[1])
		}
	}
	_ = tw.Flush()
}

// ago says how long before now t was, in the largest unit that fits ("12s ago", "3h ago").
func ago(now time.Time, t *time.Time) string {
	if t == nil || t.IsZero() {
		return "never"
	}
	return short(now.Sub(*t).Truncate(time.Second)) + " ago"
}

// short is a duration in its largest whole unit, or two units below two days ("1m30s", "1h30m").
func short(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 10*time.Second && d%time.Second != 0:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		m, s := int(d.Minutes()), int(d.Seconds())%60
		if s == 0 {
			return fmt.Sprintf("%dm", m)
		}
		return fmt.Sprintf("%dm%ds", m, s)
	case d < 48*time.Hour:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// stamp is an absolute time with how long ago it was.
func stamp(now time.Time, t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.Local().Format(time.RFC3339) + " (" + ago(now, t) + ")"
}

// size is a byte count for people: "512 B", "4.0 KiB", "12.3 MiB".
func size(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}

// oneLine shortens text to its first line and at most n runes, for table cells.
func oneLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
