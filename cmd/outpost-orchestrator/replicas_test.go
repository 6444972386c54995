package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/benchtest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/pgtest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
)

// TestReplicaProcessesRunEachDeploymentOnce is the several-replica setup as a user runs it, with
// every part a real process: three outpost-orchestrator processes on loopback ports over one
// PostgreSQL, sharing the admin token, the external URL and the signing secret file, behind a
// TCP load balancer; six outpost-agent processes (process executor, one per runner) reaching them
// through it, and their job runners too. Deployments are queued through every replica; once a
// quarter have finished, one replica gets SIGKILL with attempts in flight. Every deployment then
// still runs exactly once — counted by what its job did, not by the orchestrator's word — in its
// first attempt (no job lease was lost), with its started and finished events and its log.
//
// The CLI the job runners run is a stand-in script (see standInCLI): Terraform is not what this
// test is about, and the agent's state backend would need a Kubernetes cluster. make bench runs
// the same with 500 deployments (BenchmarkReplicas).
func TestReplicaProcessesRunEachDeploymentOnce(t *testing.T) {
	pgURL := startPostgreSQL(t, false)
	bins := buildBinaries(t)
	// Every fourth plan takes 5 s, so attempts are in flight when the replica is killed.
	f := newFleet(t, bins, fleetOptions{databaseURL: pgURL, replicas: 3, runners: 6, maxConcurrency: 2, planSeconds: func(i int) string {
		if i%4 == 3 {
			return "5"
		}
		return "0.5"
	}})
	r := f.run(24, 0, true)
	if r.inFlightAtKill == 0 {
		t.Error("no attempt was in flight when the replica was killed; the test proved nothing about leases")
	}
	if r.openAtKill == 0 {
		t.Error("no connection was open to the killed replica; no agent had to move")
	}
	t.Logf("24 deployments on 3 replicas; replica 3 killed with %d attempts in flight and %d connections open to it (%d later connections passed over it); pickup p50 %s, max %s",
		r.inFlightAtKill, r.openAtKill, r.refusedAfterKill, r.pickup(50), r.pickup(100))
}

// startPostgreSQL starts a throwaway PostgreSQL server (durable: with fsync at commit, for
// measurements) and returns the URL of a fresh schema in it. Without PostgreSQL installed the
// test skips, except under CI=true.
func startPostgreSQL(tb testing.TB, durable bool) string {
	tb.Helper()
	_, u := startPostgreSQLServer(tb, durable)
	return u
}

// startPostgreSQLServer is startPostgreSQL that also returns the server, for the tests that
// restart or crash it.
func startPostgreSQLServer(tb testing.TB, durable bool) (*pgtest.Server, string) {
	tb.Helper()
	start := pgtest.Start
	if durable {
		start = pgtest.StartDurable
	}
	pg, err := start(tb.Context())
	if err != nil {
		if os.Getenv("CI") != "true" && errors.Is(err, pgtest.ErrMissing) {
			tb.Skip(err)
		}
		tb.Fatal(err)
	}
	tb.Cleanup(pg.Stop)
	u, err := pg.Schema(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	return pg, u
}

// binaries are the programs a fleet runs, built from this module.
type binaries struct{ orchestrator, agent string }

func buildBinaries(tb testing.TB) binaries {
	dir := tb.TempDir()
	return binaries{
		orchestrator: goBuild(tb, dir, ".", "outpost-orchestrator"),
		agent:        goBuild(tb, dir, "github.com/outpost-dev/terraform-provider-outpost/agent", "outpost-agent"),
	}
}

// fleetOptions shape a fleet.
type fleetOptions struct {
	// databaseURL is the PostgreSQL the replicas share; empty runs one orchestrator on bbolt.
	databaseURL    string
	replicas       int
	runners        int
	maxConcurrency int
	// planSeconds says how long the plan of deployment i takes (sleep's argument).
	planSeconds func(i int) string
}

// fleet is orchestrator processes over one store behind a load balancer, and one agent process
// per runner reaching them through it.
type fleet struct {
	tb     testing.TB
	opts   fleetOptions
	orchs  []*orchestratorProcess
	admins []*client.AdminClient // one per replica, straight to it
	// addrs and args are each replica's address and flags, to start it again (replace).
	addrs []string
	args  [][]string
	logs  string
	lb    *loadBalancer
	// runs is the file every job appends its run id to.
	runs   string
	agents []*process
}

const (
	fleetOrg   = "acme"
	fleetToken = "replica-admin-token-0123456789abcdef"
)

func newFleet(tb testing.TB, bins binaries, o fleetOptions) *fleet {
	tb.Helper()
	dir, logs := tb.TempDir(), logDir(tb)
	f := &fleet{tb: tb, opts: o, runs: filepath.Join(dir, "runs"), logs: logs}
	addrs := make([]string, o.replicas)
	for i := range addrs {
		addrs[i] = porttest.Addr(tb)
	}
	f.lb = newLoadBalancer(tb, addrs...)
	// The replicas share what a Deployment's pods would share: the admin token, the URL agents
	// sign their requests for (the load balancer's), and the job token signing secret (a
	// mounted Secret).
	secret := filepath.Join(dir, "signing-secret")
	if err := os.WriteFile(secret, []byte(hex.EncodeToString([]byte("replica-signing-secret-0123456789abcdef"))+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	for i, addr := range addrs {
		args := []string{"--external-url", f.lb.url(), "--signing-secret-file", secret}
		if o.databaseURL != "" {
			args = append(args, "--database-url", o.databaseURL)
		} else {
			args = append(args, "--data-dir", filepath.Join(dir, "data"))
		}
		name := fmt.Sprintf("orchestrator-%d", i+1)
		if o.databaseURL == "" {
			name = "orchestrator-bbolt"
		}
		orch := runOrchestrator(tb, logs, name, bins.orchestrator, addr, fleetToken, args...)
		admin, err := client.NewAdminClient(orch.url, fleetOrg, fleetToken)
		if err != nil {
			tb.Fatal(err)
		}
		f.orchs, f.admins = append(f.orchs, orch), append(f.admins, admin)
		f.addrs, f.args = append(f.addrs, addr), append(f.args, args)
	}
	pub, priv, err := keys.Generate()
	if err != nil {
		tb.Fatal(err)
	}
	pubPEM, _ := keys.EncodePublicPEM(pub)
	privPEM, _ := keys.EncodePrivatePEM(priv)
	keyFile := filepath.Join(dir, "private-key.pem")
	if err := os.WriteFile(keyFile, []byte(privPEM), 0o600); err != nil {
		tb.Fatal(err)
	}
	ctx := tb.Context()
	// The stand-in CLI touches no state, so an S3 storage that is never reached will do.
	if _, err := f.admins[0].CreateStateStorage(ctx, api.StateStorageInput{ID: "s3", Type: api.StateStorageS3,
		S3: &api.S3StateSpec{Bucket: "outpost-replica-test", Region: "eu-west-1"}}); err != nil {
		tb.Fatal(err)
	}
	cli := standInCLI(tb, dir, f.runs)
	for k := range o.runners {
		runner := fmt.Sprintf("r%d", k)
		if _, err := f.admins[k%len(f.admins)].CreateRunner(ctx, api.RunnerInput{ID: runner, PublicKeys: []string{pubPEM}, StateStorageID: "s3",
			MaxConcurrency: o.maxConcurrency, Job: api.RunnerJob{Namespace: "jobs", ServiceAccount: "deployer"}}); err != nil {
			tb.Fatal(err)
		}
		f.agents = append(f.agents, startProcess(tb, logs, "agent-"+runner, bins.agent, nil,
			"--api-url", f.lb.url(), "--org-id", fleetOrg, "--runner-id", runner, "--private-key-file", keyFile,
			"--executor", "process", "--leader-elect=false", "--pod-name", "agent-"+runner, "--work-dir", filepath.Join(dir, "work-"+runner),
			"--agent-binary", bins.agent, "--cli", cli, "--health-listen", "127.0.0.1:0", "--state-listen", "127.0.0.1:0"))
	}
	return f
}

// replace stops replica i as a rolling update does (SIGTERM, waiting for it to end) and starts bin
// in its place: same address, same flags, its log next to the old one's. It returns when the new
// process answers.
func (f *fleet) replace(i int, bin, name string) {
	f.orchs[i].stop()
	f.orchs[i] = runOrchestrator(f.tb, f.logs, name, bin, f.addrs[i], fleetToken, f.args[i]...)
}

// stop stops the agents, then the orchestrators, so that a fleet measured next has the machine
// to itself.
func (f *fleet) stop() {
	for _, a := range f.agents {
		a.stop()
	}
	for _, o := range f.orchs {
		o.stop()
	}
	f.lb.close()
}

// standInCLI writes a shell script the job runners run in terraform's place. Its plan is the
// job's observable work: it appends the run id of the deployment's source to the runs file,
// sleeps as long as the source says, and prints "planned <run id>" into the deployment's log.
func standInCLI(tb testing.TB, dir, runs string) string {
	script := `#!/bin/sh
case "$1" in
version) echo "Terraform v1.11.0 (stand-in of the replica test)" ;;
init) echo "initialised" ;;
plan) run=$(cat run-id) && echo "$run" >>'` + runs + `' && sleep "$(cat plan-seconds)" && echo "planned $run" ;;
*) echo "unexpected command $*" >&2; exit 64 ;;
esac
`
	p := filepath.Join(dir, "terraform")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		tb.Fatal(err)
	}
	return p
}

// fleetRun is what one run of a fleet saw.
type fleetRun struct {
	pickups []time.Duration // enqueue → claim granted, as the orchestrators recorded them
	// bad counts the deployments that did not run exactly once, in their first attempt, with
	// their events and log; lost, twice, eventsLost and retried count why (one may count twice).
	bad                              int
	lost, twice, eventsLost, retried int
	// inFlightAtKill counts the attempts claimed or running when a replica was killed;
	// openAtKill the connections open to it then; refusedAfterKill the connections the load
	// balancer then tried it for and sent elsewhere.
	inFlightAtKill, openAtKill, refusedAfterKill int
}

// pickup returns the p-th percentile of the pickup latencies (nearest rank).
func (r fleetRun) pickup(p float64) time.Duration { return benchtest.Percentile(r.pickups, p) }

// run queues n plan deployments, one every gap, round-robin over the runners and over the
// replicas still alive; with kill, the last replica gets SIGKILL when half are queued (with no
// gap: once a quarter have finished). It waits for every deployment and checks that each ran
// exactly once.
func (f *fleet) run(n int, gap time.Duration, kill bool) fleetRun {
	tb := f.tb
	var r fleetRun
	alive := len(f.orchs)
	ids := make([]string, 0, n)
	tick := time.NewTicker(max(gap, time.Millisecond))
	defer tick.Stop()
	for i := range n {
		if gap > 0 {
			<-tick.C
		}
		if kill && i == n/2 {
			if gap == 0 {
				f.waitFinished(n/4, 60*time.Second)
			}
			r.inFlightAtKill = f.count(func(d api.Deployment) bool { return d.Status == api.StatusClaimed || d.Status == api.StatusRunning })
			alive--
			r.openAtKill = f.lb.openTo(alive)
			f.orchs[alive].kill()
			tb.Logf("replica %d killed (SIGKILL) with %d of %d queued deployments in flight", alive+1, r.inFlightAtKill, i)
		}
		id, err := f.create(f.admins[i%alive], i, i%f.opts.runners)
		if err != nil {
			tb.Fatalf("queue deployment %d through replica %d: %v", i, i%alive+1, err)
		}
		ids = append(ids, id)
	}
	f.waitFinished(n, time.Duration(n)*time.Second+time.Minute)
	if kill {
		r.refusedAfterKill = f.lb.refusedBy(alive)
	}
	f.check(ids, &r)
	return r
}

// create queues deployment i (run id run-i) for runner r<runner> through admin.
func (f *fleet) create(admin *client.AdminClient, i, runner int) (string, error) {
	d, err := admin.CreateDeployment(f.tb.Context(), api.DeploymentInput{RunnerID: fmt.Sprintf("r%d", runner), Operation: api.OperationPlan,
		StateKey: fmt.Sprintf("run-%d", i), Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(f.tb, map[string]string{
			"main.tf": "# planned by the stand-in CLI\n", "run-id": fmt.Sprintf("run-%d\n", i), "plan-seconds": f.opts.planSeconds(i)})}}})
	if err != nil {
		return "", err
	}
	return d.ID, nil
}

// list lists the deployments through the first replica (never the one killed).
func (f *fleet) list() []api.Deployment {
	ds, err := f.admins[0].ListDeployments(f.tb.Context(), client.DeploymentFilter{})
	if err != nil {
		f.tb.Fatal(err)
	}
	return ds
}

func (f *fleet) count(match func(api.Deployment) bool) int {
	n := 0
	for _, d := range f.list() {
		if match(d) {
			n++
		}
	}
	return n
}

// waitFinished waits until n deployments have ended.
func (f *fleet) waitFinished(n int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		done := f.count(func(d api.Deployment) bool { return d.Status.Terminal() })
		if done >= n {
			return
		}
		if time.Now().After(deadline) {
			f.tb.Fatalf("%d of %d deployments finished after %s", done, n, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// check checks that every deployment ran exactly once — its run id once in the runs file — and
// succeeded in its first attempt with one started and one finished event and the job's output in
// its log; it records into r the pickup latencies and what it counted. Each deployment that fails
// the check is an error of the test.
func (f *fleet) check(ids []string, r *fleetRun) {
	tb, ctx := f.tb, f.tb.Context()
	raw, err := os.ReadFile(f.runs)
	if err != nil {
		tb.Fatalf("no job ran: %v", err)
	}
	runs := map[string]int{}
	for _, l := range strings.Fields(string(raw)) {
		runs[l]++
	}
	for i, id := range ids {
		run := fmt.Sprintf("run-%d", i)
		d, err := f.admins[0].GetDeployment(ctx, id)
		if err != nil {
			tb.Fatal(err)
		}
		events, err := f.admins[0].ListEvents(ctx, id)
		if err != nil {
			tb.Fatal(err)
		}
		kinds := orchestratortest.EventCounts(events)
		logs, err := f.admins[0].GetLogs(ctx, id, 0, 1<<20)
		if err != nil {
			tb.Fatal(err)
		}
		logged := strings.Contains(string(logs.Data), "planned "+run)
		lost, twice := d.Status != api.StatusSucceeded || runs[run] == 0, runs[run] > 1
		eventsLost := kinds[api.EventStarted] != 1 || kinds[api.EventFinished] != 1 || !logged
		r.lost, r.twice, r.eventsLost = r.lost+b2i(lost), r.twice+b2i(twice), r.eventsLost+b2i(eventsLost)
		r.retried += b2i(d.Attempt > 1)
		if lost || twice || eventsLost || d.Attempt != 1 {
			if r.bad++; r.bad <= 10 {
				tb.Errorf("deployment %s (%s): ran %d times, %s in attempt %d, %d started and %d finished events, job output in the log: %t; want once, succeeded in attempt 1, one of each, true",
					id, run, runs[run], d.Status, d.Attempt, kinds[api.EventStarted], kinds[api.EventFinished], logged)
			}
			continue
		}
		if d.ClaimedAt != nil {
			r.pickups = append(r.pickups, d.ClaimedAt.Sub(d.CreatedAt))
		}
	}
	if r.bad > 0 {
		tb.Errorf("%d of %d deployments did not run exactly once in their first attempt", r.bad, len(ids))
	}
	if len(runs) != len(ids) {
		tb.Errorf("the jobs ran %d distinct run ids, want %d", len(runs), len(ids))
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
