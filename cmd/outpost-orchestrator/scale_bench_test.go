package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/benchtest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
)

// Phases of BenchmarkOrchestratorScale: every level of idle agents gets ramped up over scaleRamp,
// settles for scaleSettle and is measured for scaleWindow, while one busy runner takes
// scaleJobRate deployments per second and an admin client reads every scaleAdminEvery.
const (
	scaleRamp       = 10 * time.Second
	scaleSettle     = 5 * time.Second
	scaleWindow     = 30 * time.Second
	scaleJobRate    = 5
	scaleAdminEvery = 50 * time.Millisecond
	scaleOrg        = "acme"
)

// scaleLevels are the numbers of idle agents measured (0 is the busy runner's agent alone, the
// single-agent figure the others are compared with). OUTPOST_BENCH_SCALE_MAX lowers the top.
var scaleLevels = []int{0, 1000, 5000, 10000}

// BenchmarkOrchestratorScale runs the orchestrator binary as its own process (its RSS and CPU
// read from /proc) and one load process (this one) on loopback: N simulated agents, each a
// runner of its own with the same key, long-polling with signed requests (internal/agentauth)
// and nothing to do; one busy runner whose simulated agent claims every offer and reports it
// finished; deployments queued for it at a steady rate; and an admin client reading the busy
// runner. Per level it reports requests per minute per idle agent, the orchestrator's RSS and
// CPU, the admin read p99 and the pickup p99 (enqueue → claim granted) of the busy runner.
//
// Run: make bench (or go test -run '^$' -bench OrchestratorScale -benchtime 1x ./cmd/outpost-orchestrator/).
func BenchmarkOrchestratorScale(b *testing.B) {
	levels := scaleLevels
	if v, err := strconv.Atoi(os.Getenv("OUTPOST_BENCH_SCALE_MAX")); err == nil && v >= 0 {
		levels = levels[:0:0]
		for _, l := range scaleLevels {
			if l <= v {
				levels = append(levels, l)
			}
		}
	}
	raiseFileLimit(b, 2*levels[len(levels)-1]+4096)
	top := levels[len(levels)-1]
	began := time.Now()
	o := startOrchestrator(b, levels[len(levels)-1]+1024)
	ctx := b.Context()
	admin, err := client.NewAdminClient(o.url, scaleOrg, o.token)
	if err != nil {
		b.Fatal(err)
	}
	pub, priv, err := keys.Generate()
	if err != nil {
		b.Fatal(err)
	}
	pubPEM, _ := keys.EncodePublicPEM(pub)
	if _, err := admin.CreateStateStorage(ctx, api.StateStorageInput{ID: "k8s", Type: api.StateStorageKubernetes,
		Kubernetes: &api.KubernetesStateSpec{Namespace: "states"}}); err != nil {
		b.Fatal(err)
	}
	register := func(id string, maxConcurrency int) {
		if _, err := admin.CreateRunner(ctx, api.RunnerInput{ID: id, PublicKeys: []string{pubPEM}, StateStorageID: "k8s", MaxConcurrency: maxConcurrency,
			Job: api.RunnerJob{Namespace: "jobs", ServiceAccount: "deployer"}}); err != nil {
			b.Fatal(err)
		}
	}
	register("busy", api.MaxMaxConcurrency)
	regStart := time.Now()
	parallel(top, 16, func(i int) { register(fmt.Sprintf("idle-%d", i), 1) })
	b.Logf("registered %d idle runners in %s", top, time.Since(regStart).Round(time.Millisecond))

	// One HTTP client for the whole load process, as many connections as agents.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: top + 16, MaxConnsPerHost: 0, IdleConnTimeout: 2 * time.Minute,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}, Timeout: 2 * time.Minute}
	agent := func(runner string) *client.AgentClient {
		c, err := client.NewAgentClient(o.url, agentauth.NewSigner(scaleOrg, runner, priv), client.WithHTTPClient(hc))
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	load, stop := context.WithCancel(ctx)
	defer stop()
	var loops sync.WaitGroup
	defer loops.Wait()
	defer stop()

	busy := newBusyAgent(agent("busy"))
	loops.Go(func() { busy.run(load) })
	var polls pollCounts
	started := 0
	var figures []benchtest.Figure
	var single float64
	for _, n := range levels {
		// Ramp the idle agents up to n, spread over scaleRamp so their polls are not in step.
		if add := n - started; add > 0 {
			every := scaleRamp / time.Duration(add)
			for i := started; i < n; i++ {
				c := agent(fmt.Sprintf("idle-%d", i))
				loops.Go(func() { idleLoop(load, c, &polls) })
				time.Sleep(every)
			}
			started = n
		}
		benchtest.Progress("orchestrator scale: %d idle agents polling; settling %s, then measuring %s", n, scaleSettle, scaleWindow)
		time.Sleep(scaleSettle)
		m := measureWindow(b, load, o, admin, busy, &polls)
		if n == 0 {
			single = m.pickupP99
		}
		label := fmt.Sprintf("%d idle agents", n)
		if n == 0 {
			label = "busy runner alone"
		}
		sec := "orchestrator, " + label
		rss := benchtest.Figure{Section: sec, Name: "RSS", Value: benchtest.MiB(m.rss), Unit: "MiB"}
		admin := benchtest.Figure{Section: sec, Name: "admin GET p99", Value: m.adminP99, Unit: "ms"}
		pickup := benchtest.Figure{Section: sec, Name: "pickup p99 (enqueue → claim granted)", Value: m.pickupP99, Unit: "ms", Floor: single, FloorName: "busy runner alone"}
		if n == 10000 {
			rss = rss.Check("≤ 512 MiB", rss.Value <= 512)
			admin = admin.Check("≤ 20 ms", admin.Value <= 20)
			pickup = pickup.Check("≤ 2× alone", pickup.Value <= 2*single)
		}
		figures = append(figures, rss,
			benchtest.Figure{Section: sec, Name: "CPU", Value: 100 * m.cpu, Unit: "% of a core"},
			admin,
			benchtest.Figure{Section: sec, Name: "pickup p50 (enqueue → claim granted)", Value: m.pickupP50, Unit: "ms"},
			pickup)
		if n > 0 {
			perAgent := m.perAgentPerMin(n)
			f := benchtest.Figure{Section: sec, Name: "requests per minute per idle agent", Value: perAgent, Unit: "/min"}.Check("≤ 2", perAgent <= 2 && m.failed == 0)
			if m.failed > 0 {
				f.Note = fmt.Sprintf("%d polls failed in the window (first failure of the run: %v)", m.failed, m.firstErr)
			}
			figures = append(figures, f)
		}
	}
	stop()
	if err := benchtest.Write(benchtest.Results{Benchmark: "orchestrator-scale", Started: began, Seconds: time.Since(began).Seconds(), Figures: figures,
		Warmup: fmt.Sprintf("each level: agents ramped over %s, then %s settling, then a %s window measured; %d deployments/s to the busy runner throughout", scaleRamp, scaleSettle, scaleWindow, scaleJobRate)}); err != nil {
		b.Fatal(err)
	}
	if benchtest.Dir() == "" { // make bench prints one table of every benchmark at the end
		fmt.Print("\n" + benchtest.Table([]benchtest.Results{{Figures: figures}}))
	}
}

// window is what one measured window saw.
type window struct {
	polls, failed                  int64
	firstErr                       error
	seconds                        float64
	rss                            int64
	cpu                            float64
	adminP99, pickupP50, pickupP99 float64
}

func (w window) perAgentPerMin(agents int) float64 {
	return float64(w.polls) / float64(agents) / (w.seconds / 60)
}

// measureWindow queues scaleJobRate deployments a second for the busy runner and reads the admin
// API every scaleAdminEvery for scaleWindow, counting the idle agents' polls meanwhile.
func measureWindow(b *testing.B, ctx context.Context, o *orchestratorProcess, admin *client.AdminClient, busy *busyAgent, polls *pollCounts) window {
	from, err := benchtest.ReadUsage(o.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	p0, f0 := polls.ok.Load(), polls.failed.Load()
	var adminLat []time.Duration
	enqueued := map[string]time.Time{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	jobs := time.NewTicker(time.Second / scaleJobRate)
	reads := time.NewTicker(scaleAdminEvery)
	end := time.NewTimer(scaleWindow)
	defer jobs.Stop()
	defer reads.Stop()
loop:
	for {
		select {
		case <-jobs.C:
			wg.Go(func() {
				t0 := time.Now()
				d, err := admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "busy", Operation: api.OperationPlan,
					Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive(b)}}, StateKey: "s"})
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				enqueued[d.ID] = t0
				mu.Unlock()
			})
		case <-reads.C:
			t0 := time.Now()
			if _, err := admin.GetRunner(ctx, "busy"); err != nil {
				b.Error(err)
			}
			adminLat = append(adminLat, time.Since(t0))
		case <-end.C:
			break loop
		}
	}
	to, err := benchtest.ReadUsage(o.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	polled, failed := polls.ok.Load()-p0, polls.failed.Load()-f0
	wg.Wait()
	pickups := awaitPickups(b, enqueued, busy)
	polls.mu.Lock()
	firstErr := polls.first
	polls.mu.Unlock()
	return window{polls: polled, failed: failed, firstErr: firstErr, seconds: to.At.Sub(from.At).Seconds(), rss: to.RSS, cpu: benchtest.CPUShare(from, to),
		adminP99:  benchtest.Ms(benchtest.Percentile(adminLat, 99)),
		pickupP50: benchtest.Ms(benchtest.Percentile(pickups, 50)), pickupP99: benchtest.Ms(benchtest.Percentile(pickups, 99))}
}

// awaitPickups waits until the busy agent has claimed every deployment enqueued (each is claimed
// within seconds of the window; 30 s at most) and returns each one's enqueue → claim granted.
func awaitPickups(b *testing.B, enqueued map[string]time.Time, busy *busyAgent) []time.Duration {
	deadline := time.Now().Add(30 * time.Second)
	var pickups []time.Duration
	for {
		pickups = pickups[:0]
		missing := 0
		for id, t0 := range enqueued {
			if at, ok := busy.claimedAt(id); ok {
				pickups = append(pickups, at.Sub(t0))
			} else {
				missing++
			}
		}
		if missing == 0 {
			return pickups
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d deployments of the busy runner not claimed 30 s after the window; the busy agent's first errors: %v", missing, busy.errors())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pollCounts counts the idle agents' polls, and the failed ones with the first failure.
type pollCounts struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	first      error
}

// idleLoop is an idle agent: a long poll of 30 s with no capacity, again and again.
func idleLoop(ctx context.Context, c *client.AgentClient, polls *pollCounts) {
	for ctx.Err() == nil {
		_, err := c.Poll(ctx, api.PollRequest{AgentVersion: "bench", Instance: "load", Held: []api.HeldAttempt{}, WaitSeconds: 30})
		switch {
		case err == nil:
			polls.ok.Add(1)
		case ctx.Err() == nil:
			polls.failed.Add(1)
			polls.mu.Lock()
			if polls.first == nil {
				polls.first = err
			}
			polls.mu.Unlock()
			time.Sleep(time.Second) // the figures show failed polls as fewer requests
		}
	}
}

// busyAgent claims every offer at once and reports it finished, recording when each claim was
// granted.
type busyAgent struct {
	c       *client.AgentClient
	mu      sync.Mutex
	claimed map[string]time.Time
	errs    []error
}

// fail keeps the first errors, for the benchmark's message.
func (a *busyAgent) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.errs) < 5 {
		a.errs = append(a.errs, err)
	}
}

func (a *busyAgent) errors() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.errs...)
}

func newBusyAgent(c *client.AgentClient) *busyAgent {
	return &busyAgent{c: c, claimed: map[string]time.Time{}}
}

func (a *busyAgent) claimedAt(id string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.claimed[id]
	return t, ok
}

// run polls and claims as the agent's session does: an offer already being claimed is not
// claimed again; after an answer with offers the next poll goes as soon as the claims in flight
// are answered (250 ms at most), and an answer that brought nothing new is followed by the
// agent's minimum gap of 250 ms.
func (a *busyAgent) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	starting := map[string]bool{}
	var startMu sync.Mutex
	claims := newClaimTracker()
	for ctx.Err() == nil {
		began := time.Now()
		resp, err := a.c.Poll(ctx, api.PollRequest{AgentVersion: "bench", Instance: "busy", Held: []api.HeldAttempt{}, WaitSeconds: 30, CapacityFree: api.MaxMaxConcurrency})
		if err != nil {
			if ctx.Err() == nil {
				a.fail(fmt.Errorf("poll: %w", err))
				time.Sleep(time.Second)
			}
			continue
		}
		taken := 0
		// once runs start for a deployment not being started already; claim counts a claim
		// request in flight.
		once := func(id string, claim bool, start func()) {
			startMu.Lock()
			dup := starting[id]
			starting[id] = true
			startMu.Unlock()
			if dup {
				return
			}
			taken++
			if claim {
				claims.begin()
			}
			wg.Go(func() {
				defer func() { startMu.Lock(); delete(starting, id); startMu.Unlock() }()
				start()
			})
		}
		// Claims in the answer (agent protocol 7) start at once, as the agent's session starts them.
		for _, c := range resp.Claims {
			once(c.DeploymentID, false, func() { a.started(ctx, &c) })
		}
		for _, o := range resp.Offers {
			once(o.DeploymentID, true, func() {
				c, err := a.c.Claim(ctx, o.DeploymentID, api.ClaimRequest{Attempt: o.Attempt, Instance: "busy"})
				claims.done()
				if err != nil {
					a.fail(fmt.Errorf("claim %s: %w", o.DeploymentID, err))
					return
				}
				a.started(ctx, c)
			})
		}
		if len(resp.Offers)+len(resp.Claims) > 0 && claims.await(taken > 0) {
			continue
		}
		if gap := time.Since(began); taken == 0 && gap < 250*time.Millisecond {
			time.Sleep(250*time.Millisecond - gap)
		}
	}
}

// started notes when the attempt of a grant was claimed and finishes it at once.
func (a *busyAgent) started(ctx context.Context, c *api.Claim) {
	a.mu.Lock()
	if _, ok := a.claimed[c.DeploymentID]; !ok {
		a.claimed[c.DeploymentID] = time.Now()
	}
	a.mu.Unlock()
	if _, err := a.c.Event(ctx, c.DeploymentID, api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: c.Attempt, Seq: 2,
		Type: api.EventFinished, Result: api.StatusSucceeded, Time: time.Now().UTC()}}); err != nil {
		a.fail(fmt.Errorf("finished event of %s: %w", c.DeploymentID, err))
	}
}

// claimTracker counts the simulated agent's claims in flight, so it can poll again as soon as
// they are answered, as the agent's session does.
type claimTracker struct {
	mu       sync.Mutex
	n        int
	answered chan struct{}
}

func newClaimTracker() *claimTracker { return &claimTracker{answered: make(chan struct{}, 1)} }

func (c *claimTracker) begin() { c.mu.Lock(); c.n++; c.mu.Unlock() }

func (c *claimTracker) done() {
	c.mu.Lock()
	c.n--
	c.mu.Unlock()
	select {
	case c.answered <- struct{}{}:
	default:
	}
}

// await waits, 250 ms at most, until no claim is in flight, and tells whether the next poll goes
// at once (not when there was nothing to wait for and nothing was taken: the gap follows).
func (c *claimTracker) await(took bool) bool {
	timer := time.NewTimer(250 * time.Millisecond)
	defer timer.Stop()
	for waited := false; ; waited = true {
		c.mu.Lock()
		n := c.n
		c.mu.Unlock()
		if n == 0 {
			return took || waited
		}
		select {
		case <-c.answered:
		case <-timer.C:
			return true
		}
	}
}

// startOrchestrator starts the orchestrator the scale benchmark loads. Its organisation holds
// one runner per simulated agent, beyond the default quota of 1,000 runners (the quota's
// arrival broke this benchmark until a whole make bench ran again), so the quota is raised to
// the connections allowed.
func startOrchestrator(b *testing.B, maxConnections int) *orchestratorProcess {
	dir := b.TempDir()
	bin := goBuild(b, dir, ".", "outpost-orchestrator")
	return runOrchestrator(b, logDir(b), "orchestrator-scale", bin, porttest.Addr(b), "bench-admin-token-0123456789abcdef",
		"--data-dir", filepath.Join(dir, "data"), "--max-connections", strconv.Itoa(maxConnections),
		"--max-runners-per-org", strconv.Itoa(maxConnections))
}

// raiseFileLimit lifts this process's open-file limit (and its children's) to at least n, as far
// as the hard limit allows.
func raiseFileLimit(b *testing.B, n int) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Fatal(err)
	}
	if l.Cur >= uint64(n) {
		return
	}
	l.Cur = min(max(uint64(n), l.Cur), l.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Fatal(err)
	}
	if l.Cur < uint64(n) {
		b.Logf("open-file limit %d is below the %d the load needs; raise the hard limit (ulimit -Hn)", l.Cur, n)
	}
}

// parallel runs fn(0..n-1) on workers goroutines.
func parallel(n, workers int, fn func(int)) {
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	wg.Wait()
}

var (
	archiveOnce sync.Once
	archiveData []byte
)

func archive(b *testing.B) []byte {
	archiveOnce.Do(func() {
		archiveData = orchestratortest.TarGz(b, map[string]string{"main.tf": "output \"hello\" { value = \"world\" }\n"})
	})
	return archiveData
}
