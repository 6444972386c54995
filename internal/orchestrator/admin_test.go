package orchestrator

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

func TestRunnerAndStorageCRUD(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	base := orgPath("acme")
	var st api.StateStorage
	h.mustAdmin(http.MethodPost, base+"/state-storages", api.StateStorageInput{
		ID: "s3-main", Type: api.StateStorageS3, S3: &api.S3StateSpec{Bucket: "tf-state", Region: "eu-west-1"},
	}, http.StatusCreated, &st)
	if st.ID != "s3-main" || st.S3 == nil || st.S3.Bucket != "tf-state" || st.CreatedAt.IsZero() {
		t.Fatalf("created storage %+v", st)
	}
	pemStr, _ := newKey(t)
	in := api.RunnerInput{
		ID: "eks-prod", PublicKeys: []string{pemStr}, StateStorageID: "s3-main",
		Job: api.RunnerJob{Namespace: "jobs", ServiceAccount: "runner", PodTemplate: `{ "spec": {"containers": [ {"name": "main", "image": "x"} ] } }`},
	}
	var r api.Runner
	h.mustAdmin(http.MethodPost, base+"/runners", in, http.StatusCreated, &r)
	if r.Type != api.RunnerTypeKubernetesAgent || r.MaxConcurrency != api.DefaultMaxConcurrency || r.JobTimeoutSeconds != api.DefaultJobTimeoutSeconds {
		t.Fatalf("defaults not applied: %+v", r)
	}
	if want := `{"spec":{"containers":[{"image":"x","name":"main"}]}}`; r.Job.PodTemplate != want {
		t.Fatalf("pod template %q, want normalized %q", r.Job.PodTemplate, want)
	}
	if r.Status.Connected || r.Status.LastSeenAt != nil {
		t.Fatalf("a runner no agent has contacted must not be connected: %+v", r.Status)
	}
	if code := h.admin(http.MethodPost, base+"/runners", in).code; code != http.StatusConflict {
		t.Fatalf("duplicate create: HTTP %d, want 409", code)
	}

	// A template with metadata only (the closed agents' documented example) is registered as
	// written; the agent adds the main container when it builds the Job.
	in.Description, in.MaxConcurrency = "production", 2
	in.Job.PodTemplate = `{"metadata": {"labels": {"app.kubernetes.io/name": "humanitec-runner"}}}`
	in.ID = ""
	h.mustAdmin(http.MethodPut, base+"/runners/eks-prod", in, http.StatusOK, &r)
	if r.Description != "production" || r.MaxConcurrency != 2 || r.ID != "eks-prod" ||
		r.Job.PodTemplate != `{"metadata":{"labels":{"app.kubernetes.io/name":"humanitec-runner"}}}` {
		t.Fatalf("update: %+v", r)
	}
	var list api.List[api.Runner]
	h.mustAdmin(http.MethodGet, base+"/runners", nil, http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0].Description != "production" {
		t.Fatalf("list %+v", list)
	}
	// Another organisation sees nothing of acme: one in which nothing was created does not
	// exist (not an empty list, which a mistyped name would show), and one that exists lists
	// only its own.
	for _, path := range []string{"/runners", "/runners/eks-prod", "/state-storages", "/deployments"} {
		if r := h.admin(http.MethodGet, orgPath("other")+path, nil); r.code != http.StatusNotFound || r.err(t).Code != api.CodeOrgNotFound ||
			!strings.Contains(r.err(t).Message, `no such organisation "other"`) {
			t.Fatalf("GET %s of an organisation never created: HTTP %d %s, want 404 org_not_found", path, r.code, r.body)
		}
	}
	h.mustAdmin(http.MethodPost, orgPath("other")+"/state-storages", api.StateStorageInput{ID: "s", Type: api.StateStorageKubernetes,
		Kubernetes: &api.KubernetesStateSpec{Namespace: "x"}}, http.StatusCreated, nil)
	h.mustAdmin(http.MethodGet, orgPath("other")+"/runners", nil, http.StatusOK, &list)
	if len(list.Items) != 0 {
		t.Fatalf("org other sees %+v", list.Items)
	}
	if r := h.admin(http.MethodGet, orgPath("other")+"/runners/eks-prod", nil); r.code != http.StatusNotFound || r.err(t).Code != api.CodeNotFound {
		t.Fatalf("other org's GET: HTTP %d %s, want 404 not_found", r.code, r.body)
	}

	// A state storage in use cannot go; the message names the runner.
	resp := h.admin(http.MethodDelete, base+"/state-storages/s3-main", nil)
	if resp.code != http.StatusConflict || !strings.Contains(resp.err(t).Message, `"eks-prod"`) {
		t.Fatalf("delete storage in use: HTTP %d %s", resp.code, resp.body)
	}
	h.mustAdmin(http.MethodGet, base+"/state-storages/s3-main", nil, http.StatusOK, nil)

	h.mustAdmin(http.MethodDelete, base+"/runners/eks-prod", nil, http.StatusNoContent, nil)
	if code := h.admin(http.MethodGet, base+"/runners/eks-prod", nil).code; code != http.StatusNotFound {
		t.Fatalf("GET after delete: HTTP %d", code)
	}
	if code := h.admin(http.MethodDelete, base+"/runners/eks-prod", nil).code; code != http.StatusNotFound {
		t.Fatalf("second delete: HTTP %d", code)
	}
	h.mustAdmin(http.MethodDelete, base+"/state-storages/s3-main", nil, http.StatusNoContent, nil)
}

// snapshot is everything an admin can list in an organisation.
func snapshot(h *harness, org string) string {
	h.t.Helper()
	var out bytes.Buffer
	for _, p := range []string{"/runners", "/state-storages", "/deployments", "/schedules"} {
		r := h.admin(http.MethodGet, orgPath(org)+p, nil)
		if r.code != http.StatusOK {
			h.t.Fatalf("list %s: HTTP %d", p, r.code)
		}
		out.Write(r.body)
	}
	return out.String()
}

func TestBadInputIsRefusedWithFieldAndChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setupRunner("acme", "r1", 2)
	h.deploy(api.OperationPlan)
	before := snapshot(h, "acme")

	pemStr, priv := newKey(t)
	privPEM, err := keys.EncodePrivatePEM(priv)
	if err != nil {
		t.Fatal(err)
	}
	runner := func(mut func(m map[string]any)) []byte {
		m := map[string]any{
			"id": "r2", "public_keys": []string{pemStr}, "state_storage_id": "state",
			"job": map[string]any{"namespace": "jobs", "service_account": "sa"},
		}
		mut(m)
		return jsonBytes(t, m)
	}
	deployment := func(mut func(m map[string]any)) []byte {
		m := map[string]any{"runner_id": "r1", "operation": "plan", "state_key": "k",
			"source": map[string]any{"git": map[string]any{"url": "https://example.com/r.git"}}}
		mut(m)
		return jsonBytes(t, m)
	}
	job := func(m map[string]any) map[string]any { return m["job"].(map[string]any) } //nolint:forcetypeassert // built above

	cases := []struct {
		name        string
		method      string
		path        string
		body        []byte
		contentType string
		wantCode    int
		wantField   string
		wantMsg     string
	}{
		{"unknown field", "POST", "/runners", runner(func(m map[string]any) { m["max_concurency"] = 3 }), "", 400, "max_concurency", "unknown field"},
		{"unknown nested field", "POST", "/runners", runner(func(m map[string]any) { job(m)["namespaces"] = "x" }), "", 400, "job.namespaces", "unknown field"},
		{"wrong type", "POST", "/runners", runner(func(m map[string]any) { m["max_concurrency"] = "five" }), "", 400, "max_concurrency", "integer"},
		{"invalid id", "POST", "/runners", runner(func(m map[string]any) { m["id"] = "Bad_ID" }), "", 400, "id", "DNS-1123"},
		{"not PEM", "POST", "/runners", runner(func(m map[string]any) { m["public_keys"] = []string{"hello"} }), "", 400, "public_keys[0]", "PEM"},
		{"private key pasted", "POST", "/runners", runner(func(m map[string]any) { m["public_keys"] = []string{privPEM} }), "", 400, "public_keys[0]", "PRIVATE key"},
		{"pod template not JSON", "POST", "/runners", runner(func(m map[string]any) { job(m)["pod_template"] = "spec: {}" }), "", 400, "job.pod_template", "not valid JSON"},
		{"pod template sets main's args", "POST", "/runners", runner(func(m map[string]any) {
			job(m)["pod_template"] = `{"spec":{"containers":[{"name":"main","args":["-x"]}]}}`
		}), "", 400, "job.pod_template", `args of "main"`},
		{"state storage missing", "POST", "/runners", runner(func(m map[string]any) { m["state_storage_id"] = "nope" }), "", 400, "state_storage_id", "does not exist"},
		{"duplicate runner", "POST", "/runners", runner(func(m map[string]any) { m["id"] = "r1" }), "", 409, "", "already exists"},
		{"put id mismatch", "PUT", "/runners/r1", runner(func(map[string]any) {}), "", 400, "id", "does not match"},
		{"put unknown runner", "PUT", "/runners/r9", runner(func(m map[string]any) { m["id"] = "r9" }), "", 404, "", "does not exist"},
		{"syntax error", "POST", "/runners", []byte(`{"id": "r2",`), "", 400, "", "JSON"},
		{"two JSON values", "POST", "/runners", append(runner(func(map[string]any) {}), []byte(` {}`)...), "", 400, "", "more than one"},
		{"empty body", "POST", "/runners", nil, "application/json", 400, "", "required"},
		{"wrong content type", "POST", "/runners", runner(func(map[string]any) {}), "text/plain", 415, "", "application/json"},
		{"oversize body", "POST", "/runners", append([]byte(`{"description":"`), bytes.Repeat([]byte("x"), limitDefault)...), "", 413, "", "1 MiB"},
		{"invalid org", "GET", "/runners/r1", nil, "", 400, "org", "DNS-1123"},
		{"invalid path id", "GET", "/runners/R1", nil, "", 400, "id", "DNS-1123"},
		{"storage bad type", "POST", "/state-storages", []byte(`{"id":"x","type":"ftp"}`), "", 400, "type", "not a state storage type"},
		{"deployment unknown runner", "POST", "/deployments", deployment(func(m map[string]any) { m["runner_id"] = "ghost" }), "", 400, "runner_id", "does not exist"},
		{"deployment bad operation", "POST", "/deployments", deployment(func(m map[string]any) { m["operation"] = "import" }), "", 400, "operation", "not an operation"},
		{"deployment bad status filter", "GET", "/deployments?status=done", nil, "", 400, "status", "not a deployment status"},
		{"deployment oversize", "POST", "/deployments", append([]byte(`{"variables":{"x":"`), bytes.Repeat([]byte("x"), limitDeployment)...), "", 413, "", "16 MiB"},
		{"logs bad offset", "GET", "/deployments/dep-x/logs?offset=-1", nil, "", 400, "offset", "non-negative"},
		{"unknown deployment", "GET", "/deployments/dep-x", nil, "", 404, "", "does not exist"},
		{"cancel unknown deployment", "POST", "/deployments/dep-x/cancel", nil, "", 404, "", "does not exist"},
	}
	for _, tc := range cases {
		org := "acme"
		if tc.name == "invalid org" {
			org = "ACME"
		}
		hdr := map[string]string{"Authorization": "Bearer " + h.token, "Content-Type": "application/json"}
		if tc.contentType != "" {
			hdr["Content-Type"] = tc.contentType
		}
		if tc.body == nil && tc.contentType == "" {
			delete(hdr, "Content-Type")
		}
		r := h.raw(tc.method, orgPath(org)+tc.path, hdr, tc.body)
		if r.code != tc.wantCode {
			t.Errorf("%s: HTTP %d %s, want %d", tc.name, r.code, r.body, tc.wantCode)
			continue
		}
		e := r.err(t)
		t.Logf("%s: %d field=%q %s", tc.name, r.code, e.Field, e.Message)
		if e.Field != tc.wantField || !strings.Contains(e.Message, tc.wantMsg) {
			t.Errorf("%s: field %q message %q; want field %q and a message containing %q", tc.name, e.Field, e.Message, tc.wantField, tc.wantMsg)
		}
		if r.hdr.Get("X-Request-Id") == "" {
			t.Errorf("%s: no X-Request-Id", tc.name)
		}
		if after := snapshot(h, "acme"); after != before {
			t.Fatalf("%s changed stored state:\nbefore %s\nafter  %s", tc.name, before, after)
		}
	}
}

func TestAdminTokenRefusedAndCounted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	before := authFailures(h, store.AuthReasonAdminToken)
	for _, hdr := range []map[string]string{
		nil,
		{"Authorization": "Bearer wrong-token"},
		{"Authorization": "Basic " + h.token},
	} {
		hdr2 := map[string]string{"Content-Type": "application/json"}
		for k, v := range hdr {
			hdr2[k] = v
		}
		r := h.raw(http.MethodPost, orgPath("acme")+"/state-storages", hdr2,
			[]byte(`{"id":"s","type":"kubernetes","kubernetes":{"namespace":"x"}}`))
		if r.code != http.StatusUnauthorized || r.err(t).Code != api.CodeUnauthorized {
			t.Fatalf("headers %v: HTTP %d %s, want 401", hdr, r.code, r.body)
		}
	}
	if got := authFailures(h, store.AuthReasonAdminToken) - before; got != 3 {
		t.Fatalf("admin_token failures grew by %v, want 3", got)
	}
	// Nothing was stored: the organisation was not even created.
	if r := h.admin(http.MethodGet, orgPath("acme")+"/state-storages", nil); r.code != http.StatusNotFound || r.err(t).Code != api.CodeOrgNotFound {
		t.Fatalf("refused creates left something: HTTP %d %s", r.code, r.body)
	}
}

func TestUnknownRoutesPanicsAndRequestIDs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.srv.mux.Handle("GET /test/panic", h.srv.wrap(route{pattern: "GET /test/panic", h: func(http.ResponseWriter, *http.Request, *call) error {
		panic("boom")
	}}))
	r := h.raw(http.MethodGet, "/test/panic", map[string]string{"X-Request-Id": "req-123"}, nil)
	if r.code != http.StatusInternalServerError || r.hdr.Get("X-Request-Id") != "req-123" {
		t.Fatalf("panic: HTTP %d id %q", r.code, r.hdr.Get("X-Request-Id"))
	}
	if e := r.err(t); e.Code != api.CodeInternal || !strings.Contains(e.Message, "req-123") || strings.Contains(e.Message, "boom") {
		t.Fatalf("panic answer %+v must name the request id and not the panic", e)
	}
	r = h.raw(http.MethodGet, "/api/v1/nothing", nil, nil)
	if r.code != http.StatusNotFound || r.err(t).Code != api.CodeNotFound {
		t.Fatalf("unknown route: HTTP %d %s", r.code, r.body)
	}
	r = h.raw(http.MethodPatch, "/api/v1/orgs/acme/runners", nil, nil)
	if r.code != http.StatusMethodNotAllowed || !strings.Contains(r.hdr.Get("Allow"), "POST") {
		t.Fatalf("wrong method: HTTP %d Allow %q %s", r.code, r.hdr.Get("Allow"), r.body)
	}
	if r := h.raw(http.MethodGet, "/healthz", nil, nil); r.code != http.StatusOK {
		t.Fatalf("healthz: HTTP %d", r.code)
	}
	if got := h.metric(`outpost_orchestrator_requests_total{code="500",route="GET /test/panic"}`); got != 1 {
		t.Fatalf("requests_total for the panic = %v, want 1", got)
	}
}
