package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/benchtest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
)

const (
	// scaleReplicas is how many orchestrator replicas BenchmarkOrchestratorScaleReplicas runs.
	scaleReplicas = 3
	// scaleReplicaAgents is its default number of idle agents, all replicas together: what
	// make bench affords on 2 cores (140 s, 33 s of them registering the runners; 30,000 took
	// 314 s). OUTPOST_BENCH_REPLICA_AGENTS=30000 runs issue 30's figure.
	scaleReplicaAgents = 9000
	// scaleReplicaRamp spreads the idle agents' first polls over one long poll's wait, so they
	// arrive no faster than they will in the steady state.
	scaleReplicaRamp = 30 * time.Second
	// scaleOrgRunners is how many idle runners share one organisation: the default quota
	// (--max-runners-per-org). Creating a runner counts its organisation's runners, in a
	// SERIALIZABLE transaction on PostgreSQL, so 30,000 in one organisation could not even be
	// registered here (8,900 after 6 minutes, two transactions of three rolled back).
	scaleOrgRunners = 1000
	// scalePoolConns is the orchestrator's PostgreSQL pool (engine_pg.go: 16 unless the URL
	// says pool_max_conns) plus the connection its LISTEN for wakes holds outside the pool.
	scalePoolConns = 16 + 1
)

// The environment of a load process (TestHelperScaleLoadProcess), which BenchmarkOrchestratorScaleReplicas
// starts, one per replica.
const (
	loadEnvURL    = "OUTPOST_SCALE_LOAD_URL"    // the replica its agents poll
	loadEnvRange  = "OUTPOST_SCALE_LOAD_RANGE"  // idle runners from-to (idle-<from> … idle-<to-1>)
	loadEnvOrgs   = "OUTPOST_SCALE_LOAD_ORGS"   // how many organisations the idle runners are spread over (idleOrg)
	loadEnvKey    = "OUTPOST_SCALE_LOAD_KEY"    // the runners' private key file (PEM)
	loadEnvSource = "OUTPOST_SCALE_LOAD_SOURCE" // the loopback address its connections come from
	loadEnvStatus = "OUTPOST_SCALE_LOAD_STATUS" // the file it writes its loadStatus into every second
)

// BenchmarkOrchestratorScaleReplicas is BenchmarkOrchestratorScale across replicas: three
// orchestrator processes on one PostgreSQL (durable: fsync at commit), OUTPOST_BENCH_REPLICA_AGENTS
// simulated idle agents (9,000 by default, 30,000 for issue 30's goal) spread evenly over them,
// each long-polling one replica as a real agent does through a load balancer, their runners in
// organisations of scaleOrgRunners. The idle agents run in one load process per replica
// (TestHelperScaleLoadProcess), because an unprivileged process here may hold 20,000 open files at
// most (the hard RLIMIT_NOFILE) and one replica's agents fit one process. Each connection of
// load process i comes from its own loopback address (127.0.0.<10+i>), so no source runs short of
// ephemeral ports.
//
// This process runs one busy runner per replica, its simulated agent polling that replica, with
// scaleJobRate deployments a second queued for each, round-robin through the three replicas (so
// most wakes cross replicas through PostgreSQL's NOTIFY), and an admin client per replica reading
// every scaleAdminEvery. It measures once with the busy runners alone, then with every idle agent
// polling. Per replica it reports RSS and CPU from /proc, the most PostgreSQL connections it held
// (pg_stat_activity, by the application_name in its database URL), the admin read p99 and the busy
// runner's pickup (enqueue → claim granted) p50/p99 beside the same replica's with the busy runners
// alone; and the PostgreSQL transactions each idle poll costs (pg_stat_database).
//
// Run: make bench (or go test -run '^$' -bench OrchestratorScaleReplicas -benchtime 1x ./cmd/outpost-orchestrator/).
func BenchmarkOrchestratorScaleReplicas(b *testing.B) {
	total := scaleReplicaAgents
	if v, err := strconv.Atoi(os.Getenv("OUTPOST_BENCH_REPLICA_AGENTS")); err == nil && v >= 0 {
		total = v
	}
	per := (total + scaleReplicas - 1) / scaleReplicas
	total = per * scaleReplicas
	raiseFileLimit(b, per+4096) // the replicas inherit it; each holds per connections
	began := time.Now()
	ctx := b.Context()
	dir := b.TempDir()
	_, dbURL := startPostgreSQLServer(b, true)
	bin := goBuild(b, dir, ".", "outpost-orchestrator")
	secret := filepath.Join(dir, "signing-secret")
	if err := os.WriteFile(secret, []byte(hex.EncodeToString([]byte("replica-signing-secret-0123456789abcdef"))+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	reps := make([]*orchestratorProcess, scaleReplicas)
	for i := range reps {
		reps[i] = runOrchestrator(b, logDir(b), fmt.Sprintf("orchestrator-scale-replica-%d", i+1), bin, porttest.Addr(b), fleetToken,
			"--database-url", dbURL+"&application_name="+replicaAppName(i), "--signing-secret-file", secret,
			"--max-connections", strconv.Itoa(per+1024))
	}
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(context.WithoutCancel(ctx))

	pub, priv, err := keys.Generate()
	if err != nil {
		b.Fatal(err)
	}
	pubPEM, _ := keys.EncodePublicPEM(pub)
	privPEM, _ := keys.EncodePrivatePEM(priv)
	keyFile := filepath.Join(dir, "private-key.pem")
	if err := os.WriteFile(keyFile, []byte(privPEM), 0o600); err != nil {
		b.Fatal(err)
	}
	orgs := (total + scaleOrgRunners - 1) / scaleOrgRunners
	orgAdmins := map[string][]*client.AdminClient{}
	for k := range orgs + 1 {
		org := fleetOrg // the busy runners'
		if k < orgs {
			org = idleOrg(k)
		}
		for i, o := range reps {
			c, err := client.NewAdminClient(o.url, org, fleetToken)
			if err != nil {
				b.Fatal(err)
			}
			orgAdmins[org] = append(orgAdmins[org], c)
			if i > 0 {
				continue
			}
			if _, err := c.CreateStateStorage(ctx, api.StateStorageInput{ID: "k8s", Type: api.StateStorageKubernetes,
				Kubernetes: &api.KubernetesStateSpec{Namespace: "states"}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	admins := orgAdmins[fleetOrg] // one per replica, straight to it
	// A create answered 500 is sent again (5 times at most) and counted: on PostgreSQL, creates
	// side by side fail so after 30 serialization retries, even in different organisations
	// (each reads its organisation's runners for the quota, and a transaction reading that
	// many rows takes a predicate lock on the whole table). A create that failed so changed
	// nothing.
	var createsFailed atomic.Int64
	register := func(admin *client.AdminClient, id string, maxConcurrency int) bool {
		for try := 1; ; try++ {
			_, err := admin.CreateRunner(ctx, api.RunnerInput{ID: id, PublicKeys: []string{pubPEM}, StateStorageID: "k8s", MaxConcurrency: maxConcurrency,
				Job: api.RunnerJob{Namespace: "jobs", ServiceAccount: "deployer"}})
			var apiErr *api.Error
			switch {
			case err == nil:
				return true
			case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusInternalServerError && try < 5:
				createsFailed.Add(1)
				time.Sleep(100 * time.Millisecond)
			default:
				b.Errorf("register runner %s: %v", id, err)
				return false
			}
		}
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 2 * time.Minute}
	busies := make([]*busyAgent, scaleReplicas)
	for i := range busies {
		register(admins[i], busyRunner(i), api.MaxMaxConcurrency)
		c, err := client.NewAgentClient(reps[i].url, agentauth.NewSigner(fleetOrg, busyRunner(i), priv), client.WithHTTPClient(hc))
		if err != nil {
			b.Fatal(err)
		}
		busies[i] = newBusyAgent(c)
	}
	regStart := time.Now()
	// One worker per organisation at a time: creates in one organisation all conflict.
	parallel(orgs, 16, func(k int) {
		for i := k; i < total; i += orgs {
			if !register(orgAdmins[idleOrg(k)][i%scaleReplicas], fmt.Sprintf("idle-%d", i), 1) {
				return
			}
		}
	})
	if b.Failed() {
		b.FailNow()
	}
	regTook := time.Since(regStart)
	benchtest.Progress("orchestrator replicas: registered %d idle runners in %d organisations through %d replicas in %s (%d creates answered 500 and sent again)",
		total, orgs, scaleReplicas, regTook.Round(time.Second), createsFailed.Load())

	load, stop := context.WithCancel(ctx)
	defer stop()
	var loops sync.WaitGroup
	defer loops.Wait()
	defer stop()
	for _, a := range busies {
		loops.Go(func() { a.run(load) })
	}
	benchtest.Progress("orchestrator replicas: busy runners alone; settling %s, then measuring %s", scaleSettle, scaleWindow)
	time.Sleep(scaleSettle)
	alone := measureReplicas(b, load, db, reps, admins, busies, nil)

	loads := make([]*loadProcess, scaleReplicas)
	rampStart := time.Now()
	for i := range loads {
		loads[i] = startLoadProcess(b, dir, i, reps[i].url, i*per, (i+1)*per, orgs, keyFile)
	}
	for _, l := range loads {
		l.awaitStarted(b, scaleReplicaRamp+time.Minute)
	}
	benchtest.Progress("orchestrator replicas: %d idle agents polling (%d per replica, ramped in %s); settling %s, then measuring %s",
		total, per, time.Since(rampStart).Round(time.Second), scaleSettle, scaleWindow)
	time.Sleep(scaleSettle)
	full := measureReplicas(b, load, db, reps, admins, busies, loads)
	stop()

	var figures []benchtest.Figure
	for i := range reps {
		a, m := alone.replicas[i], full.replicas[i]
		sec := fmt.Sprintf("orchestrator replicas (PostgreSQL), %d idle agents, replica %d of %d", total, i+1, scaleReplicas)
		perAgent := float64(m.polls) / float64(per) / (full.seconds / 60)
		polls := benchtest.Figure{Section: sec, Name: "requests per minute per idle agent", Value: perAgent, Unit: "/min"}.Check("≤ 2", perAgent <= 2 && m.failed == 0)
		if m.failed > 0 {
			polls.Note = fmt.Sprintf("%d polls failed in the window (first failure: %s)", m.failed, m.firstErr)
		}
		figures = append(figures,
			benchtest.Figure{Section: sec, Name: "RSS", Value: benchtest.MiB(m.rss), Unit: "MiB"}.Check("≤ 512 MiB", benchtest.MiB(m.rss) <= 512),
			benchtest.Figure{Section: sec, Name: "CPU", Value: 100 * m.cpu, Unit: "% of a core"},
			benchtest.Figure{Section: sec, Name: "PostgreSQL connections (most seen)", Value: float64(m.pgConns), Unit: "",
				Note: fmt.Sprintf("%d with the busy runners alone; pg_stat_activity by application_name, sampled every second", a.pgConns)}.
				Check(fmt.Sprintf("≤ %d (pool + LISTEN)", scalePoolConns), m.pgConns <= scalePoolConns),
			benchtest.Figure{Section: sec, Name: "admin GET p99", Value: m.adminP99, Unit: "ms", Floor: a.adminP99, FloorName: "busy runners alone"}.Check("≤ 20 ms", m.adminP99 <= 20),
			benchtest.Figure{Section: sec, Name: "pickup p50 (enqueue → claim granted)", Value: m.pickupP50, Unit: "ms", Floor: a.pickupP50, FloorName: "busy runners alone"},
			benchtest.Figure{Section: sec, Name: "pickup p99 (enqueue → claim granted)", Value: m.pickupP99, Unit: "ms", Floor: a.pickupP99, FloorName: "busy runners alone"}.
				Check("≤ 2× alone", m.pickupP99 <= 2*a.pickupP99),
			polls)
	}
	idlePolls := int64(0)
	for _, m := range full.replicas {
		idlePolls += m.polls
	}
	if idlePolls > 0 {
		perPoll := (float64(full.xacts)/full.seconds - float64(alone.xacts)/alone.seconds) * full.seconds / float64(idlePolls)
		figures = append(figures, benchtest.Figure{Section: fmt.Sprintf("orchestrator replicas (PostgreSQL), %d idle agents", total),
			Name: "PostgreSQL transactions per idle poll", Value: perPoll, Unit: "",
			Note: fmt.Sprintf("pg_stat_database commits+rollbacks per second above the busy runners alone (%.0f/s → %.0f/s), over the idle polls answered", float64(alone.xacts)/alone.seconds, float64(full.xacts)/full.seconds)})
	}
	if err := benchtest.Write(benchtest.Results{Benchmark: "orchestrator-scale-replicas", Started: began, Seconds: time.Since(began).Seconds(), Figures: figures,
		Warmup: fmt.Sprintf("%d idle runners in %d organisations registered (%s, %d creates answered 500 and sent again); busy runners alone: %s settling, %s measured; idle agents ramped over %s, %s settling, %s measured; %d deployments/s per busy runner throughout",
			total, orgs, regTook.Round(time.Second), createsFailed.Load(), scaleSettle, scaleWindow, scaleReplicaRamp, scaleSettle, scaleWindow, scaleJobRate)}); err != nil {
		b.Fatal(err)
	}
	if benchtest.Dir() == "" { // make bench prints one table of every benchmark at the end
		fmt.Print("\n" + benchtest.Table([]benchtest.Results{{Figures: figures}}))
	}
}

func replicaAppName(i int) string { return fmt.Sprintf("outpost-replica-%d", i+1) }

func busyRunner(i int) string { return fmt.Sprintf("busy-%d", i+1) }

// idleOrg is organisation k of the idle runners; runner idle-<i> belongs to idleOrg(i % orgs),
// so runners registered one after the other go to different organisations and their quota
// counts do not conflict.
func idleOrg(k int) string { return fmt.Sprintf("idle-org-%d", k) }

// replicaWindow is what one measured window saw of one replica.
type replicaWindow struct {
	polls, failed                  int64
	firstErr                       string
	rss                            int64
	cpu                            float64
	pgConns                        int
	adminP99, pickupP50, pickupP99 float64
}

// replicasWindow is one measured window of every replica, with the PostgreSQL transactions of the
// whole database meanwhile.
type replicasWindow struct {
	replicas []replicaWindow
	seconds  float64
	xacts    int64
}

// measureReplicas runs one window of scaleWindow: scaleJobRate deployments a second for each busy
// runner, queued through the replicas in turn; every replica's admin API read every
// scaleAdminEvery; PostgreSQL's connections sampled every second. loads are the idle agents'
// processes, none for the busy runners alone.
func measureReplicas(b *testing.B, ctx context.Context, db *pgx.Conn, reps []*orchestratorProcess, admins []*client.AdminClient, busies []*busyAgent, loads []*loadProcess) replicasWindow {
	n := len(reps)
	from := make([]benchtest.Usage, n)
	before := make([]loadStatus, len(loads))
	for i, o := range reps {
		var err error
		if from[i], err = benchtest.ReadUsage(o.cmd.Process.Pid); err != nil {
			b.Fatal(err)
		}
	}
	for i, l := range loads {
		before[i] = l.status(b)
	}
	xacts0 := dbTransactions(b, ctx, db)
	began := time.Now()
	end := began.Add(scaleWindow)

	out := replicasWindow{replicas: make([]replicaWindow, n)}
	var mu sync.Mutex
	enqueued := make([]map[string]time.Time, n)
	for i := range enqueued {
		enqueued[i] = map[string]time.Time{}
	}
	adminLat := make([][]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { // admin reads of replica i
			t := time.NewTicker(scaleAdminEvery)
			defer t.Stop()
			for time.Now().Before(end) {
				<-t.C
				t0 := time.Now()
				if _, err := admins[i].GetRunner(ctx, busyRunner(i)); err != nil {
					b.Error(err)
				}
				adminLat[i] = append(adminLat[i], time.Since(t0))
			}
		})
	}
	wg.Go(func() { // PostgreSQL connections per replica, most seen
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for time.Now().Before(end) {
			for i, c := range pgConnections(b, ctx, db, n) {
				out.replicas[i].pgConns = max(out.replicas[i].pgConns, c)
			}
			<-t.C
		}
	})
	jobs := time.NewTicker(time.Second / scaleJobRate)
	for tick := 0; time.Now().Before(end); tick++ {
		<-jobs.C
		for k := range n {
			wg.Go(func() {
				t0 := time.Now()
				d, err := admins[(k+tick)%n].CreateDeployment(ctx, api.DeploymentInput{RunnerID: busyRunner(k), Operation: api.OperationPlan,
					Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive(b)}}, StateKey: "s"})
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				enqueued[k][d.ID] = t0
				mu.Unlock()
			})
		}
	}
	jobs.Stop()
	for i, o := range reps {
		to, err := benchtest.ReadUsage(o.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		out.replicas[i].rss, out.replicas[i].cpu = to.RSS, benchtest.CPUShare(from[i], to)
	}
	for i, l := range loads {
		s := l.status(b)
		out.replicas[i].polls, out.replicas[i].failed, out.replicas[i].firstErr = s.OK-before[i].OK, s.Failed-before[i].Failed, s.FirstErr
	}
	out.xacts = dbTransactions(b, ctx, db) - xacts0
	out.seconds = time.Since(began).Seconds()
	wg.Wait()
	for i := range n {
		pickups := awaitPickups(b, enqueued[i], busies[i])
		out.replicas[i].adminP99 = benchtest.Ms(benchtest.Percentile(adminLat[i], 99))
		out.replicas[i].pickupP50 = benchtest.Ms(benchtest.Percentile(pickups, 50))
		out.replicas[i].pickupP99 = benchtest.Ms(benchtest.Percentile(pickups, 99))
	}
	return out
}

// pgConnections counts the PostgreSQL sessions of each of n replicas by their application_name.
func pgConnections(b *testing.B, ctx context.Context, db *pgx.Conn, n int) []int {
	out := make([]int, n)
	rows, err := db.Query(ctx, "SELECT application_name, count(*) FROM pg_stat_activity GROUP BY application_name")
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var c int
		if err := rows.Scan(&name, &c); err != nil {
			b.Fatal(err)
		}
		for i := range out {
			if name == replicaAppName(i) {
				out[i] = c
			}
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}

// dbTransactions is the transactions committed and rolled back in the current database so far.
// PostgreSQL's statistics lag by up to a second (each backend flushes them at most once a second),
// which a 30 s window absorbs.
func dbTransactions(b *testing.B, ctx context.Context, db *pgx.Conn) int64 {
	if _, err := db.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		b.Fatal(err)
	}
	var n int64
	if err := db.QueryRow(ctx, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// loadStatus is what a load process reports: agents started, polls answered and failed, and the
// first failure.
type loadStatus struct {
	Started  int    `json:"started"`
	OK       int64  `json:"ok"`
	Failed   int64  `json:"failed"`
	FirstErr string `json:"first_err,omitempty"`
}

// loadProcess is one TestHelperScaleLoadProcess run as a child process.
type loadProcess struct {
	*process
	file  string
	count int
}

// startLoadProcess starts the idle agents of runners idle-<from> … idle-<to-1> against url in a
// process of their own: this test binary running TestHelperScaleLoadProcess.
func startLoadProcess(b *testing.B, dir string, i int, url string, from, to, orgs int, keyFile string) *loadProcess {
	file := filepath.Join(dir, fmt.Sprintf("load-%d.json", i+1))
	p := startProcess(b, logDir(b), fmt.Sprintf("scale-load-%d", i+1), os.Args[0], []string{
		loadEnvURL + "=" + url, loadEnvRange + "=" + fmt.Sprintf("%d-%d", from, to), loadEnvOrgs + "=" + strconv.Itoa(orgs), loadEnvKey + "=" + keyFile,
		loadEnvSource + "=" + fmt.Sprintf("127.0.0.%d", 10+i), loadEnvStatus + "=" + file,
	}, "-test.run=^TestHelperScaleLoadProcess$", "-test.count=1", "-test.timeout=0")
	return &loadProcess{process: p, file: file, count: to - from}
}

// status reads the process's last report.
func (l *loadProcess) status(b *testing.B) loadStatus {
	var s loadStatus
	data, err := os.ReadFile(l.file)
	if err != nil {
		if os.IsNotExist(err) {
			return s
		}
		b.Fatal(err)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		b.Fatal(err)
	}
	return s
}

// awaitStarted waits until every agent of the process has sent its first poll.
func (l *loadProcess) awaitStarted(b *testing.B, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for l.status(b).Started < l.count {
		select {
		case <-l.exited:
			b.Fatalf("the load process %s exited; see %s", l.name, l.log)
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("the load process %s started %d of %d agents in %s; see %s", l.name, l.status(b).Started, l.count, timeout, l.log)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestHelperScaleLoadProcess is a load process of BenchmarkOrchestratorScaleReplicas, not a test: with
// its environment set (loadEnv*) it runs idle agents, their first polls spread over
// scaleReplicaRamp, until SIGTERM, writing a loadStatus into a file every second. Without that
// environment it skips.
func TestHelperScaleLoadProcess(t *testing.T) {
	url := os.Getenv(loadEnvURL)
	if url == "" {
		t.Skip("a load process of BenchmarkOrchestratorScaleReplicas; it runs when the benchmark starts it")
	}
	var from, to int
	if _, err := fmt.Sscanf(os.Getenv(loadEnvRange), "%d-%d", &from, &to); err != nil || to <= from {
		t.Fatalf("%s=%q: want FROM-TO", loadEnvRange, os.Getenv(loadEnvRange))
	}
	orgs, err := strconv.Atoi(os.Getenv(loadEnvOrgs))
	if err != nil || orgs < 1 {
		t.Fatalf("%s=%q: want a number of organisations", loadEnvOrgs, os.Getenv(loadEnvOrgs))
	}
	pem, err := os.ReadFile(os.Getenv(loadEnvKey))
	if err != nil {
		t.Fatal(err)
	}
	priv, err := keys.ParsePrivatePEM(pem)
	if err != nil {
		t.Fatal(err)
	}
	source := net.ParseIP(os.Getenv(loadEnvSource))
	status := os.Getenv(loadEnvStatus)
	ctx, stop := signal.NotifyContext(t.Context(), syscall.SIGTERM)
	defer stop()
	n := to - from
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n + 16, IdleConnTimeout: 2 * time.Minute,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: source}}).DialContext}, Timeout: 2 * time.Minute}
	var polls pollCounts
	var loops sync.WaitGroup
	started := 0
	var startedMu sync.Mutex
	loops.Go(func() {
		every := scaleReplicaRamp / time.Duration(n)
		for i := from; i < to && ctx.Err() == nil; i++ {
			c, err := client.NewAgentClient(url, agentauth.NewSigner(idleOrg(i%orgs), fmt.Sprintf("idle-%d", i), priv), client.WithHTTPClient(hc))
			if err != nil {
				t.Error(err)
				return
			}
			loops.Go(func() { idleLoop(ctx, c, &polls) })
			startedMu.Lock()
			started++
			startedMu.Unlock()
			time.Sleep(every)
		}
	})
	write := func() {
		startedMu.Lock()
		s := loadStatus{Started: started, OK: polls.ok.Load(), Failed: polls.failed.Load()}
		startedMu.Unlock()
		polls.mu.Lock()
		if polls.first != nil {
			s.FirstErr = polls.first.Error()
		}
		polls.mu.Unlock()
		data, _ := json.Marshal(s)
		if err := os.WriteFile(status+".tmp", data, 0o600); err == nil {
			_ = os.Rename(status+".tmp", status)
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-tick.C:
			write()
		case <-ctx.Done():
		}
	}
	loops.Wait()
}
