// Package faulttest holds what `make faults` reports: one row per fault injected while
// deployments run (how many there were, how many were lost, run twice or lost events, and the
// time to recover), the short and the long scale of the suite, and the one table printed at the
// end over every package that injects faults: agent/e2e (the agent, the orchestrator, etcd, the
// network, clocks, upgrades on the test bed) and cmd/outpost-orchestrator (PostgreSQL and the
// orchestrator's replicas).
package faulttest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// FullEnv names the variable that selects the long version of the suites (OUTPOST_FAULTS=full,
// as `make faults` sets it); otherwise they run the short version `make test` runs.
const FullEnv = "OUTPOST_FAULTS"

// ReportEnv names a folder each suite writes its rows into (<suite>.json), for the one table
// `make faults` prints at the end (cmd/outpost-faultreport).
const ReportEnv = "OUTPOST_FAULTS_REPORT"

// Full reports whether the long version runs.
func Full() bool { return os.Getenv(FullEnv) == "full" }

// Scale picks the short or the long figure.
func Scale(short, full int) int {
	if Full() {
		return full
	}
	return short
}

// Row is one fault's line of the table.
type Row struct {
	Fault       string `json:"fault"`
	Deployments int    `json:"deployments"`
	// Lost: not succeeded in the end (for a fault that may end a deployment with a reason, the
	// suite says what it counts); Twice: run more than once; EventsLost: without exactly one
	// started and one finished event.
	Lost       int `json:"lost"`
	Twice      int `json:"run_twice"`
	EventsLost int `json:"events_lost"`
	// Retried counts deployments that needed a second attempt (allowed, but worth seeing).
	Retried int `json:"retried"`
	// Recover is the time from the end of the fault (for a standing fault, the agent's start)
	// until every deployment enqueued was reported finished.
	Recover time.Duration `json:"recover_ns"`
	Note    string        `json:"note"`
}

// Failed reports whether the row counts anything lost, run twice or with events lost.
func (r Row) Failed() bool { return r.Lost+r.Twice+r.EventsLost > 0 }

// Caption says how to read the table.
const Caption = "recovery: from the end of the fault, or the agent's start for a standing one, until every deployment was reported finished"

// Table formats rows as the suite's table.
func Table(rows []Row) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tdeployments\tlost\trun twice\tevents lost\trecovery\tnotes")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%d retried; %s\n", r.Fault, r.Deployments, r.Lost, r.Twice, r.EventsLost,
			r.Recover.Round(100*time.Millisecond), r.Retried, r.Note)
	}
	_ = tw.Flush()
	return b.String()
}

// Suite runs the faults of one package, each as a subtest, and reports them as one table.
type Suite struct {
	t    *testing.T
	name string
	rows []Row
}

// NewSuite starts the suite name (the file its rows are written into: <ReportEnv>/<name>.json).
func NewSuite(t *testing.T, name string) *Suite {
	t.Logf("fault suite %s (%s version)", name, map[bool]string{false: "short", true: "full"}[Full()])
	return &Suite{t: t, name: name}
}

// Run runs one fault as a subtest named fault; f injects it and returns what it counted. A row
// that counts anything lost, run twice or with events lost fails the subtest.
func (s *Suite) Run(fault string, f func(t *testing.T) Row) {
	s.t.Run(fault, func(t *testing.T) {
		r := f(t)
		r.Fault = fault
		s.rows = append(s.rows, r)
		if r.Failed() {
			t.Errorf("%s: %d lost, %d run twice, %d with events lost (of %d)", fault, r.Lost, r.Twice, r.EventsLost, r.Deployments)
		}
	})
}

// Report logs the suite's table and, when ReportEnv names a folder, writes the rows into
// <folder>/<suite>.json.
func (s *Suite) Report() {
	t := s.t
	t.Helper()
	t.Logf("fault table of %s (%s):\n%s", s.name, Caption, Table(s.rows))
	dir := os.Getenv(ReportEnv)
	if dir == "" {
		return
	}
	b, err := json.MarshalIndent(s.rows, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, s.name+".json"), b, 0o644)
	}
	if err != nil {
		t.Errorf("writing the fault table into %s: %v", dir, err)
	}
}

// Read reads the rows every suite wrote into dir, in the order of the files' names.
func Read(dir string) ([]Row, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var rows []Row
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var rs []Row
		if err := json.Unmarshal(b, &rs); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		rows = append(rows, rs...)
	}
	return rows, nil
}
