package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/faulttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// The fault suite: each fault is injected while deployments run on the test bed's kwok node,
// and every deployment must still end exactly once. `make test` runs a short version;
// `make faults` (OUTPOST_FAULTS=full) the long one, e.g. 200 deployments across the agent's
// SIGKILLs. All traffic stays on loopback; every loop is bounded.

// faultRow is one line of the table.
type faultRow = faulttest.Row

// scale picks the short or the long figure.
func scale(short, full int) int { return faulttest.Scale(short, full) }

// faultTemplate: each Job's pod runs 2 s on kwok.
const faultTemplate = `{"metadata":{"annotations":{"testbed.outpost.dev/run-duration":"2s"}},"spec":{"containers":[{"name":"main"}]}}`

// TestFaults runs every fault one after the other and prints one table. It is not parallel, so
// Go runs it while the package's parallel tests wait: pausing etcd disturbs nobody else.
func TestFaults(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	s := faulttest.NewSuite(t, "agent-e2e")
	s.Run("agent SIGKILL at random points", func(t *testing.T) faultRow { return agentKills(t, rng) })
	s.Run("orchestrator restarts under load", func(t *testing.T) faultRow { return orchestratorRestarts(t, rng) })
	s.Run("etcd paused 10 s", etcdPause)
	s.Run("proxy drops, delays, resets", func(t *testing.T) faultRow { return proxyChaos(t, rng) })
	s.Run("agent clock 90 s behind", func(t *testing.T) faultRow { return clockSkew(t, 90*time.Second) })
	s.Run("agent clock 90 s ahead", func(t *testing.T) faultRow { return clockSkew(t, -90*time.Second) })
	s.Run("captured requests replayed", replay)
	s.Run("running job pods evicted (Eviction API)", evictions)
	s.Run("agent upgraded from the previous build", agentUpgrade)
	s.Run("orchestrator upgraded from the previous build", orchestratorUpgrade)
	s.Report()
}

// outcome waits (at most timeout) until every deployment is terminal and counts what the table
// counts; recover is measured from since.
func (e *env) outcome(ids []string, c *creations, since time.Time, timeout time.Duration) faultRow {
	e.t.Helper()
	r := faultRow{Deployments: len(ids)}
	done := map[string]*api.Deployment{}
	deadline := time.Now().Add(timeout)
	for len(done) < len(ids) && time.Now().Before(deadline) {
		for _, id := range ids {
			if done[id] != nil {
				continue
			}
			if d, err := e.admin.GetDeployment(context.Background(), id); err == nil && d.Status.Terminal() {
				done[id] = d
			}
		}
		if len(done) < len(ids) {
			time.Sleep(200 * time.Millisecond)
		}
	}
	r.Recover = time.Since(since)
	per := c.perJob()
	for _, id := range ids {
		d := done[id]
		if d == nil || d.Status != api.StatusSucceeded {
			r.Lost++
			if d != nil {
				e.t.Logf("deployment %s: %s (%s) %s", id, d.Status, d.Reason, d.Message)
			} else {
				e.t.Logf("deployment %s: not finished after %s", id, timeout)
			}
		}
		if d != nil && d.Attempt > 1 {
			r.Retried++
		}
		if per[id] > 1 {
			r.Twice++
			e.t.Logf("deployment %s: %d Jobs", id, per[id])
		}
		evs, err := e.admin.ListEvents(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		n := orchestratortest.EventCounts(evs)
		started, finished := n[api.EventStarted], n[api.EventFinished]
		if started != 1 || finished != 1 {
			r.EventsLost++
			e.t.Logf("deployment %s: %d started and %d finished events: %+v", id, started, finished, evs)
		}
	}
	return r
}

// jitter is a random duration in [lo, hi).
func jitter(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// agentKills SIGKILLs the agent at random points while the deployments run and starts it again
// at once (or after a moment), as a node's kubelet would restart a crashed container.
func agentKills(t *testing.T, rng *rand.Rand) faultRow {
	n, kills := scale(30, 200), scale(4, 15)
	e := newEnv(t, faultTemplate, scale(10, 25))
	c := e.watchCreations()
	a := e.startAgent("agent-0")
	ids := e.deploy(n)
	for k := 0; k < kills; k++ {
		time.Sleep(jitter(rng, 300*time.Millisecond, 3*time.Second))
		a.kill()
		time.Sleep(jitter(rng, 0, time.Second))
		a = e.startAgent("agent-0")
	}
	r := e.outcome(ids, c, time.Now(), 5*time.Minute)
	r.Note = fmt.Sprintf("%d SIGKILLs, %d Jobs created", kills, c.jobs())
	return r
}

// orchestratorRestarts restarts the orchestrator (same data, same address) while the agent
// polls, claims and reports.
func orchestratorRestarts(t *testing.T, rng *rand.Rand) faultRow {
	n, restarts := scale(30, 100), scale(3, 8)
	e := newEnv(t, faultTemplate, scale(10, 25))
	c := e.watchCreations()
	e.startAgent("agent-0", "--leader-elect=false")
	ids := e.deploy(n)
	for k := 0; k < restarts; k++ {
		time.Sleep(jitter(rng, 500*time.Millisecond, 3*time.Second))
		e.orch.Restart(t)
	}
	r := e.outcome(ids, c, time.Now(), 5*time.Minute)
	r.Note = fmt.Sprintf("%d restarts", restarts)
	return r
}

// etcdPause freezes the test bed's etcd for 10 s with Jobs running: the API server's requests
// hang, the agent's Kubernetes calls time out, and Jobs finish while nobody can see them.
func etcdPause(t *testing.T) faultRow {
	n := scale(20, 60)
	e := newEnv(t, faultTemplate, scale(10, 25))
	c := e.watchCreations()
	e.startAgent("agent-0", "--leader-elect=false")
	ids := e.deploy(n)
	testbed.WaitFor(t, 60*time.Second, "the first Jobs", func() (bool, string) { return c.jobs() >= 5, "" })
	resume, err := e.cluster.Pause("etcd")
	if err != nil {
		t.Skip(err) // a reused test bed: its etcd is not this process's to pause
	}
	var once sync.Once
	cont := func() {
		once.Do(func() {
			if err := resume(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Cleanup(cont)
	time.Sleep(10 * time.Second)
	cont()
	r := e.outcome(ids, c, time.Now(), 5*time.Minute)
	r.Note = "SIGSTOP/SIGCONT of etcd"
	return r
}

// proxyChaos puts a proxy between the agent and the orchestrator that, for a while, drops a
// fifth of new connections, delays a fifth by up to 2 s, and resets a fifth after part of the
// answer, and also resets a random open connection every second or so.
func proxyChaos(t *testing.T, rng *rand.Rand) faultRow {
	n, span := scale(30, 100), time.Duration(scale(20, 60))*time.Second
	e := newEnv(t, faultTemplate, scale(10, 25))
	p := newProxy(t, strings.TrimPrefix(e.orch.URL, "http://"))
	var mu sync.Mutex
	counts := map[string]int{}
	p.chaos = func() connFault {
		mu.Lock()
		defer mu.Unlock()
		switch x := rng.IntN(5); x {
		case 0:
			counts["dropped"]++
			return connFault{drop: true}
		case 1:
			counts["delayed"]++
			return connFault{delay: jitter(rng, 100*time.Millisecond, 2*time.Second)}
		case 2:
			counts["reset"]++
			return connFault{resetAfter: 1 + rng.Int64N(600)}
		}
		return connFault{}
	}
	e.apiURL = "http://" + p.addr
	c := e.watchCreations()
	e.startAgent("agent-0", "--leader-elect=false")
	ids := e.deploy(n)
	for end := time.Now().Add(span); time.Now().Before(end); {
		mu.Lock() // rng is shared with the proxy's goroutines
		pause := jitter(rng, 500*time.Millisecond, 1500*time.Millisecond)
		mu.Unlock()
		time.Sleep(pause)
		mu.Lock()
		p.cutOne(rng)
		counts["cut"]++
		mu.Unlock()
	}
	p.mu.Lock()
	p.chaos = nil
	p.mu.Unlock()
	r := e.outcome(ids, c, time.Now(), 5*time.Minute)
	mu.Lock()
	r.Note = fmt.Sprintf("%s of chaos: %d dropped, %d delayed, %d reset mid-answer, %d open ones cut", span, counts["dropped"], counts["delayed"], counts["reset"], counts["cut"])
	mu.Unlock()
	return r
}

// connFault is what the proxy does to one connection.
type connFault struct {
	drop       bool
	delay      time.Duration
	resetAfter int64
}

// cutOne resets one open connection, picked at random.
func (p *proxy) cutOne(rng *rand.Rand) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.conns) == 0 {
		return
	}
	i := rng.IntN(len(p.conns))
	for c := range p.conns {
		if i == 0 {
			resetConn(c)
			delete(p.conns, c)
			return
		}
		i--
	}
}

// clockSkew runs the agent with a clock that differs from the orchestrator's by 90 s, beyond the
// 60 s the orchestrator tolerates. There is no portable way to move one process's clock (Go reads
// the vDSO, not libc, so libfaketime does not apply), and only the difference between the two
// clocks matters to the agent protocol, so the orchestrator's clock is moved the other way
// (orchestratortest.WithClock): an agent 90 s behind is an orchestrator 90 s ahead. The agent's
// Kubernetes side (leader Lease, state locks) runs on the machine's clock, as the API server's.
func clockSkew(t *testing.T, orchestratorAhead time.Duration) faultRow {
	n := scale(10, 40)
	e := newEnv(t, faultTemplate, 10, orchestratortest.WithClock(func() time.Time { return time.Now().Add(orchestratorAhead) }))
	c := e.watchCreations()
	began := time.Now()
	a := e.startAgent("agent-0", "--leader-elect=false")
	ids := e.deploy(n)
	r := e.outcome(ids, c, began, 3*time.Minute)
	learnt := a.logValue("orchestrator_ahead_by")
	r.Note = fmt.Sprintf("orchestrator's clock %+v; the agent learnt %s from its answers", orchestratorAhead, learnt)
	if d, err := time.ParseDuration(learnt); err != nil || (d-orchestratorAhead).Abs() > 2*time.Second {
		t.Errorf("the agent logged a clock difference of %q, want about %s", learnt, orchestratorAhead)
	}
	return r
}

// replay records every byte the agent sends through a proxy, then a third party sends each
// captured request again, to the same address: while the deployments run (tokens still
// fresh, so refused as replayed) and once they have finished. Every replay must be refused, and
// the deployments must not notice.
func replay(t *testing.T) faultRow {
	n := scale(10, 40)
	e := newEnv(t, faultTemplate, 10)
	p := newProxy(t, strings.TrimPrefix(e.orch.URL, "http://"))
	var mu sync.Mutex
	var captured []*bytes.Buffer
	p.record = func() io.Writer {
		mu.Lock()
		defer mu.Unlock()
		b := &bytes.Buffer{}
		captured = append(captured, b)
		return &lockedWriter{mu: &mu, w: b}
	}
	e.apiURL = "http://" + p.addr
	c := e.watchCreations()
	began := time.Now()
	e.startAgent("agent-0", "--leader-elect=false")
	ids := e.deploy(n)
	testbed.WaitFor(t, 60*time.Second, "half the Jobs", func() (bool, string) { return c.jobs() >= n/2, "" })
	p.mu.Lock()
	p.record = nil // the replays themselves are not captured
	p.mu.Unlock()
	live := replayAll(t, p.addr, &mu, captured)
	r := e.outcome(ids, c, began, 3*time.Minute)
	late := replayAll(t, p.addr, &mu, captured)
	accepted := live.accepted + late.accepted
	r.Note = fmt.Sprintf("%d replays, %d accepted; refusals: %s", live.sent+late.sent, accepted, mergeCounts(live.refused, late.refused))
	if live.sent == 0 || late.sent == 0 {
		t.Errorf("nothing captured to replay (%d live, %d late)", live.sent, late.sent)
	}
	if accepted > 0 {
		t.Errorf("%d replayed agent requests were accepted", accepted)
	}
	return r
}

type replayResult struct {
	sent, accepted int
	refused        map[string]int
}

// replayAll parses every captured request and sends it again, byte for byte, to the address it
// was captured on (the URL its token was signed for).
func replayAll(t *testing.T, addr string, mu *sync.Mutex, captured []*bytes.Buffer) replayResult {
	mu.Lock()
	var raw [][]byte
	for _, b := range captured {
		raw = append(raw, bytes.Clone(b.Bytes()))
	}
	mu.Unlock()
	out := replayResult{refused: map[string]int{}}
	for _, data := range raw {
		br := bufio.NewReader(bytes.NewReader(data))
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				break // the end of what was captured (or a request cut off by the proxy)
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				break
			}
			fwd, err := http.NewRequestWithContext(t.Context(), req.Method, "http://"+addr+req.URL.RequestURI(), bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			fwd.Header, fwd.Host = req.Header.Clone(), req.Host
			resp, err := http.DefaultClient.Do(fwd)
			if err != nil {
				t.Fatal(err)
			}
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out.sent++
			if resp.StatusCode < 300 {
				out.accepted++
				t.Logf("replayed %s %s accepted: HTTP %d %s", req.Method, req.URL, resp.StatusCode, answer)
				continue
			}
			var eb api.ErrorBody
			_ = json.Unmarshal(answer, &eb)
			reason := eb.Error.Message
			if i := strings.Index(reason, "refused: "); i >= 0 {
				reason, _, _ = strings.Cut(reason[i+len("refused: "):], ":")
			}
			out.refused[fmt.Sprintf("%d %s", resp.StatusCode, reason)]++
		}
	}
	return out
}

func mergeCounts(ms ...map[string]int) string {
	sum := map[string]int{}
	for _, m := range ms {
		for k, v := range m {
			sum[k] += v
		}
	}
	var parts []string
	for k, v := range sum {
		parts = append(parts, fmt.Sprintf("%d× %s", v, k))
	}
	return strings.Join(parts, ", ")
}

// lockedWriter serialises writes to a capture buffer that replayAll reads.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
