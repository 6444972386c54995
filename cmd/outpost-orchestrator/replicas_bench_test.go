package main

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/benchtest"
)

// replicaGap is the pace at which BenchmarkReplicas queues deployments (20 a second: each run
// takes 25 s of make bench, and the six runners' 48 slots with plans of 0.2 s take ten times
// that rate).
const replicaGap = 50 * time.Millisecond

// BenchmarkReplicas is the full run of TestReplicaProcessesRunEachDeploymentOnce, and the
// measurement behind "pickup latency on three PostgreSQL replicas stays within 2× of one bbolt
// orchestrator": the same real processes (orchestrators, load balancer, six agents with the
// process executor, their job runners) take OUTPOST_BENCH_DEPLOYMENTS deployments (500 by
// default) queued at a steady 20 a second round-robin over the runners, first from one
// orchestrator on bbolt, then from three replicas on one PostgreSQL (durable: it syncs at
// commit, as bbolt does) with the deployments queued through all of them and one killed
// (SIGKILL) half-way. Pickup is from the create to the claim's grant, as the orchestrators
// recorded them. Every deployment must run exactly once in both runs.
//
// Run: make bench (or go test -run '^$' -bench Replicas -benchtime 1x ./cmd/outpost-orchestrator/).
func BenchmarkReplicas(b *testing.B) {
	n := 500
	if v, err := strconv.Atoi(os.Getenv("OUTPOST_BENCH_DEPLOYMENTS")); err == nil && v > 0 {
		n = v
	}
	began := time.Now()
	bins := buildBinaries(b)
	opts := fleetOptions{replicas: 1, runners: 6, maxConcurrency: 8, planSeconds: func(int) string { return "0.2" }}
	bolt := newFleet(b, bins, opts)
	single := bolt.run(n, replicaGap, false)
	bolt.stop()
	opts.databaseURL, opts.replicas = startPostgreSQL(b, true), 3
	pg := newFleet(b, bins, opts)
	three := pg.run(n, replicaGap, true)
	pg.stop()

	const sec = "replicas"
	var figures []benchtest.Figure
	for _, p := range []float64{50, 95, 99} {
		name := fmt.Sprintf("pickup p%v (enqueue → claim granted)", p)
		one := benchtest.Ms(single.pickup(p))
		f := benchtest.Figure{Section: sec + ", PostgreSQL, 3 replicas (1 killed)", Name: name, Value: benchtest.Ms(three.pickup(p)), Unit: "ms",
			Floor: one, FloorName: "bbolt, 1 orchestrator"}
		if p != 99 {
			f = f.Check("≤ 2× bbolt", f.Value <= 2*one)
		}
		figures = append(figures, benchtest.Figure{Section: sec + ", bbolt, 1 orchestrator", Name: name, Value: one, Unit: "ms"}, f)
	}
	figures = append(figures,
		benchtest.Figure{Section: sec + ", PostgreSQL, 3 replicas (1 killed)", Name: "deployments not run exactly once", Value: float64(three.bad + single.bad), Unit: ""}.
			Check("0", three.bad+single.bad == 0),
		benchtest.Figure{Section: sec + ", PostgreSQL, 3 replicas (1 killed)", Name: "attempts in flight when the replica was killed", Value: float64(three.inFlightAtKill), Unit: ""})
	if err := benchtest.Write(benchtest.Results{Benchmark: "replicas", Started: began, Seconds: time.Since(began).Seconds(), Figures: figures,
		Warmup: fmt.Sprintf("%d deployments per run at %s intervals, 6 runners with one agent process each (max_concurrency 8, plans of 0.2 s); nothing left out", n, replicaGap)}); err != nil {
		b.Fatal(err)
	}
	if benchtest.Dir() == "" { // make bench prints one table of every benchmark at the end
		fmt.Print("\n" + benchtest.Table([]benchtest.Results{{Figures: figures}}))
	}
}
