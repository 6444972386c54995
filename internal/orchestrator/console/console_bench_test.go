package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/benchtest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/storetest"
)

// BenchmarkConsole is make bench's console figures, over HTTP against a real orchestrator on
// loopback, on bbolt and on PostgreSQL: the render of the deployments list and of a deployment
// page with OUTPOST_BENCH_CONSOLE_DEPLOYMENTS (10,000) deployments in the store, next to the
// API's answers for the same deployments (its list of all of them, and the deployment with its
// events); and what 500 open live log streams cost: memory, and PostgreSQL connections while
// they sit between their reads.
func BenchmarkConsole(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("OUTPOST_BENCH_CONSOLE_DEPLOYMENTS")); err == nil && v > 0 {
		n = v
	}
	const streams = 500
	began := time.Now()
	var figures []benchtest.Figure
	for _, engine := range []string{"bbolt", "PostgreSQL"} {
		sec := "console, " + engine
		dbURL := ""
		if engine == "PostgreSQL" {
			dbURL = storetest.PostgreSQL(b)
		}
		l := newConsoleLoad(b, n, dbURL)
		benchtest.Progress("console on %s: %d deployments filled in %s", engine, n, l.filled.Round(time.Second))
		list := l.latency(b, "/orgs/acme/deployments", true)
		apiList := l.latency(b, "/api/v1/orgs/acme/deployments", false)
		page := l.latency(b, "/orgs/acme/deployments/"+l.full, true)
		apiGet := l.latency(b, "/api/v1/orgs/acme/deployments/"+l.full+"/events", false)
		for _, f := range []struct {
			name      string
			got, api  []time.Duration
			floorName string
		}{
			{"deployments list (50 rows) p95", list, apiList, fmt.Sprintf("API list of all %d", n)},
			{"deployment page p95", page, apiGet, "API events of the deployment"},
		} {
			v := benchtest.Ms(benchtest.Percentile(f.got, 95))
			figures = append(figures, benchtest.Figure{Section: sec, Name: f.name, Value: v, Unit: "ms",
				Floor: benchtest.Ms(benchtest.Percentile(f.api, 95)), FloorName: f.floorName}.Check("≤ 50 ms", v <= 50))
		}
		cost := l.streams(b, streams, dbURL)
		figures = append(figures,
			benchtest.Figure{Section: sec, Name: fmt.Sprintf("%d open log streams: heap + stacks", streams), Value: cost.mib, Unit: "MiB",
				Note: "both ends of every connection are in the measured process"}.Check("≤ 64 MiB", cost.mib <= 64))
		if dbURL != "" {
			figures = append(figures,
				benchtest.Figure{Section: sec, Name: fmt.Sprintf("database connections with %d streams open, peak busy", streams), Value: float64(cost.busyPeak), Unit: "",
					Floor: float64(cost.open), FloorName: "connections open", Note: "pg_stat_activity sampled every 10 ms for 3 s; the pool holds at most 4"}.
					Check("a few, not one per stream", cost.busyPeak <= 4))
		}
	}
	if err := benchtest.Write(benchtest.Results{Benchmark: "console", Started: began, Seconds: time.Since(began).Seconds(), Figures: figures,
		Warmup: "5 requests before each 50 measured; each figure next to the API's answer for the same data from the same server"}); err != nil {
		b.Fatal(err)
	}
	if benchtest.Dir() == "" {
		fmt.Print("\n" + benchtest.Table([]benchtest.Results{{Figures: figures}}))
	}
}

// consoleLoad is a real orchestrator holding n deployments of organisation acme on runner r1;
// the one named full has a claim, a log, events and outputs.
type consoleLoad struct {
	inst   *orchestratortest.Instance
	cookie *http.Cookie
	hc     *http.Client
	full   string
	filled time.Duration
}

func newConsoleLoad(tb testing.TB, n int, databaseURL string) *consoleLoad {
	tb.Helper()
	opts := []orchestratortest.Option{orchestratortest.WithQuotas(store.Quotas{QueuedDeployments: n + 10})}
	if databaseURL != "" {
		opts = append(opts, orchestratortest.WithDatabase(databaseURL))
	}
	inst := orchestratortest.Start(tb, opts...)
	ctx := tb.Context()
	admin, key := inst.RegisterRunner(ctx, tb)
	src := api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(tb, map[string]string{"main.tf": ""})}}
	// The deployment whose page is measured comes first, so the agent's claim takes it at once.
	d, err := admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationApply, StateKey: "apps/web", Source: src})
	if err != nil {
		tb.Fatal(err)
	}
	run := inst.NewAgent(tb, "acme", "r1", key, "v1").Claim(ctx, d.ID)
	for i := range 200 {
		run.Log(ctx, fmt.Sprintf("module.web.aws_instance.app[%d]: Creating...\n", i))
	}
	run.Finish(ctx, api.StatusSucceeded, api.Outputs{"url": {Value: []byte(`"https://web.example.com"`)}})
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n-1; i += 8 {
				if _, err := admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan,
					StateKey: fmt.Sprintf("apps/%d", i%50), Source: src}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		tb.Fatalf("fill: %v", err)
	}
	l := &consoleLoad{inst: inst, full: d.ID, filled: time.Since(start), hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	l.cookie = signInCookie(tb, inst.URL, inst.AdminToken, "acme")
	return l
}

// latency times 50 GETs of path after 5 that are not timed, with the console's session or the
// API's admin token.
func (l *consoleLoad) latency(tb testing.TB, path string, console bool) []time.Duration {
	tb.Helper()
	var out []time.Duration
	for i := range 55 {
		req, err := http.NewRequestWithContext(tb.Context(), http.MethodGet, l.inst.URL+path, nil)
		if err != nil {
			tb.Fatal(err)
		}
		if console {
			req.AddCookie(l.cookie)
		} else {
			req.Header.Set("Authorization", "Bearer "+l.inst.AdminToken)
		}
		start := time.Now()
		resp, err := l.hc.Do(req)
		if err != nil {
			tb.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusOK {
			tb.Fatalf("GET %s answered %d", path, resp.StatusCode)
		}
		if i >= 5 {
			out = append(out, took)
		}
	}
	return out
}

// streamCost is what open log streams cost.
type streamCost struct {
	// mib is the heap and stacks in use more than before they opened.
	mib float64
	// busyPeak and open are PostgreSQL's connections of the orchestrator's database while the
	// streams sit between reads: the most doing something at once, and all open.
	busyPeak, open int
}

// streams opens n live log streams of the full deployment and measures them once each has had its
// first event.
func (l *consoleLoad) streams(tb testing.TB, n int, databaseURL string) streamCost {
	tb.Helper()
	ctx := tb.Context()
	before := memNow()
	tr := &http.Transport{MaxIdleConnsPerHost: -1}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var bodies []io.ReadCloser
	defer func() {
		for _, b := range bodies {
			_ = b.Close()
		}
	}()
	for range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.inst.URL+"/orgs/acme/deployments/"+l.full+"/log", nil)
		if err != nil {
			tb.Fatal(err)
		}
		req.AddCookie(l.cookie)
		resp, err := hc.Do(req) //nolint:bodyclose // kept open on purpose; closed with bodies at the end
		if err != nil {
			tb.Fatal(err)
		}
		bodies = append(bodies, resp.Body)
		if resp.StatusCode != http.StatusOK {
			tb.Fatalf("stream answered %d", resp.StatusCode)
		}
		buf := make([]byte, 4096)
		got := ""
		for !strings.Contains(got, "event: log") {
			k, err := resp.Body.Read(buf)
			if err != nil {
				tb.Fatal(err)
			}
			got += string(buf[:k])
		}
	}
	time.Sleep(2 * time.Second) // every stream past a few of its one-second reads
	after := memNow()
	cost := streamCost{mib: float64(after.heap+after.stack-before.heap-before.stack) / (1 << 20)}
	if databaseURL != "" {
		cost.busyPeak, cost.open = connections(tb, databaseURL, 3*time.Second)
	}
	return cost
}

// connections samples pg_stat_activity of the database behind url every 10 ms for d and returns
// the most client connections busy at once (not idle) and the most open, leaving out its own.
func connections(tb testing.TB, dbURL string, d time.Duration) (busyPeak, open int) {
	tb.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Del("pool_max_conns") // the pool's setting, not the server's
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(tb.Context(), d+10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		var busy, all int
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state <> 'idle'), count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&busy, &all); err != nil {
			tb.Fatal(err)
		}
		busyPeak, open = max(busyPeak, busy), max(open, all)
	}
	return busyPeak, open
}

// The console's benchmark, small, in make test: the pages and streams it measures answer, on
// both engines, and the measurement code keeps working.
func TestConsoleBenchmarkRunsSmall(t *testing.T) {
	for _, engine := range []string{"bbolt", "PostgreSQL"} {
		t.Run(engine, func(t *testing.T) {
			dbURL := ""
			if engine == "PostgreSQL" {
				dbURL = storetest.PostgreSQL(t)
			}
			l := newConsoleLoad(t, 60, dbURL)
			for _, p := range []string{"/orgs/acme/deployments", "/orgs/acme/deployments/" + l.full} {
				if got := l.latency(t, p, true); len(got) != 50 {
					t.Fatalf("%s: %d samples", p, len(got))
				}
			}
			cost := l.streams(t, 10, dbURL)
			if dbURL != "" && (cost.open == 0 || cost.busyPeak > cost.open) {
				t.Fatalf("connections: %+v; the orchestrator's pool must show", cost)
			}
		})
	}
}

type memFigures struct {
	heap, stack uint64
	goroutines  int
}

func memNow() memFigures {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memFigures{heap: m.HeapInuse, stack: m.StackInuse, goroutines: runtime.NumGoroutine()}
}

// signInCookie signs in and returns the session cookie.
func signInCookie(tb testing.TB, base, token, org string) *http.Cookie {
	tb.Helper()
	form := url.Values{"token": {token}, "org": {org}}
	req, err := http.NewRequestWithContext(tb.Context(), http.MethodPost, base+"/signin", strings.NewReader(form.Encode()))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	_ = resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == "outpost_session" {
			return ck
		}
	}
	tb.Fatalf("sign-in answered %d without a session cookie", resp.StatusCode)
	return nil
}
