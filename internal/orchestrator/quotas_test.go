package orchestrator

import (
	"net/http"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// TestOrgQuotas (N3): one organisation cannot store beyond its quotas of state storages,
// runners, queued deployments and log bytes: the create beyond each is refused with 403
// quota_exceeded naming the quota and its flag, nothing stored changes, and another
// organisation is not held back. Runs on bbolt and on PostgreSQL.
func TestOrgQuotas(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *testConfig) {
		c.Quotas = store.Quotas{Runners: 2, StateStorages: 2, QueuedDeployments: 3, LogBytes: 100}
	})
	refused := func(what string, r response, flag string) {
		t.Helper()
		if r.code != http.StatusForbidden {
			t.Fatalf("%s beyond the quota: HTTP %d %s", what, r.code, r.body)
		}
		e := r.err(t)
		if e.Code != api.CodeQuotaExceeded || !strings.Contains(e.Message, flag) || !strings.Contains(e.Message, `"acme"`) {
			t.Errorf("%s beyond the quota: %+v; want quota_exceeded naming acme and %s", what, e, flag)
		}
		t.Logf("%s beyond the quota: %s", what, e.Message)
	}
	storage := func(org, id string) response {
		return h.admin(http.MethodPost, orgPath(org)+"/state-storages", api.StateStorageInput{
			ID: id, Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: "ns"}})
	}

	a := h.setupRunner("acme", "r1", 1) // the storage "state" and runner r1
	if r := storage("acme", "second"); r.code != http.StatusCreated {
		t.Fatalf("second storage: %d %s", r.code, r.body)
	}
	h.setupRunner("acme", "r2", 1)
	before := everything(h)
	refused("a third state storage", storage("acme", "third"), "--max-state-storages-per-org")
	pemStr, _ := newKey(t)
	refused("a third runner", h.admin(http.MethodPost, orgPath("acme")+"/runners", api.RunnerInput{
		ID: "r3", PublicKeys: []string{pemStr}, StateStorageID: "state",
		Job: api.RunnerJob{Namespace: "jobs", ServiceAccount: "sa"}}), "--max-runners-per-org")
	if after := everything(h); after != before {
		t.Fatal("a refused create changed what is stored")
	}

	var ds []api.Deployment
	for range 3 {
		ds = append(ds, h.deploy(api.OperationPlan))
	}
	before = everything(h)
	deploy := func() response {
		return h.admin(http.MethodPost, orgPath("acme")+"/deployments", api.DeploymentInput{
			RunnerID: "r1", Operation: api.OperationPlan, StateKey: "s",
			Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}}})
	}
	refused("a fourth queued deployment", deploy(), "--max-queued-deployments-per-org")
	if after := everything(h); after != before {
		t.Fatal("a refused create changed what is stored")
	}
	// Another organisation has quotas of its own.
	h.setupRunner("beta", "r1", 1)
	if r := storage("beta", "second"); r.code != http.StatusCreated {
		t.Errorf("beta's second storage: %d %s", r.code, r.body)
	}

	// Once one starts, the queue has room again; its log then fills the log quota.
	c := a.claim(ds[0].ID, 1, "pod-a")
	if r := deploy(); r.code != http.StatusCreated {
		t.Fatalf("a queued deployment once another started: %d %s", r.code, r.body)
	}
	if r := h.appendLog(c.JobToken, 0, strings.Repeat("x", 120)); r.code != http.StatusOK {
		t.Fatalf("log append: %d %s", r.code, r.body)
	}
	// Room in the queue again: only the log quota stands in the way.
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/deployments/"+ds[1].ID+"/cancel", nil, http.StatusOK, nil)
	h.clock.Advance(2 * store.LogUsageTTL)
	before = everything(h)
	refused("a deployment with the organisation's logs at the quota", deploy(), "--max-log-bytes-per-org")
	if after := everything(h); after != before {
		t.Fatal("a refused create changed what is stored")
	}
}
