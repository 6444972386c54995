package pods

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/benchtest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// BenchmarkCLIStart measures enqueue → the CLI's first log line ("Initializing …" of init) in
// the orchestrator's log, for plans of a small configuration run one after the other by the
// chart's agent (from its image) in real job pods on the test bed's real node, with OpenTofu from
// the default job image, present on the node. The log is read every 20 ms, so each figure is late
// by up to 20 ms. OUTPOST_BENCH_CLI_RUNS sets the number of timed runs (default 10), after two
// untimed ones.
//
// Run: make bench (or go test -run '^$' -bench CLIStart -benchtime 1x ./agent/e2e/pods/).
func BenchmarkCLIStart(b *testing.B) {
	runs := 10
	if v, err := strconv.Atoi(os.Getenv("OUTPOST_BENCH_CLI_RUNS")); err == nil && v > 0 {
		runs = v
	}
	const warmup = 2
	began := time.Now()
	images(b, testbed.Shared(b))
	e := newEnv(b, envOptions{})
	e.waitConnected(imagesVersion)
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		lat = lat[:0]
		for r := range warmup + runs {
			t0 := time.Now()
			d := e.enqueue(api.OperationPlan, greeting, "bench")
			first := e.firstCLILine(d.ID, t0)
			if r >= warmup {
				lat = append(lat, first)
				benchtest.Progress("real pod: plan %d of %d: CLI's first line after %s", r+1-warmup, runs, first.Round(time.Millisecond))
			}
			if run := e.follow(d.ID, t0, 2*time.Minute); run.d.Status != api.StatusSucceeded {
				b.Fatalf("plan %s: %s (%s) %s\n%s", d.ID, run.d.Status, run.d.Reason, run.d.Message, run.log)
			}
		}
	}
	p50 := benchtest.Figure{Section: "real pod", Name: "enqueue → CLI's first log line p50", Value: benchtest.Ms(benchtest.Percentile(lat, 50)), Unit: "ms",
		Note: fmt.Sprintf("%d plans one after the other on the real node (containerd, runc, kubelet), OpenTofu from the job image; the log is read every 20 ms", runs)}
	figures := []benchtest.Figure{
		p50.Check("≤ 2 s", p50.Value <= 2000),
		{Section: "real pod", Name: "enqueue → CLI's first log line p99", Value: benchtest.Ms(benchtest.Percentile(lat, 99)), Unit: "ms"},
	}
	if err := benchtest.Write(benchtest.Results{Benchmark: "real-pod", Started: began, Seconds: time.Since(began).Seconds(), Figures: figures,
		Warmup: fmt.Sprintf("the test bed with its real node, the images and the chart install; %d plans before the %d timed", warmup, runs)}); err != nil {
		b.Fatal(err)
	}
	if benchtest.Dir() == "" {
		fmt.Print("\n" + benchtest.Table([]benchtest.Results{{Figures: figures}}))
	}
}

// firstCLILine reads the deployment's log every 20 ms until the CLI's first line is there and
// returns the time since t0.
func (e *env) firstCLILine(id string, t0 time.Time) time.Duration {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		chunk, err := e.admin.GetLogs(context.Background(), id, 0, 1<<20)
		if err == nil && strings.Contains(string(chunk.Data), "\nInitializing") {
			return time.Since(t0)
		}
		if time.Now().After(deadline) {
			d, _ := e.admin.GetDeployment(context.Background(), id)
			e.t.Fatalf("no CLI line in the log of %s after 2 minutes (%+v)", id, d)
		}
	}
	return 0
}
