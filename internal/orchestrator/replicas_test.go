package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// replicas starts n orchestrators over one PostgreSQL schema and one clock, as replicas behind
// a load balancer: agent tokens name the same external URL whichever replica they reach.
func replicas(t *testing.T, n int) []*harness {
	t.Helper()
	return replicasAt(t, pgSchema(t), n)
}

// replicasAt is replicas over the database pgURL names.
func replicasAt(t *testing.T, pgURL string, n int) []*harness {
	t.Helper()
	var hs []*harness
	for i := range n {
		h := newHarness(t, func(c *testConfig) {
			c.DatabaseURL = pgURL
			if i > 0 {
				c.Now = hs[0].clock.Now
			}
		})
		if i > 0 {
			h.clock = hs[0].clock
		}
		hs = append(hs, h)
	}
	return hs
}

// TestLongPollWokenByAnotherReplica: a long poll held by one replica answers at once when a
// deployment for its runner is queued through another (LISTEN/NOTIFY), not when its wait ends.
func TestLongPollWokenByAnotherReplica(t *testing.T) {
	t.Parallel()
	rs := replicas(t, 2)
	a := rs[0].setupRunner("acme", "r1", 1)
	onB := rs[1].agentFor("acme", "r1", a.key)
	done := onB.goPost(pollPath, api.PollRequest{CapacityFree: 1, WaitSeconds: 20})
	waitPolling(t, rs[1], done)
	d := rs[0].deploy(api.OperationPlan)
	res := <-done
	if res.err != nil || res.code != http.StatusOK {
		t.Fatalf("poll on the other replica: HTTP %d %v", res.code, res.err)
	}
	var pr api.PollResponse
	res.decode(t, &pr)
	if res.took > 5*time.Second || !slices.Equal(offerIDs(pr.Offers), []string{d.ID}) {
		t.Fatalf("poll on the other replica took %s and offered %v, want %s at once", res.took, offerIDs(pr.Offers), d.ID)
	}
}

// TestReplicasRunEachDeploymentOnce spreads agents (two competing instances per runner) over
// three replicas, queues deployments through all of them, and drops one replica's connections
// and listener mid-run: every deployment still runs exactly once, in its first attempt, and the
// agents that used the dropped replica finish their attempts on another, their job leases intact.
func TestReplicasRunEachDeploymentOnce(t *testing.T) {
	t.Parallel()
	const runners, perRunner = 3, 8
	rs := replicas(t, 3)
	var agents []*replicaAgent
	for k := range runners {
		a := rs[0].setupRunner("acme", fmt.Sprintf("r%d", k), 2)
		for j := range 2 {
			agents = append(agents, &replicaAgent{rs: rs, key: a, instance: fmt.Sprintf("r%d-pod-%d", k, j), cur: (k + j) % 3})
		}
	}
	var (
		mu     sync.Mutex
		claims = map[string][]string{} // deployment → instances that got a grant
		dead   atomic.Int32            // replicas dropped, from the last
		ids    []string
	)
	queue := func(i int) {
		runner := fmt.Sprintf("r%d", i%runners)
		h := rs[i%(3-int(dead.Load()))]
		var d api.Deployment
		h.mustAdmin(http.MethodPost, orgPath("acme")+"/deployments", api.DeploymentInput{
			RunnerID: runner, Operation: api.OperationApply, StateKey: "k", Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}},
		}, http.StatusCreated, &d)
		ids = append(ids, d.ID)
	}
	// An attempt held through the replica that will be dropped, started there.
	held := rs[2].setupRunner("acme", "held", 1)
	var heldDep api.Deployment
	rs[2].mustAdmin(http.MethodPost, orgPath("acme")+"/deployments", api.DeploymentInput{
		RunnerID: "held", Operation: api.OperationApply, StateKey: "k", Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}},
	}, http.StatusCreated, &heldDep)
	heldClaim := held.claim(heldDep.ID, 1, "held-pod")
	held.mustOK(eventPath(heldDep.ID), api.EventRequest{Fencing: heldClaim.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 0, Type: api.EventStarted}}, nil)

	total := runners * perRunner
	for i := range total / 2 {
		queue(i)
	}
	stop := runAgents(t, agents, func(a *replicaAgent, dep string) {
		mu.Lock()
		if !slices.Contains(claims[dep], a.instance) {
			claims[dep] = append(claims[dep], a.instance)
		}
		mu.Unlock()
	})
	finished := func() int {
		n := 0
		for _, id := range ids {
			if rs[0].deployment(id).Status.Terminal() {
				n++
			}
		}
		return n
	}
	for finished() < total/4 {
		time.Sleep(20 * time.Millisecond)
	}
	// The last replica goes away with requests in flight.
	dead.Store(1)
	rs[2].hs.CloseClientConnections()
	rs[2].close()
	for i := total / 2; i < total; i++ {
		queue(i)
	}
	// The held attempt goes on through another replica with the job lease it was granted.
	elsewhere := rs[0].agentFor("acme", "held", held.key)
	elsewhere.mustOK(eventPath(heldDep.ID), api.EventRequest{Fencing: heldClaim.Lease.Fencing,
		Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventFinished, Result: api.StatusSucceeded}}, nil)
	if r := rs[1].appendLog(heldClaim.JobToken, 0, "finished elsewhere\n"); r.code != http.StatusOK {
		t.Fatalf("job token of the dropped replica's grant, on another: HTTP %d %s", r.code, r.body)
	}
	var heldEvents api.List[api.Event]
	rs[1].mustAdmin(http.MethodGet, orgPath("acme")+"/deployments/"+heldDep.ID+"/events", nil, http.StatusOK, &heldEvents)
	if d := rs[1].deployment(heldDep.ID); d.Status != api.StatusSucceeded || d.Attempt != 1 || len(heldEvents.Items) != 2+1 { // the claim's, the agent's two
		t.Fatalf("attempt held through the dropped replica: %s, attempt %d, %d events", d.Status, d.Attempt, len(heldEvents.Items))
	}
	deadline := time.Now().Add(60 * time.Second)
	for finished() < total && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if len(ids) != total {
		t.Fatalf("queued %d deployments, want %d", len(ids), total)
	}
	for _, id := range ids {
		d := rs[0].deployment(id)
		var events api.List[api.Event]
		rs[1].mustAdmin(http.MethodGet, orgPath("acme")+"/deployments/"+id+"/events", nil, http.StatusOK, &events)
		if d.Status != api.StatusSucceeded || d.Attempt != 1 || len(claims[id]) != 1 || len(events.Items) != 3 {
			t.Errorf("deployment %s: %s, attempt %d, granted to %v, %d events; want succeeded once, in attempt 1, by one instance, 3 events (claimed, started, finished)",
				id, d.Status, d.Attempt, claims[id], len(events.Items))
		}
	}
	var moved int
	for _, a := range agents {
		moved += int(a.moves.Load())
	}
	t.Logf("%d deployments through 3 replicas (one dropped mid-run); %d agent requests moved to another replica", total, moved)
}

// runAgents runs the agents until the returned stop is called (stop waits for them); granted is
// called from their goroutines for every grant.
func runAgents(t *testing.T, agents []*replicaAgent, granted func(a *replicaAgent, deployment string)) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Go(func() { a.run(ctx, func(dep string) { granted(a, dep) }) })
	}
	return func() { cancel(); wg.Wait() }
}

// replicaAgent is a simulated agent instance that talks to one replica and moves to the next
// when that one stops answering, as an agent behind a load balancer would be moved.
type replicaAgent struct {
	rs       []*harness
	key      *agent
	instance string
	cur      int
	moves    atomic.Int32
}

// post sends a signed POST, moving to the next replica on a transport error, until ctx ends.
func (a *replicaAgent) post(ctx context.Context, path string, body any) (response, bool) {
	b, _ := json.Marshal(body)
	for ctx.Err() == nil {
		h := a.rs[a.cur]
		tok, err := a.key.signer.Sign(http.MethodPost, externalURL+path, b)
		if err != nil {
			return response{}, false
		}
		r, err := h.send(http.MethodPost, path, map[string]string{"Authorization": "Outpost-Agent " + tok, "Content-Type": "application/json"}, b)
		if err == nil && r.code != http.StatusServiceUnavailable {
			return r, true
		}
		a.cur = (a.cur + 1) % len(a.rs)
		a.moves.Add(1)
	}
	return response{}, false
}

// run polls, claims what it is offered and runs each attempt to success, until ctx ends;
// granted is called for every grant.
func (a *replicaAgent) run(ctx context.Context, granted func(deployment string)) {
	for ctx.Err() == nil {
		r, ok := a.post(ctx, pollPath, api.PollRequest{CapacityFree: 2, WaitSeconds: 2, Instance: a.instance})
		if !ok {
			return
		}
		var pr api.PollResponse
		if r.code != http.StatusOK || json.Unmarshal(r.body, &pr) != nil {
			continue
		}
		for _, o := range pr.Offers {
			path := "/api/v1/agent/deployments/" + o.DeploymentID
			r, ok := a.post(ctx, path+"/claim", api.ClaimRequest{Attempt: o.Attempt, Instance: a.instance})
			var c api.Claim
			if !ok || r.code != http.StatusOK || json.Unmarshal(r.body, &c) != nil {
				continue // another instance has it
			}
			granted(o.DeploymentID)
			for seq, ev := range []api.Event{{Type: api.EventStarted}, {Type: api.EventFinished, Result: api.StatusSucceeded}} {
				ev.Attempt, ev.Seq = c.Attempt, int64(seq)
				if _, ok := a.post(ctx, path+"/events", api.EventRequest{Fencing: c.Lease.Fencing, Event: ev}); !ok {
					return
				}
			}
		}
	}
}

// TestAgentTokenSpentOnOneReplicaIsRefusedByAnother: the replay cache is the database's, so a
// captured agent token cannot be used again through another replica.
func TestAgentTokenSpentOnOneReplicaIsRefusedByAnother(t *testing.T) {
	t.Parallel()
	rs := replicas(t, 2)
	a := rs[0].setupRunner("acme", "r1", 1)
	body := jsonBytes(t, api.PollRequest{})
	hdr := map[string]string{"Authorization": a.token(pollPath, body), "Content-Type": "application/json"}
	if r := rs[0].raw(http.MethodPost, pollPath, hdr, body); r.code != http.StatusOK {
		t.Fatalf("first use: HTTP %d %s", r.code, r.body)
	}
	if r := rs[1].raw(http.MethodPost, pollPath, hdr, body); r.code != http.StatusUnauthorized {
		t.Fatalf("the same token on the other replica: HTTP %d %s, want 401", r.code, r.body)
	}
}
