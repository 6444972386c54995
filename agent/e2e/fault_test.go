package e2e

import (
	"context"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// creations watches the namespace's Jobs and records every Job object (by UID) per deployment id, so
// a Job created twice for the same job attempt is caught even if it was deleted in between.
type creations struct {
	mu   sync.Mutex
	uids map[string]map[types.UID]bool
}

func (e *env) watchCreations() *creations {
	e.t.Helper()
	c := &creations{uids: map[string]map[types.UID]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	w, err := e.cluster.Client().BatchV1().Jobs(e.ns).Watch(ctx, metav1.ListOptions{LabelSelector: kubeexec.LabelManagedBy + "=" + kubeexec.ManagedByValue})
	if err != nil {
		e.t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			j, ok := ev.Object.(*batchv1.Job)
			if !ok || ev.Type == watch.Error {
				continue
			}
			c.mu.Lock()
			id := j.Annotations[kubeexec.AnnDeploymentID]
			if c.uids[id] == nil {
				c.uids[id] = map[types.UID]bool{}
			}
			c.uids[id][j.UID] = true
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *creations) jobs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.uids)
}

func (c *creations) perJob() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for id, u := range c.uids {
		out[id] = len(u)
	}
	return out
}

// checkExactlyOnce asserts every deployment succeeded with one Job and one finished event.
func (e *env) checkExactlyOnce(ids []string, c *creations) {
	e.t.Helper()
	got := e.waitTerminal(ids, 3*time.Minute)
	per := c.perJob()
	for _, id := range ids {
		if got[id].Status != api.StatusSucceeded {
			e.t.Errorf("deployment %s: status %q reason %q message %q", id, got[id].Status, got[id].Reason, got[id].Message)
		}
		if per[id] != 1 {
			e.t.Errorf("deployment %s: %d Jobs created, want 1", id, per[id])
		}
		if n, evs := e.finishedEvents(id); n != 1 {
			e.t.Errorf("deployment %s: %d finished events, want exactly 1: %+v", id, n, evs)
		}
	}
	testbed.WaitFor(e.t, 60*time.Second, "every Job out of the live set (kept in the history) after its finished event", func() (bool, string) { return len(e.jobs()) == 0, "" })
}

// TestSIGKILLWhileJobsRun kills the agent with 20 Jobs running and starts it again: the new
// process re-adopts the Jobs, and every attempt ends with one finished event and one Job.
func TestSIGKILLWhileJobsRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `{"metadata":{"annotations":{"testbed.outpost.dev/run-duration":"15s"}},"spec":{"containers":[{"name":"main"}]}}`, 25)
	c := e.watchCreations()
	a := e.startAgent("agent-0")
	ids := e.deploy(20)
	began := time.Now()
	testbed.WaitFor(t, 90*time.Second, "20 Jobs", func() (bool, string) { return c.jobs() == 20, "" })
	t.Logf("20 Jobs created %s after enqueue; SIGKILL", time.Since(began).Round(time.Millisecond))
	a.kill()
	b := e.startAgent("agent-0")
	e.checkExactlyOnce(ids, c)
	t.Logf("all 20 reported %s after enqueue; restarted agent re-adopted: %d log lines", time.Since(began).Round(time.Millisecond), b.logCount("re-adopted running attempts"))
	if b.logCount("re-adopted running attempts") == 0 {
		t.Error("the restarted agent did not re-adopt any Job")
	}
}

// proxy is a TCP proxy in front of the orchestrator that can refuse connections, so the agent
// sees the orchestrator vanish (connection refused, cut connections) and come back at the same
// address. With chaos set it also drops, delays and resets connections (faultsuite_test.go), and
// with record set it keeps what clients sent, for a replay.
type proxy struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]bool
	// chaos, when set, decides the fate of each new connection.
	chaos func() connFault
	// record, when set, gives each new connection a writer that receives a copy of every byte
	// the client sends on it.
	record func() io.Writer
}

func newProxy(t *testing.T, target string) *proxy {
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: ln.Addr().String(), target: target, conns: map[net.Conn]bool{}}
	p.serve(ln)
	t.Cleanup(p.down)
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(in)
		}
	}()
}

// pipe connects one client to the orchestrator, through the chaos the proxy is set to.
func (p *proxy) pipe(in net.Conn) {
	p.mu.Lock()
	chaos, record := p.chaos, p.record
	p.mu.Unlock()
	var f connFault
	if chaos != nil {
		f = chaos()
	}
	if f.drop {
		resetConn(in)
		return
	}
	time.Sleep(f.delay)
	var d net.Dialer
	out, err := d.DialContext(context.Background(), "tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	p.mu.Lock()
	p.conns[in], p.conns[out] = true, true
	p.mu.Unlock()
	var src io.Reader = in
	if record != nil {
		src = io.TeeReader(in, record())
	}
	if f.resetAfter > 0 {
		// Cut both sides with a reset once the orchestrator has sent this many bytes: a request
		// that was applied but whose answer never arrives.
		go func() { _, _ = io.CopyN(in, out, f.resetAfter); resetConn(in); resetConn(out) }()
	} else {
		go func() { _, _ = io.Copy(in, out); in.Close() }()
	}
	go func() { _, _ = io.Copy(out, src); out.Close() }()
}

// resetConn closes c with a TCP reset instead of an orderly close.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// down closes the listener and cuts every open connection.
func (p *proxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *proxy) up(t *testing.T) {
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var lc net.ListenConfig
		if ln, err = lc.Listen(context.Background(), "tcp", p.addr); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// TestOrchestratorDown30s: the orchestrator is unreachable for 30 s while Jobs finish. The
// agent keeps their finished events on the Jobs, backs off, reconnects, and every event arrives.
func TestOrchestratorDown30s(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `{"metadata":{"annotations":{"testbed.outpost.dev/run-duration":"4s"}},"spec":{"containers":[{"name":"main"}]}}`, 10)
	p := newProxy(t, e.orch.URL[len("http://"):])
	e.apiURL = "http://" + p.addr
	c := e.watchCreations()
	a := e.startAgent("agent-0", "--leader-elect=false")
	ids := e.deploy(5)
	testbed.WaitFor(t, 60*time.Second, "5 Jobs", func() (bool, string) { return c.jobs() == 5, "" })
	p.down()
	downAt := time.Now()
	t.Log("orchestrator unreachable")
	// The Jobs finish while the orchestrator is away: their finished events must be kept on the Jobs.
	testbed.WaitFor(t, 30*time.Second, "an undelivered finished event kept on a Job", func() (bool, string) {
		for _, j := range e.jobs() {
			if j.Annotations[kubeexec.AnnPendingEvent] != "" {
				return true, ""
			}
		}
		return false, ""
	})
	e.orch.Restart(t) // and the orchestrator restarts meanwhile, on the same data
	time.Sleep(30*time.Second - time.Since(downAt))
	p.up(t)
	upAt := time.Now()
	t.Log("orchestrator back")
	e.checkExactlyOnce(ids, c)
	t.Logf("all finished events arrived %s after the orchestrator came back; poll failures logged: %d", time.Since(upAt).Round(time.Millisecond), a.logCount("poll failed"))
	// Poll backoff is capped at 30 s; once a poll succeeds the pending events go at once.
	if el := time.Since(upAt); el > 45*time.Second {
		t.Errorf("finished events took %s after the orchestrator came back; want < 45 s", el.Round(time.Second))
	}
	if a.logCount("poll failed") > 40 {
		t.Errorf("%d failed polls in a 30 s outage: the agent does not back off", a.logCount("poll failed"))
	}
}

// TestTwoReplicasOneLeader runs two agents for one runner: only the Lease holder claims; when it
// stops, the standby takes over.
func TestTwoReplicasOneLeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `{"metadata":{"annotations":{"testbed.outpost.dev/run-duration":"2s"}},"spec":{"containers":[{"name":"main"}]}}`, 10)
	c := e.watchCreations()
	a := e.startAgent("agent-a")
	b := e.startAgent("agent-b")
	ids := e.deploy(6)
	e.checkExactlyOnce(ids, c)
	ca, cb := a.logCount(`"msg":"attempt started"`), b.logCount(`"msg":"attempt started"`)
	if ca+cb != 6 || (ca != 0 && cb != 0) {
		t.Fatalf("jobs started by agent-a %d, agent-b %d: want all 6 by one replica", ca, cb)
	}
	leader, standby := a, b
	if cb > 0 {
		leader, standby = b, a
	}
	if n := standby.logCount(`"msg":"claim`); n != 0 {
		t.Errorf("the standby attempted %d claims", n)
	}
	// SIGTERM releases the Lease; the standby must take over and run new work.
	leader.signal(syscall.SIGTERM)
	<-leader.done
	more := e.deploy(2)
	e.checkExactlyOnce(more, c)
	if n := standby.logCount(`"msg":"attempt started"`); n != 2 {
		t.Errorf("the new leader started %d jobs, want 2", n)
	}
}
