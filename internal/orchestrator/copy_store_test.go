package orchestrator

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/engines"
)

// TestCopyStoreKeepsEverything fills a bbolt orchestrator with deployments in every state, copies
// its data directory into PostgreSQL and serves the copy: every admin read answers byte for byte
// as before, and the tokens handed out before (organisation, job, agent leases) still work.
func TestCopyStoreKeepsEverything(t *testing.T) {
	t.Parallel()
	pgURL := pgSchema(t)
	src := newHarness(t, onBolt)
	a := src.setupRunner("acme", "r1", 4)
	src.setupRunner("beta", "r9", 1)
	ended := runToEnd(src, a, 7)
	running := src.deploy(api.OperationApply)
	claim := a.claim(running.ID, 1, "pod-a")
	a.mustOK(eventPath(running.ID), api.EventRequest{Fencing: claim.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 0, Type: api.EventStarted}}, nil)
	if r := src.appendLog(claim.JobToken, 0, "half way\n"); r.code != http.StatusOK {
		t.Fatalf("log: HTTP %d %s", r.code, r.body)
	}
	src.deploy(api.OperationPlan) // stays queued
	canceled := src.deploy(api.OperationPlan)
	src.mustAdmin(http.MethodPost, orgPath("acme")+"/deployments/"+canceled.ID+"/cancel", nil, http.StatusOK, nil)
	tok := src.orgToken("acme", "ci")
	if r := a.post("/api/v1/agent/states", api.StateReport{Namespace: "outpost-state", States: []api.ReportedState{{StateKey: "team/app",
		Versions: []api.StateVersion{{Generation: 1, Serial: 1, Lineage: "L", Size: 10, WrittenAt: src.clock.Now()}}}}}); r.code != http.StatusNoContent {
		t.Fatalf("state report: HTTP %d %s", r.code, r.body)
	}

	src.mustAdmin(http.MethodPost, orgPath("acme")+"/schedules", scheduleInput("nightly", "0 3 * * *"), http.StatusCreated, nil)

	reads := []string{
		orgPath("acme") + "/schedules", orgPath("acme") + "/schedules/nightly",
		orgPath("acme") + "/runners", orgPath("beta") + "/runners",
		orgPath("acme") + "/state-storages", orgPath("acme") + "/tokens", orgPath("acme") + "/deployments",
		orgPath("acme") + "/deployments/" + ended.ID + "/outputs",
		orgPath("acme") + "/state-storages/state/states", orgPath("acme") + "/state-storages/state/states/team/app",
	}
	var list api.List[api.Deployment]
	src.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments", nil, http.StatusOK, &list)
	for _, d := range list.Items {
		p := orgPath("acme") + "/deployments/" + d.ID
		reads = append(reads, p, p+"/events", p+"/logs")
	}
	before := map[string][]byte{}
	for _, p := range reads {
		before[p] = src.admin(http.MethodGet, p, nil).body
	}
	dir := src.cfg.DataDir
	src.close()

	n, err := engines.CopyStore(t.Context(), dir, pgURL, false, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if n.Deployments != 4 || n.Runners != 2 || n.OrgTokens != 1 || n.LogChunks != 8 || n.Events != 5 || n.States != 1 || n.Schedules != 1 { // events: 3 of agents, 2 of claims
		t.Fatalf("copied %+v", n)
	}
	dst := newHarness(t, func(c *testConfig) { c.DatabaseURL, c.Now = pgURL, src.clock.Now })
	for _, p := range reads {
		if got := dst.admin(http.MethodGet, p, nil).body; !bytes.Equal(got, before[p]) {
			t.Errorf("GET %s after the copy:\n%s\nbefore:\n%s", p, got, before[p])
		}
	}
	if r := dst.as(tok.Token, http.MethodGet, orgPath("acme")+"/runners", nil); r.code != http.StatusOK {
		t.Fatalf("organisation token after the copy: HTTP %d %s", r.code, r.body)
	}
	// The running attempt goes on against the copy: its job token and its job lease hold.
	if r := dst.appendLog(claim.JobToken, int64(len("half way\n")), "and done\n"); r.code != http.StatusOK {
		t.Fatalf("job token after the copy: HTTP %d %s", r.code, r.body)
	}
	b := dst.agentFor("acme", "r1", a.key)
	b.mustOK(eventPath(running.ID), api.EventRequest{Fencing: claim.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventFinished, Result: api.StatusSucceeded}}, nil)
	if d := dst.deployment(running.ID); d.Status != api.StatusSucceeded {
		t.Fatalf("the running deployment after finishing on the copy: %s", d.Status)
	}
	// New deployments do not reuse the list positions of copied ones.
	newer := dst.deploy(api.OperationPlan)
	dst.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments", nil, http.StatusOK, &list)
	if list.Items[0].ID != newer.ID {
		t.Fatalf("a deployment created after the copy is not listed first: %v", list.Items[0].ID)
	}
	if _, err := engines.CopyStore(t.Context(), dir, pgURL, false, io.Discard); err == nil || !strings.Contains(err.Error(), "empty database") {
		t.Fatalf("a second copy into the same database: %v", err)
	}
}
