package orchestrator

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// orgToken creates an organisation token with the bootstrap admin token.
func (h *harness) orgToken(org, name string) api.CreatedOrgToken {
	h.t.Helper()
	var out api.CreatedOrgToken
	h.mustAdmin(http.MethodPost, orgPath(org)+"/tokens", api.OrgTokenInput{Name: name}, http.StatusCreated, &out)
	return out
}

// as sends a request with another bearer token; body is marshalled unless it is already []byte.
func (h *harness) as(token, method, path string, body any) response {
	h.t.Helper()
	hdr := map[string]string{"Authorization": "Bearer " + token}
	b := jsonBytes(h.t, body)
	if b != nil {
		hdr["Content-Type"] = "application/json"
	}
	return h.raw(method, path, hdr, b)
}

// TestOrgTokenSeesNothingOfAnotherOrg attempts every admin route of organisation beta with a
// token of acme: each gets the same 404 whether the object exists or not, and nothing of beta
// changes.
func TestOrgTokenSeesNothingOfAnotherOrg(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setupRunner("acme", "r1", 2)
	b := h.setupRunner("beta", "r1", 2)
	acme := h.orgToken("acme", "ci")
	beta := h.orgToken("beta", "ci")

	// Beta has a deployment that ran: claimed, a log line, outputs, events.
	var dep api.Deployment
	h.mustAdmin(http.MethodPost, orgPath("beta")+"/deployments", api.DeploymentInput{
		RunnerID: "r1", Operation: api.OperationApply, StateKey: "k", Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}},
	}, http.StatusCreated, &dep)
	c := b.claim(dep.ID, 1, "pod-b")
	if r := h.appendLog(c.JobToken, 0, "beta's secret log line\n"); r.code != http.StatusOK {
		t.Fatalf("log: HTTP %d %s", r.code, r.body)
	}
	if r := h.job(c.JobToken, http.MethodPut, "/api/v1/job/outputs", "application/json", []byte(`{"password":{"value":"hunter2","sensitive":true}}`)); r.code != http.StatusNoContent {
		t.Fatalf("outputs: HTTP %d %s", r.code, r.body)
	}
	b.mustOK("/api/v1/agent/deployments/"+dep.ID+"/events", api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 0, Type: api.EventStarted}}, nil)
	h.mustAdmin(http.MethodPost, orgPath("beta")+"/schedules", api.ScheduleInput{ID: "nightly", RunnerID: "r1", Cron: "@daily", StateKey: "k",
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}}}, http.StatusCreated, nil)
	before := everythingIn(h, "beta")

	beta1 := orgPath("beta")
	runner := api.RunnerInput{ID: "r1", PublicKeys: []string{mustPEM(t)}, StateStorageID: "state", Job: api.RunnerJob{Namespace: "x", ServiceAccount: "y"}}
	attempts := []struct {
		method, path string
		body         any
	}{
		{"GET", beta1 + "/runners", nil},
		{"POST", beta1 + "/runners", api.RunnerInput{ID: "r2", PublicKeys: runner.PublicKeys, StateStorageID: "state", Job: runner.Job}},
		{"GET", beta1 + "/runners/r1", nil},
		{"PUT", beta1 + "/runners/r1", runner},
		{"DELETE", beta1 + "/runners/r1", nil},
		{"GET", beta1 + "/state-storages", nil},
		{"POST", beta1 + "/state-storages", api.StateStorageInput{ID: "s2", Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: "x"}}},
		{"GET", beta1 + "/state-storages/state", nil},
		{"PUT", beta1 + "/state-storages/state", api.StateStorageInput{Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: "x"}}},
		{"DELETE", beta1 + "/state-storages/state", nil},
		{"POST", beta1 + "/deployments", api.DeploymentInput{RunnerID: "r1", Operation: api.OperationDestroy, StateKey: "k", Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}}}},
		{"GET", beta1 + "/deployments", nil},
		{"GET", beta1 + "/deployments/" + dep.ID, nil},
		{"GET", beta1 + "/deployments/" + dep.ID + "/logs", nil},
		{"GET", beta1 + "/deployments/" + dep.ID + "/outputs", nil},
		{"GET", beta1 + "/deployments/" + dep.ID + "/events", nil},
		{"POST", beta1 + "/deployments/" + dep.ID + "/cancel", nil},
		{"GET", beta1 + "/schedules", nil},
		{"POST", beta1 + "/schedules", api.ScheduleInput{ID: "mine", RunnerID: "r1", Cron: "@daily", StateKey: "k", Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}}}},
		{"GET", beta1 + "/schedules/nightly", nil},
		{"PUT", beta1 + "/schedules/nightly", api.ScheduleInput{RunnerID: "r1", Cron: "@hourly", StateKey: "k", Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}}}},
		{"DELETE", beta1 + "/schedules/nightly", nil},
		{"GET", beta1 + "/tokens", nil},
		{"POST", beta1 + "/tokens", api.OrgTokenInput{Name: "mine-now"}},
		{"DELETE", beta1 + "/tokens/" + beta.ID, nil},
	}
	otherOrgBefore := authFailures(h, store.AuthReasonOtherOrg)
	var first []byte
	for _, at := range attempts {
		r := h.as(acme.Token, at.method, at.path, at.body)
		if r.code != http.StatusNotFound {
			t.Errorf("acme's token on %s %s: HTTP %d %s, want 404", at.method, at.path, r.code, r.body)
			continue
		}
		e := r.err(t)
		if e.Code != api.CodeNotFound || strings.Contains(e.Message, "beta") || strings.Contains(e.Message, dep.ID) {
			t.Errorf("%s %s: %+v must be not_found and name nothing of beta", at.method, at.path, e)
		}
		if first == nil {
			first = r.body
			t.Logf("what acme's token gets on beta's objects: HTTP %d %s", r.code, r.body)
		} else if !bytes.Equal(r.body, first) {
			t.Errorf("%s %s answers %s, unlike the other attempts (%s): the answer must not depend on what exists", at.method, at.path, r.body, first)
		}
	}
	// An object that does not exist, in beta or in an organisation that does not exist, gets the
	// very same answer.
	for _, p := range []string{beta1 + "/runners/nope", beta1 + "/deployments/dep-nope/logs", orgPath("no-such-org") + "/runners/r1"} {
		if r := h.as(acme.Token, "GET", p, nil); r.code != http.StatusNotFound || !bytes.Equal(r.body, first) {
			t.Errorf("GET %s: HTTP %d %s; want the same 404 as for existing objects", p, r.code, r.body)
		}
	}
	if got := authFailures(h, store.AuthReasonOtherOrg) - otherOrgBefore; got != float64(len(attempts)+3) {
		t.Errorf("auth_failures_total{reason=other_org} grew by %v, want %d", got, len(attempts)+3)
	}
	if after := everythingIn(h, "beta"); after != before {
		t.Fatalf("acme's token changed beta:\nbefore %s\nafter  %s", before, after)
	}
	if r := h.as(beta.Token, "GET", beta1+"/deployments/"+dep.ID, nil); r.code != http.StatusOK {
		t.Fatalf("beta's own token on beta: HTTP %d %s", r.code, r.body)
	}

	// acme's token works on acme, as the bootstrap token does, but cannot manage tokens.
	if r := h.as(acme.Token, "POST", orgPath("acme")+"/deployments", api.DeploymentInput{
		RunnerID: "r1", Operation: api.OperationPlan, StateKey: "k", Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}},
	}); r.code != http.StatusCreated {
		t.Fatalf("acme's token on acme: HTTP %d %s", r.code, r.body)
	}
	for _, at := range []struct{ method, path string }{{"GET", orgPath("acme") + "/tokens"}, {"DELETE", orgPath("acme") + "/tokens/" + acme.ID}} {
		r := h.as(acme.Token, at.method, at.path, nil)
		if r.code != http.StatusForbidden || !strings.Contains(r.err(t).Message, "bootstrap admin token") {
			t.Fatalf("acme's token on %s %s: HTTP %d %s, want 403", at.method, at.path, r.code, r.body)
		}
	}
}

func mustPEM(t *testing.T) string {
	t.Helper()
	p, _ := newKey(t)
	return p
}

// TestOrgTokenLifecycle creates, lists, uses and revokes tokens, and shows that the database
// never holds one (cmd/outpost-orchestrator's TestTokenCommands shows the log does not either).
func TestOrgTokenLifecycle(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ci := h.orgToken("acme", "ci")
	if !strings.HasPrefix(ci.Token, api.OrgTokenPrefix) || len(ci.Token) < 40 || !strings.HasPrefix(ci.ID, "tok-") || ci.Name != "ci" || ci.CreatedAt.IsZero() {
		t.Fatalf("created token %+v", ci)
	}
	h.clock.Advance(1)
	prod := h.orgToken("acme", "terraform-prod")
	r := h.admin(http.MethodPost, orgPath("acme")+"/tokens", api.OrgTokenInput{Name: "ci"})
	if r.code != http.StatusConflict || !strings.Contains(r.err(t).Message, ci.ID) {
		t.Fatalf("duplicate name: HTTP %d %s", r.code, r.body)
	}
	if r := h.admin(http.MethodPost, orgPath("acme")+"/tokens", api.OrgTokenInput{Name: "has space"}); r.code != http.StatusBadRequest || r.err(t).Field != "name" {
		t.Fatalf("bad name: HTTP %d %s", r.code, r.body)
	}
	var list api.List[api.OrgToken]
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/tokens", nil, http.StatusOK, &list)
	if len(list.Items) != 2 || list.Items[0].ID != ci.ID || list.Items[1].ID != prod.ID {
		t.Fatalf("list %+v, want ci then terraform-prod", list.Items)
	}
	raw := h.admin(http.MethodGet, orgPath("acme")+"/tokens", nil)
	if bytes.Contains(raw.body, []byte(ci.Token)) || bytes.Contains(raw.body, []byte(api.OrgTokenPrefix)) {
		t.Fatalf("the list shows a token: %s", raw.body)
	}
	if r := h.admin(http.MethodGet, orgPath("beta")+"/tokens", nil); r.code != http.StatusNotFound || r.err(t).Code != api.CodeOrgNotFound {
		t.Fatalf("tokens of beta, never created: HTTP %d %s, want 404 org_not_found", r.code, r.body)
	}

	if r := h.as(ci.Token, "GET", orgPath("acme")+"/runners", nil); r.code != http.StatusOK {
		t.Fatalf("ci token: HTTP %d %s", r.code, r.body)
	}
	h.restart()
	if r := h.as(ci.Token, "GET", orgPath("acme")+"/runners", nil); r.code != http.StatusOK {
		t.Fatalf("ci token after a restart: HTTP %d %s", r.code, r.body)
	}
	h.mustAdmin(http.MethodDelete, orgPath("acme")+"/tokens/"+ci.ID, nil, http.StatusNoContent, nil)
	before := authFailures(h, store.AuthReasonOrgToken)
	r = h.as(ci.Token, "GET", orgPath("acme")+"/runners", nil)
	if r.code != http.StatusUnauthorized || !strings.Contains(r.err(t).Message, "revoked") {
		t.Fatalf("revoked token: HTTP %d %s", r.code, r.body)
	}
	if got := authFailures(h, store.AuthReasonOrgToken) - before; got != 1 {
		t.Fatalf("org_token failures grew by %v, want 1", got)
	}
	if r := h.as(prod.Token, "GET", orgPath("acme")+"/runners", nil); r.code != http.StatusOK {
		t.Fatalf("the other token after a revoke: HTTP %d %s", r.code, r.body)
	}
	if r := h.admin(http.MethodDelete, orgPath("acme")+"/tokens/"+ci.ID, nil); r.code != http.StatusNotFound {
		t.Fatalf("second revoke: HTTP %d", r.code)
	}

	db := storedBytes(h)
	for _, tok := range []string{ci.Token, prod.Token} {
		if bytes.Contains(db, []byte(tok)) {
			t.Fatalf("token %.8s… is in the database", tok)
		}
	}
}
