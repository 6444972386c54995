package orchestrator

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// everything is what an admin can read about organisation acme, deployments in full.
func everything(h *harness) string {
	h.t.Helper()
	return everythingIn(h, "acme")
}

// everythingIn is everything an admin can read in org, deployments' events, outputs and logs
// included.
func everythingIn(h *harness, org string) string {
	h.t.Helper()
	var b strings.Builder
	b.WriteString(snapshot(h, org))
	var list api.List[api.Deployment]
	h.mustAdmin(http.MethodGet, orgPath(org)+"/deployments", nil, http.StatusOK, &list)
	for _, d := range list.Items {
		for _, p := range []string{"", "/events", "/outputs", "/logs"} {
			r := h.admin(http.MethodGet, orgPath(org)+"/deployments/"+d.ID+p, nil)
			if r.code != http.StatusOK {
				h.t.Fatalf("GET %s%s: HTTP %d", d.ID, p, r.code)
			}
			b.Write(r.body)
		}
	}
	return b.String()
}

func TestRestartKeepsEverything(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 3)
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/state-storages", api.StateStorageInput{
		ID: "gcs", Type: api.StateStorageGCS, GCS: &api.GCSStateSpec{Bucket: "tf-state", PathPrefix: "outpost"},
	}, http.StatusCreated, nil)
	apply := h.deploy(api.OperationApply)
	plan := h.deploy(api.OperationPlan)
	canceled := h.deploy(api.OperationDestroy)
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/deployments/"+canceled.ID+"/cancel", nil, http.StatusOK, nil)

	// A token used before the restart.
	body := jsonBytes(t, api.PollRequest{AgentVersion: "v1.2.3", Instance: "pod-a"})
	used := a.token(pollPath, body)
	if r := h.raw(http.MethodPost, pollPath, map[string]string{"Authorization": used, "Content-Type": "application/json"}, body); r.code != http.StatusOK {
		t.Fatalf("poll: HTTP %d %s", r.code, r.body)
	}
	c := a.claim(apply.ID, 1, "pod-a")
	if r := a.event(apply.ID, api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventStarted}}); r.code != http.StatusOK {
		t.Fatalf("event: HTTP %d", r.code)
	}
	mustAppend(t, h, c.JobToken, 0, "Terraform will perform the following actions:\n")
	if r := h.job(c.JobToken, http.MethodPut, "/api/v1/job/outputs", "application/json", []byte(`{"id":{"value":"i-123","sensitive":false}}`)); r.code != http.StatusNoContent {
		t.Fatalf("outputs: HTTP %d", r.code)
	}
	before := everything(h)
	if !strings.Contains(before, `"agent_version":"v1.2.3"`) {
		t.Fatalf("runner status not recorded before the restart: %s", before)
	}

	h.restart()

	if after := everything(h); after != before {
		t.Fatalf("state changed across the restart:\nbefore %s\nafter  %s", before, after)
	}
	// The replay window did not reopen.
	r := h.raw(http.MethodPost, pollPath, map[string]string{"Authorization": used, "Content-Type": "application/json"}, body)
	if r.code != http.StatusUnauthorized || !strings.Contains(r.err(t).Message, "replayed") {
		t.Fatalf("token from before the restart: HTTP %d %s, want 401 replayed", r.code, r.body)
	}
	// The lease and its fencing still hold: another instance is refused, the holder gets the
	// same grant and the same token (derived from the persisted secret).
	if r := a.post("/api/v1/agent/deployments/"+apply.ID+"/claim", api.ClaimRequest{Attempt: 1, Instance: "pod-b"}); r.code != http.StatusConflict {
		t.Fatalf("claim by another instance after restart: HTTP %d, want 409", r.code)
	}
	again := a.claim(apply.ID, 1, "pod-a")
	if again.Lease.Fencing != c.Lease.Fencing || again.JobToken != c.JobToken {
		t.Fatalf("grant changed across the restart: fencing %d→%d, same token %v", c.Lease.Fencing, again.Lease.Fencing, again.JobToken == c.JobToken)
	}
	// The log continues at the committed offset.
	if got := mustAppend(t, h, c.JobToken, 0, "Terraform will perform the following actions:\n"); got.CommittedOffset != 46 {
		t.Fatalf("duplicate after restart: committed %d, want 46", got.CommittedOffset)
	}
	if r := h.appendLog(c.JobToken, 100, "x"); r.code != http.StatusConflict || *r.err(t).CommittedOffset != 46 {
		t.Fatalf("gap after restart: HTTP %d %s", r.code, r.body)
	}
	// Queue order survives: the plan is still offered; new ids sort after the old ones.
	resp := a.poll(api.PollRequest{Instance: "pod-a", CapacityFree: 2, Held: []api.HeldAttempt{holding(again, true)}})
	if len(resp.Offers) != 1 || resp.Offers[0].DeploymentID != plan.ID {
		t.Fatalf("offers after restart %+v, want %s", resp.Offers, plan.ID)
	}
	newer := h.deploy(api.OperationPlan)
	var list api.List[api.Deployment]
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments", nil, http.StatusOK, &list)
	if len(list.Items) != 4 || list.Items[0].ID != newer.ID || list.Items[3].ID != apply.ID {
		t.Fatalf("list after restart: %v", list.Items)
	}
	// Leases keep expiring by the rules after a restart: the running apply is lost.
	h.clock.Advance(DefaultLeaseDuration + time.Second)
	h.restart()
	h.sweep()
	if d := h.deployment(apply.ID); d.Status != api.StatusLost {
		t.Fatalf("apply after its lease ran out across a restart: %s", d.Status)
	}
	counts, err := h.srv.store.StatusCounts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if counts[api.StatusLost] != 1 || counts[api.StatusQueued] != 2 || counts[api.StatusCanceled] != 1 {
		t.Fatalf("per-status counters after restarts: %v", counts)
	}
}

func TestReplayIDsArePurgedAfterExpiry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	for range 3 {
		a.poll(api.PollRequest{})
	}
	n, err := replayCount(t.Context(), h.eng)
	if err != nil || n != 3 {
		t.Fatalf("remembered ids %d (%v), want 3", n, err)
	}
	h.sweep()
	if n, _ := replayCount(t.Context(), h.eng); n != 3 {
		t.Fatalf("ids purged before their tokens expired: %d left", n)
	}
	h.clock.Advance(3 * time.Minute)
	h.sweep()
	if n, _ := replayCount(t.Context(), h.eng); n != 0 {
		t.Fatalf("%d ids left after their tokens expired", n)
	}
}
