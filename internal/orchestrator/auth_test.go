package orchestrator

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

const pollPath = "/api/v1/agent/poll"

func TestAgentAuthRefusalsAre401AndCounted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 2)
	b := h.setupRunner("acme", "r2", 2)
	body := jsonBytes(t, api.PollRequest{AgentVersion: "v1", CapacityFree: 1})
	signWith := func(s *agentauth.Signer, method, url string, payload []byte) string {
		tok, err := s.Sign(method, url, payload)
		if err != nil {
			t.Fatal(err)
		}
		return "Outpost-Agent " + tok
	}
	send := func(auth string, payload []byte) response {
		hdr := map[string]string{"Content-Type": "application/json"}
		if auth != "" {
			hdr["Authorization"] = auth
		}
		return h.raw(http.MethodPost, pollPath, hdr, payload)
	}

	cases := []struct {
		name   string
		reason agentauth.Reason
		send   func() response
	}{
		{"expired token", agentauth.ReasonExpired, func() response {
			old := agentauth.NewSigner("acme", "r1", a.key)
			old.Now = func() time.Time { return h.clock.Now().Add(-3 * time.Minute) }
			return send(signWith(old, "POST", externalURL+pollPath, body), body)
		}},
		{"signed by another runner's key", agentauth.ReasonUnknownKey, func() response {
			forged := agentauth.NewSigner("acme", "r1", b.key)
			forged.Now = h.clock.Now
			return send(signWith(forged, "POST", externalURL+pollPath, body), body)
		}},
		{"tampered body", agentauth.ReasonBody, func() response {
			return send(a.token(pollPath, body), jsonBytes(t, api.PollRequest{AgentVersion: "v1", CapacityFree: 50}))
		}},
		{"token for another endpoint", agentauth.ReasonURL, func() response {
			return send(a.token("/api/v1/agent/deployments/dep-other/claim", body), body)
		}},
		{"token for another host", agentauth.ReasonURL, func() response {
			return send(signWith(a.signer, "POST", "http://evil.test:8700"+pollPath, body), body)
		}},
		{"no Authorization header", agentauth.ReasonMissing, func() response { return send("", body) }},
		{"garbage token", agentauth.ReasonMalformed, func() response { return send("Outpost-Agent not.a.jwt", body) }},
		{"admin token on the agent API", agentauth.ReasonMalformed, func() response { return send("Bearer "+h.token, body) }},
	}
	for _, tc := range cases {
		before := authFailures(h, string(tc.reason))
		r := tc.send()
		if r.code != http.StatusUnauthorized {
			t.Fatalf("%s: HTTP %d %s, want 401", tc.name, r.code, r.body)
		}
		// An unknown key has a code of its own, so an agent holding another key tries it.
		wantCode := api.CodeUnauthorized
		if tc.reason == agentauth.ReasonUnknownKey {
			wantCode = api.CodeUnknownKey
		}
		if e := r.err(t); e.Code != wantCode || !strings.Contains(e.Message, string(tc.reason)) {
			t.Fatalf("%s: error %+v must have code %s and name the reason %q", tc.name, e, wantCode, tc.reason)
		}
		if got := authFailures(h, string(tc.reason)) - before; got != 1 {
			t.Fatalf("%s: auth_failures_total{reason=%q} grew by %v, want 1", tc.name, tc.reason, got)
		}
	}
	// None of the refused requests counted as the agent being seen.
	var r api.Runner
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/runners/r1", nil, http.StatusOK, &r)
	if r.Status.LastSeenAt != nil || r.Status.Connected {
		t.Fatalf("refused requests changed the runner's status: %+v", r.Status)
	}

	// A valid token works once; the same token again is a replay.
	tok := a.token(pollPath, body)
	if r := send(tok, body); r.code != http.StatusOK {
		t.Fatalf("valid token: HTTP %d %s", r.code, r.body)
	}
	before := authFailures(h, string(agentauth.ReasonReplayed))
	if r := send(tok, body); r.code != http.StatusUnauthorized || !strings.Contains(r.err(t).Message, "replayed") {
		t.Fatalf("replay: HTTP %d %s", r.code, r.body)
	}
	if got := authFailures(h, string(agentauth.ReasonReplayed)) - before; got != 1 {
		t.Fatalf("replayed failures grew by %v, want 1", got)
	}
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/runners/r1", nil, http.StatusOK, &r)
	if !r.Status.Connected || r.Status.AgentVersion != "v1" || r.Status.KeyFingerprint != a.signer.Fingerprint() || r.Status.LastSeenAt == nil {
		t.Fatalf("after a good poll the runner status is %+v", r.Status)
	}
	// Connected lapses after a minute without requests.
	h.clock.Advance(ConnectedWindow + time.Second)
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/runners/r1", nil, http.StatusOK, &r)
	if r.Status.Connected {
		t.Fatal("runner still connected a minute after its last request")
	}
}

func TestAgentURLDerivedFromHost(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *testConfig) { c.ExternalURL = "" })
	a := h.setupRunner("acme", "r1", 1)
	body := jsonBytes(t, api.PollRequest{CapacityFree: 1})
	tok, err := a.signer.Sign("POST", h.hs.URL+pollPath, body)
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{"Authorization": "Outpost-Agent " + tok, "Content-Type": "application/json"}
	if r := h.raw(http.MethodPost, pollPath, hdr, body); r.code != http.StatusOK {
		t.Fatalf("token for the Host the agent addressed: HTTP %d %s", r.code, r.body)
	}
	hdr["Authorization"] = a.token(pollPath, body) // names externalURL, not this host
	if r := h.raw(http.MethodPost, pollPath, hdr, body); r.code != http.StatusUnauthorized {
		t.Fatalf("token for another host: HTTP %d, want 401", r.code)
	}
}

func TestJobTokenRefusals(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	d := h.deploy(api.OperationApply)
	c := a.claim(d.ID, 1, "pod-a")
	if !strings.HasPrefix(c.JobToken, api.JobTokenPrefix) {
		t.Fatalf("job token %q lacks the %s prefix", c.JobToken, api.JobTokenPrefix)
	}

	var spec api.JobSpec
	r := h.job(c.JobToken, http.MethodGet, "/api/v1/job/spec", "", nil)
	if r.code != http.StatusOK {
		t.Fatalf("spec: HTTP %d %s", r.code, r.body)
	}
	r.decode(t, &spec)
	if spec.DeploymentID != d.ID || spec.Attempt != 1 || spec.StateStorage.Kubernetes == nil ||
		spec.Source.Inline == nil || spec.StateKey != "stacks/r1" {
		t.Fatalf("spec %+v", spec)
	}
	if p := c.Placement; p.Job.Namespace != "outpost-jobs" || p.TimeoutSeconds != api.DefaultJobTimeoutSeconds ||
		p.StateKey != "stacks/r1" || p.StateStorage.Kubernetes == nil {
		t.Fatalf("placement %+v", p)
	}

	tampered := c.JobToken[:len(c.JobToken)-2] + "AA"
	if tampered == c.JobToken {
		tampered = c.JobToken[:len(c.JobToken)-2] + "BB"
	}
	for _, tok := range []string{"opj_garbage", tampered, h.token, ""} {
		before := authFailures(h, store.AuthReasonJobToken)
		r := h.job(tok, http.MethodGet, "/api/v1/job/spec", "", nil)
		if r.code != http.StatusUnauthorized {
			t.Fatalf("token %.12q…: HTTP %d, want 401", tok, r.code)
		}
		if got := authFailures(h, store.AuthReasonJobToken) - before; got != 1 {
			t.Fatalf("job_token failures grew by %v, want 1", got)
		}
	}
	// A job token is no admin token.
	if r := h.raw(http.MethodGet, orgPath("acme")+"/runners", map[string]string{"Authorization": "Bearer " + c.JobToken}, nil); r.code != http.StatusUnauthorized {
		t.Fatalf("job token on the admin API: HTTP %d", r.code)
	}

	// After the end the token works for the grace period, then no more.
	a.mustOK("/api/v1/agent/deployments/"+d.ID+"/events", api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventFinished, Result: api.StatusSucceeded}}, nil)
	h.clock.Advance(DefaultJobTokenGrace - time.Minute)
	if r := h.appendLog(c.JobToken, 0, "late line\n"); r.code != http.StatusOK {
		t.Fatalf("log within the grace period: HTTP %d %s", r.code, r.body)
	}
	h.clock.Advance(2 * time.Minute)
	before := authFailures(h, store.AuthReasonJobTokenExpired)
	r = h.appendLog(c.JobToken, 10, "later line\n")
	if r.code != http.StatusUnauthorized || !strings.Contains(r.err(t).Message, "expired") {
		t.Fatalf("log after the grace period: HTTP %d %s", r.code, r.body)
	}
	if got := authFailures(h, store.AuthReasonJobTokenExpired) - before; got != 1 {
		t.Fatalf("job_token_expired failures grew by %v, want 1", got)
	}
	if d := h.deployment(d.ID); d.LogSize != int64(len("late line\n")) {
		t.Fatalf("log size %d after a refused append", d.LogSize)
	}
}

func TestAgentBadInputIsRefusedWithField(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 2)
	d := h.deploy(api.OperationApply)
	c := a.claim(d.ID, 1, "pod-a")
	before := everything(h)
	claimPath := "/api/v1/agent/deployments/" + d.ID + "/claim"
	cases := []struct {
		name, path, body, contentType string
		wantCode                      int
		wantField                     string
	}{
		{"unknown poll field", pollPath, `{"capacity":1}`, "", 400, "capacity"},
		{"unknown field in a held entry", pollPath, `{"held":[{"deployment_id":"` + d.ID + `","attempt":1,"fencing":1,"phase":"x"}]}`, "", 400, "held[0].phase"},
		{"invalid held deployment id", pollPath, `{"held":[{"deployment_id":"Not An Id","attempt":1,"fencing":1}]}`, "", 400, "held[0].deployment_id"},
		{"negative capacity", pollPath, `{"capacity_free":-1}`, "", 400, "capacity_free"},
		{"claim attempt as string", claimPath, `{"attempt":"1","instance":"pod-b"}`, "", 400, "attempt"},
		{"claim of an invalid id", "/api/v1/agent/deployments/NOPE/claim", `{"attempt":1,"instance":"pod-b"}`, "", 400, "id"},
		{"event without type", "/api/v1/agent/deployments/" + d.ID + "/events", `{"attempt":1,"fencing":1,"seq":1}`, "", 400, "type"},
		{"poll as text", pollPath, `{}`, "text/plain", 415, ""},
		{"oversize event", "/api/v1/agent/deployments/" + d.ID + "/events", `{"message":"` + strings.Repeat("x", limitDefault) + `"}`, "", 413, ""},
	}
	for _, tc := range cases {
		ct := "application/json"
		if tc.contentType != "" {
			ct = tc.contentType
		}
		body := []byte(tc.body)
		r := h.raw(http.MethodPost, tc.path, map[string]string{"Authorization": a.token(tc.path, body), "Content-Type": ct}, body)
		if r.code != tc.wantCode || r.err(t).Field != tc.wantField {
			t.Errorf("%s: HTTP %d %s; want %d with field %q", tc.name, r.code, r.body, tc.wantCode, tc.wantField)
		}
	}
	if after := everything(h); after != before {
		t.Fatalf("refused agent requests changed stored state:\nbefore %s\nafter  %s", before, after)
	}
	if got := h.deployment(d.ID); got.Status != api.StatusClaimed || got.Attempt != 1 || c.Lease.Fencing != 1 {
		t.Fatalf("deployment after refused requests: %+v", got)
	}
}

// TestTamperedAgentBodyBurnsNoTokenID: a copy of the agent's token sent ahead with another body
// is refused on the body hash before its id is reserved, so the agent's own request with that
// token still passes, once.
func TestTamperedAgentBodyBurnsNoTokenID(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	body := jsonBytes(t, api.PollRequest{CapacityFree: 1})
	tok := a.token(pollPath, body)
	send := func(b []byte) response {
		return h.raw(http.MethodPost, pollPath, map[string]string{"Authorization": tok, "Content-Type": "application/json"}, b)
	}
	if r := send(jsonBytes(t, api.PollRequest{CapacityFree: 50})); r.code != http.StatusUnauthorized || !strings.Contains(r.err(t).Message, string(agentauth.ReasonBody)) {
		t.Fatalf("tampered body: HTTP %d %s", r.code, r.body)
	}
	if r := send(body); r.code != http.StatusOK {
		t.Fatalf("the genuine request after a tampered copy: HTTP %d %s", r.code, r.body)
	}
	if r := send(body); r.code != http.StatusUnauthorized || !strings.Contains(r.err(t).Message, string(agentauth.ReasonReplayed)) {
		t.Fatalf("the genuine request again: HTTP %d %s, want replayed", r.code, r.body)
	}
}

// TestAClaimSpendsItsTokenIDEvenWhenRefused: a claim reserves its agent token's id in its own
// transaction (one commit, not two), and keeps it reserved when it refuses the claim: a claim
// refused because the runner was at its max_concurrency, replayed once a slot is free, would
// otherwise succeed and hand its job token to whoever replayed it. A successful claim replayed is
// refused too, and counted as a replay.
func TestAClaimSpendsItsTokenIDEvenWhenRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	first, second := h.deploy(api.OperationPlan), h.deploy(api.OperationPlan)
	signed := func(id string) (map[string]string, []byte, string) {
		path := "/api/v1/agent/deployments/" + id + "/claim"
		body := jsonBytes(t, api.ClaimRequest{Attempt: 1, Instance: "pod-a"})
		return map[string]string{"Authorization": a.token(path, body), "Content-Type": "application/json"}, body, path
	}
	hdr1, body1, path1 := signed(first.ID)
	if r := h.raw(http.MethodPost, path1, hdr1, body1); r.code != http.StatusOK {
		t.Fatalf("claim of the first: HTTP %d %s", r.code, r.body)
	}
	before := authFailures(h, string(agentauth.ReasonReplayed))
	if r := h.raw(http.MethodPost, path1, hdr1, body1); r.code != http.StatusUnauthorized || !strings.Contains(r.err(t).Message, "replayed") {
		t.Fatalf("the same claim request again: HTTP %d %s, want 401 replayed", r.code, r.body)
	}
	if got := authFailures(h, string(agentauth.ReasonReplayed)) - before; got != 1 {
		t.Fatalf("replayed failures grew by %v, want 1", got)
	}

	hdr2, body2, path2 := signed(second.ID)
	if r := h.raw(http.MethodPost, path2, hdr2, body2); r.code != http.StatusConflict {
		t.Fatalf("claim of the second at max_concurrency: HTTP %d %s, want 409", r.code, r.body)
	}
	fencing := h.deployment(first.ID).Attempt // attempt 1, fencing 1: the only claim so far
	a.mustOK(eventPath(first.ID), api.EventRequest{Fencing: int64(fencing), Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventFinished, Result: api.StatusSucceeded}}, nil)
	if r := h.raw(http.MethodPost, path2, hdr2, body2); r.code != http.StatusUnauthorized || !strings.Contains(r.err(t).Message, "replayed") {
		t.Fatalf("the refused claim replayed once a slot is free: HTTP %d %s, want 401 replayed", r.code, r.body)
	}
	if d := h.deployment(second.ID); d.Status != api.StatusQueued {
		t.Fatalf("the second deployment after the replay: %s, want still queued", d.Status)
	}
}
