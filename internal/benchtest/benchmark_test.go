package benchtest

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {95, 95 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := Percentile(ds, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("Percentile sorted its argument in place")
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty input")
	}
}

func TestResultsRoundTripIntoOneTable(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(DirEnv, dir)
	if err := Write(Results{Benchmark: "b", Figures: []Figure{
		{Section: "pickup", Name: "p99", Value: 30, Unit: "ms", Floor: 20, FloorName: "bare client"},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := Write(Results{Benchmark: "a", Figures: []Figure{
		Figure{Section: "memory", Name: "idle RSS", Value: 40, Unit: "MiB"}.Check("≤ 32 MiB", false),
	}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/"+SummaryFile, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := ReadAll(dir)
	if err != nil || len(rs) != 2 || rs[0].Benchmark != "a" {
		t.Fatalf("ReadAll: %+v %v", rs, err)
	}
	table := Table(rs)
	for _, want := range []string{"idle RSS", "40.0 MiB", "≤ 32 MiB (no)", "bare client 20.0 ms", "1.50×"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if _, err := ReadAll(t.TempDir()); err == nil {
		t.Error("an empty folder read as results")
	}
}

func TestReadUsageOfThisProcess(t *testing.T) {
	u, err := ReadUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.RSS < 1<<20 || u.CPU < 0 {
		t.Errorf("usage of this test process: RSS %d bytes, CPU %v", u.RSS, u.CPU)
	}
}
