package orchestrator

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/bolt"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/engines"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/storetest"
)

// externalURL is the base URL agent tokens are bound to in these tests; requests go to the
// httptest port, so a restart on another port does not change what tokens name.
const externalURL = "http://orchestrator.test:8700"

// harness is a real server over real HTTP with a controllable clock and no background sweeper.
type harness struct {
	t     testing.TB
	cfg   testConfig
	eng   store.Engine // the engine the server runs on now
	clock *storetest.Clock
	srv   *Server
	hs    *httptest.Server
	token string
}

// testConfig is a harness's server configuration and the database its engine opens (again on
// every restart).
type testConfig struct {
	Config
	DatabaseURL string
	// WrapEngine, when set, stands between the server and the engine it opens (to count what
	// the server asks of the store).
	WrapEngine func(store.Engine) store.Engine
}

func newHarness(t testing.TB, adjust ...func(*testConfig)) *harness {
	t.Helper()
	clock := storetest.NewClock()
	cfg := testConfig{Config: Config{
		DataDir:       t.TempDir(),
		AdminToken:    "admin-token-for-tests-0123456789",
		ExternalURL:   externalURL,
		Now:           clock.Now,
		SweepInterval: -1,
	}, DatabaseURL: testDatabaseURL(t)}
	for _, a := range adjust {
		a(&cfg)
	}
	h := &harness{t: t, cfg: cfg, clock: clock, token: cfg.AdminToken}
	h.open()
	t.Cleanup(h.close)
	return h
}

func (h *harness) open() {
	h.t.Helper()
	eng, err := engines.Open(h.t.Context(), engines.Options{DataDir: h.cfg.DataDir, DatabaseURL: h.cfg.DatabaseURL, Logger: h.cfg.Logger})
	if err != nil {
		h.t.Fatal(err)
	}
	if h.cfg.WrapEngine != nil {
		eng = h.cfg.WrapEngine(eng)
	}
	cfg := h.cfg.Config
	cfg.Engine = eng
	srv, err := New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.srv, h.eng = srv, eng
	h.hs = httptest.NewServer(srv.Handler())
}

func (h *harness) close() {
	if h.srv == nil {
		return
	}
	// Close first: it answers waiting long polls, then the HTTP server waits for their answers
	// to be written.
	if err := h.srv.Close(); err != nil {
		h.t.Errorf("close: %v", err)
	}
	h.hs.Close()
	h.srv = nil
}

func (h *harness) restart() {
	h.t.Helper()
	h.close()
	h.open()
}

func (h *harness) sweep() {
	h.t.Helper()
	if err := h.srv.Sweep(h.t.Context()); err != nil {
		h.t.Fatal(err)
	}
}

type response struct {
	code int
	body []byte
	hdr  http.Header
}

func (r response) err(t testing.TB) api.ErrorDetail {
	t.Helper()
	var eb api.ErrorBody
	if err := json.Unmarshal(r.body, &eb); err != nil || eb.Error.Message == "" {
		t.Fatalf("HTTP %d body %q is not an error body", r.code, r.body)
	}
	return eb.Error
}

func (r response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode HTTP %d body %q: %v", r.code, r.body, err)
	}
}

func (h *harness) raw(method, path string, hdr map[string]string, body []byte) response {
	h.t.Helper()
	r, err := h.send(method, path, hdr, body)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// send is raw without failing the test, for goroutines other than the test's own.
func (h *harness) send(method, path string, hdr map[string]string, body []byte) (response, error) {
	req, err := http.NewRequestWithContext(h.t.Context(), method, h.hs.URL+path, bytes.NewReader(body))
	if err != nil {
		return response{}, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.hs.Client().Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, body: data, hdr: resp.Header}, err
}

func jsonBytes(t testing.TB, v any) []byte {
	t.Helper()
	if b, ok := v.([]byte); ok {
		return b
	}
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// admin sends an admin request; body is marshalled unless it is already []byte.
func (h *harness) admin(method, path string, body any) response {
	h.t.Helper()
	hdr := map[string]string{"Authorization": "Bearer " + h.token}
	b := jsonBytes(h.t, body)
	if b != nil {
		hdr["Content-Type"] = "application/json"
	}
	return h.raw(method, path, hdr, b)
}

// mustAdmin sends an admin request, requires the status and decodes the answer into out.
func (h *harness) mustAdmin(method, path string, body any, want int, out any) {
	h.t.Helper()
	r := h.admin(method, path, body)
	if r.code != want {
		h.t.Fatalf("%s %s: HTTP %d %s, want %d", method, path, r.code, r.body, want)
	}
	if out != nil {
		r.decode(h.t, out)
	}
}

type agent struct {
	h      *harness
	org    string
	runner string
	key    ed25519.PrivateKey
	signer *agentauth.Signer
}

func (h *harness) agentFor(org, runner string, key ed25519.PrivateKey) *agent {
	s := agentauth.NewSigner(org, runner, key)
	s.Now = h.clock.Now
	return &agent{h: h, org: org, runner: runner, key: key, signer: s}
}

// token signs a POST to path (relative to externalURL).
func (a *agent) token(path string, body []byte) string {
	a.h.t.Helper()
	tok, err := a.signer.Sign(http.MethodPost, externalURL+path, body)
	if err != nil {
		a.h.t.Fatal(err)
	}
	return "Outpost-Agent " + tok
}

// post sends a signed POST (every agent route is a POST).
func (a *agent) post(path string, body any) response {
	a.h.t.Helper()
	b := jsonBytes(a.h.t, body)
	return a.h.raw(http.MethodPost, path, map[string]string{"Authorization": a.token(path, b), "Content-Type": "application/json"}, b)
}

// goPost sends a signed POST from another goroutine: it never fails the test itself, the
// caller checks the error it delivers.
func (a *agent) goPost(path string, body any) <-chan result {
	b := jsonBytes(a.h.t, body)
	tok := a.token(path, b)
	out := make(chan result, 1)
	go func() {
		start := time.Now()
		r, err := a.h.send(http.MethodPost, path, map[string]string{"Authorization": tok, "Content-Type": "application/json"}, b)
		out <- result{r, err, time.Since(start)}
	}()
	return out
}

type result struct {
	response
	err  error
	took time.Duration
}

// mustOK sends a signed POST, requires a 200 and decodes the answer into out.
func (a *agent) mustOK(path string, body any, out any) {
	a.h.t.Helper()
	r := a.post(path, body)
	if r.code != http.StatusOK {
		a.h.t.Fatalf("agent POST %s: HTTP %d %s, want 200", path, r.code, r.body)
	}
	if out != nil {
		r.decode(a.h.t, out)
	}
}

func (a *agent) poll(req api.PollRequest) api.PollResponse {
	a.h.t.Helper()
	var out api.PollResponse
	a.mustOK("/api/v1/agent/poll", req, &out)
	return out
}

func (a *agent) claim(deploymentID string, attempt int, instance string) api.Claim {
	a.h.t.Helper()
	var out api.Claim
	a.mustOK("/api/v1/agent/deployments/"+deploymentID+"/claim", api.ClaimRequest{Attempt: attempt, Instance: instance}, &out)
	return out
}

func (a *agent) event(deploymentID string, ev api.EventRequest) response {
	a.h.t.Helper()
	return a.post("/api/v1/agent/deployments/"+deploymentID+"/events", ev)
}

func (h *harness) job(token, method, path, contentType string, body []byte) response {
	h.t.Helper()
	hdr := map[string]string{"Authorization": "Bearer " + token}
	if contentType != "" {
		hdr["Content-Type"] = contentType
	}
	return h.raw(method, path, hdr, body)
}

func (h *harness) appendLog(token string, offset int64, data string) response {
	h.t.Helper()
	return h.job(token, http.MethodPost, "/api/v1/job/logs?offset="+strconv.FormatInt(offset, 10), "application/octet-stream", []byte(data))
}

func newKey(t testing.TB) (pemStr string, priv ed25519.PrivateKey) {
	t.Helper()
	pub, p, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	s, err := keys.EncodePublicPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

func orgPath(org string) string { return "/api/v1/orgs/" + org }

// setupRunner registers a kubernetes state storage "state" (once per org) and a runner with a
// fresh key, and returns an agent signing for it.
func (h *harness) setupRunner(org, runner string, maxConcurrency int) *agent {
	h.t.Helper()
	if r := h.admin(http.MethodGet, orgPath(org)+"/state-storages/state", nil); r.code == http.StatusNotFound {
		h.mustAdmin(http.MethodPost, orgPath(org)+"/state-storages", api.StateStorageInput{
			ID: "state", Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: "outpost-state"},
		}, http.StatusCreated, nil)
	}
	pemStr, priv := newKey(h.t)
	h.mustAdmin(http.MethodPost, orgPath(org)+"/runners", api.RunnerInput{
		ID: runner, PublicKeys: []string{pemStr}, StateStorageID: "state", MaxConcurrency: maxConcurrency,
		Job: api.RunnerJob{Namespace: "outpost-jobs", ServiceAccount: "outpost-job"},
	}, http.StatusCreated, nil)
	return h.agentFor(org, runner, priv)
}

// gzipMagic is the smallest body that passes the inline source check.
var gzipMagic = []byte{0x1f, 0x8b, 0x08, 0x00}

// deploy queues a deployment with an inline source on runner r1 of acme.
func (h *harness) deploy(op api.Operation) api.Deployment {
	const runner = "r1"
	h.t.Helper()
	var d api.Deployment
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/deployments", api.DeploymentInput{
		RunnerID: runner, Operation: op, StateKey: "stacks/" + runner,
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}},
	}, http.StatusCreated, &d)
	return d
}

// deployment reads a deployment of acme.
func (h *harness) deployment(id string) api.Deployment {
	h.t.Helper()
	var d api.Deployment
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments/"+id, nil, http.StatusOK, &d)
	return d
}

// metric reads one sample from /metrics, e.g. metric(`outpost_orchestrator_auth_failures_total{reason="expired"}`).
func (h *harness) metric(series string) float64 {
	h.t.Helper()
	r := h.raw(http.MethodGet, "/metrics", nil, nil)
	if r.code != http.StatusOK {
		h.t.Fatalf("/metrics: HTTP %d", r.code)
	}
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				h.t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}

func authFailures(h *harness, reason string) float64 {
	return h.metric(`outpost_orchestrator_auth_failures_total{reason="` + reason + `"}`)
}

// boltDB is the bbolt database of a harness.
func boltDB(h *harness) *bbolt.DB {
	h.t.Helper()
	e, ok := h.eng.(*bolt.Engine)
	if !ok {
		h.t.Fatal("the test looks at bbolt's own layout; give it a harness on bbolt (onBolt)")
	}
	return e.DB
}

// onBolt keeps a harness on bbolt in the PostgreSQL run too, for tests of bbolt's own layout.
func onBolt(c *testConfig) { c.DatabaseURL = "" }
