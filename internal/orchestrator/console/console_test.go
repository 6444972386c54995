package console_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// The console over HTTP, against a real orchestrator on loopback: sessions, CSRF, escaping, the
// organisation boundary, the sign-in limit and the log stream. The browser tests
// (tools/browsertest) drive the same pages in Chromium.

// fixture is an orchestrator with organisation acme (runner r1, one queued deployment) and
// organisation beta (its own runner and deployment), and a token of each.
type fixture struct {
	inst             *orchestratortest.Instance
	acme             *client.AdminClient
	acmeToken        string
	betaToken        string
	acmeDep, betaDep string
	key              ed25519.PrivateKey
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	inst := orchestratortest.Start(t)
	acme, key := inst.RegisterRunner(ctx, t)
	f := &fixture{inst: inst, acme: acme, key: key}
	boot, err := client.NewAdminClient(inst.URL, "acme", inst.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := boot.CreateToken(ctx, "console")
	if err != nil {
		t.Fatal(err)
	}
	f.acmeToken = tok.Token
	d, err := acme.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationApply, StateKey: "apps/web",
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": ""})}}})
	if err != nil {
		t.Fatal(err)
	}
	f.acmeDep = d.ID
	beta, err := client.NewAdminClient(inst.URL, "beta", inst.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := beta.CreateStateStorage(ctx, api.StateStorageInput{ID: "s", Type: api.StateStorageKubernetes,
		Kubernetes: &api.KubernetesStateSpec{Namespace: "states"}}); err != nil {
		t.Fatal(err)
	}
	r1, err := acme.GetRunner(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := beta.CreateRunner(ctx, api.RunnerInput{ID: "secret-runner", StateStorageID: "s", PublicKeys: r1.PublicKeys,
		Job: api.RunnerJob{Namespace: "jobs", ServiceAccount: "sa"}}); err != nil {
		t.Fatal(err)
	}
	bd, err := beta.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "secret-runner", Operation: api.OperationPlan, StateKey: "beta/key",
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": ""})}}})
	if err != nil {
		t.Fatal(err)
	}
	f.betaDep = bd.ID
	btok, err := beta.CreateToken(ctx, "beta-console")
	if err != nil {
		t.Fatal(err)
	}
	f.betaToken = btok.Token
	return f
}

// browser is a session's view of the console: its cookie and CSRF token.
type browser struct {
	t      *testing.T
	base   string
	cookie *http.Cookie
	csrf   string
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// answer is what a request got back, its body read.
type answer struct {
	StatusCode int
	Header     http.Header
	Body       string
	cookies    []*http.Cookie
}

func (a *answer) Cookies() []*http.Cookie { return a.cookies }

func do(t *testing.T, req *http.Request) *answer {
	t.Helper()
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return &answer{StatusCode: resp.StatusCode, Header: resp.Header, Body: string(body), cookies: resp.Cookies()}
}

func post(t *testing.T, u string, form url.Values, cookie *http.Cookie) *answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if cookie != nil {
		req.AddCookie(cookie)
	}
	return do(t, req)
}

func signIn(t *testing.T, base, token, org string) *browser {
	t.Helper()
	resp := post(t, base+"/signin", url.Values{"token": {token}, "org": {org}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in answered %d, want 303: %s", resp.StatusCode, resp.Body)
	}
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "outpost_session" {
			ck = c
		}
	}
	if ck == nil {
		t.Fatal("sign-in set no session cookie")
	}
	b := &browser{t: t, base: base, cookie: ck}
	_, page := b.get(resp.Header.Get("Location"))
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the page after sign-in holds no CSRF token:\n%s", page)
	}
	b.csrf = m[1]
	return b
}

func (b *browser) get(path string) (*answer, string) {
	b.t.Helper()
	req, err := http.NewRequestWithContext(b.t.Context(), http.MethodGet, b.base+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	if b.cookie != nil {
		req.AddCookie(b.cookie)
	}
	a := do(b.t, req)
	return a, a.Body
}

func (b *browser) post(path string, form url.Values) *answer {
	b.t.Helper()
	return post(b.t, b.base+path, form, b.cookie)
}

func TestSessionCookieAndHeaders(t *testing.T) {
	f := newFixture(t)
	b := signIn(t, f.inst.URL, f.acmeToken, "")
	if !b.cookie.HttpOnly || b.cookie.SameSite != http.SameSiteStrictMode || b.cookie.Path != "/" || b.cookie.MaxAge <= 0 {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/ and an expiry", b.cookie)
	}
	if strings.Contains(b.cookie.Value, f.acmeToken) {
		t.Fatal("the session cookie holds the token")
	}
	resp, page := b.get("/orgs/acme/runners")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "r1") {
		t.Fatalf("runners page: %d\n%s", resp.StatusCode, page)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("Content-Security-Policy %q: want scripts from the console's files only", csp)
	}
	if regexp.MustCompile(`<script>|<script [^>]*>[^<]`).MatchString(page) || strings.Contains(page, "style=") {
		t.Fatal("a page holds an inline script or style, which the Content-Security-Policy would block")
	}
	// Without a session every page sends the browser to sign in.
	anon := &browser{t: t, base: f.inst.URL}
	if resp, _ := anon.get("/orgs/acme/runners"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/signin") {
		t.Fatalf("without a session: %d %s, want a redirect to /signin", resp.StatusCode, resp.Header.Get("Location"))
	}
	// Sign-out ends the session in the store: the old cookie opens nothing.
	if resp := b.post("/signout", url.Values{"csrf": {b.csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out answered %d", resp.StatusCode)
	}
	if resp, _ := b.get("/orgs/acme/runners"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after sign-out the old cookie still opened a page (%d)", resp.StatusCode)
	}
}

func TestAdminSignInNamesTheOrganisation(t *testing.T) {
	f := newFixture(t)
	if resp := post(t, f.inst.URL+"/signin", url.Values{"token": {f.inst.AdminToken}}, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("admin token without an organisation: %d, want 401", resp.StatusCode)
	}
	b := signIn(t, f.inst.URL, f.inst.AdminToken, "beta")
	if _, page := b.get("/orgs/beta/runners"); !strings.Contains(page, "secret-runner") {
		t.Fatal("the admin session of beta does not show beta's runner")
	}
	if resp, _ := b.get("/orgs/acme/runners"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the admin session of beta opened acme's runners (%d), want 404", resp.StatusCode)
	}
	// Tokens: created once, listed, revoked; a session of the revoked token ends with it.
	resp := b.post("/orgs/beta/tokens", url.Values{"csrf": {b.csrf}, "name": {"ci"}})
	tok := regexp.MustCompile(`opo_[A-Za-z0-9_-]+`).FindString(resp.Body)
	if resp.StatusCode != http.StatusOK || tok == "" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("create token: %d, token %q, Cache-Control %q", resp.StatusCode, tok, resp.Header.Get("Cache-Control"))
	}
	if _, list := b.get("/orgs/beta/tokens"); strings.Contains(list, tok) || !strings.Contains(list, ">ci<") {
		t.Fatal("the token list shows the token again, or not its name")
	}
	ci := signIn(t, f.inst.URL, tok, "")
	id := regexp.MustCompile(`/orgs/beta/tokens/(tok-[a-z0-9]+)/revoke`).FindAllStringSubmatch(mustGet(b, "/orgs/beta/tokens"), -1)
	for _, m := range id {
		b.post("/orgs/beta/tokens/"+m[1]+"/revoke", url.Values{"csrf": {b.csrf}})
	}
	if resp, _ := ci.get("/orgs/beta/runners"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a session of a revoked token still opened a page (%d)", resp.StatusCode)
	}
	// An organisation token's session manages no tokens, as in the API.
	a := signIn(t, f.inst.URL, f.acmeToken, "")
	if resp, _ := a.get("/orgs/acme/tokens"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("an organisation token's session opened the token page (%d), want 403", resp.StatusCode)
	}
}

func mustGet(b *browser, path string) string {
	_, page := b.get(path)
	return page
}

// TestCSRF: a state-changing request without the session's CSRF token is refused and changes
// nothing; with it, it works.
func TestCSRF(t *testing.T) {
	f := newFixture(t)
	b := signIn(t, f.inst.URL, f.acmeToken, "")
	cancel := "/orgs/acme/deployments/" + f.acmeDep + "/cancel"
	for name, form := range map[string]url.Values{"none": {}, "forged": {"csrf": {"forged"}}} {
		if resp := b.post(cancel, form); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("cancel with %s CSRF token answered %d, want 403", name, resp.StatusCode)
		}
	}
	if d, _ := f.acme.GetDeployment(t.Context(), f.acmeDep); d.Status != api.StatusQueued {
		t.Fatalf("a refused cancel changed the deployment: %s", d.Status)
	}
	// Another session's token is no good either: it is bound to its own cookie.
	other := signIn(t, f.inst.URL, f.acmeToken, "")
	if resp := b.post(cancel, url.Values{"csrf": {other.csrf}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cancel with another session's CSRF token answered %d, want 403", resp.StatusCode)
	}
	if resp := b.post(cancel, url.Values{"csrf": {b.csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel with the CSRF token answered %d, want 303", resp.StatusCode)
	}
	if d, _ := f.acme.GetDeployment(t.Context(), f.acmeDep); d.Status != api.StatusCanceled {
		t.Fatalf("after the cancel the deployment is %s", d.Status)
	}
	// A form sent from another site is refused by its Origin, sign-in included.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.inst.URL+"/signin", strings.NewReader(url.Values{"token": {f.acmeToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	if resp := do(t, req); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a cross-site sign-in answered %d, want 403", resp.StatusCode)
	}
}

// TestOrganisationBoundary: acme's session sees nothing of beta, whatever the path.
func TestOrganisationBoundary(t *testing.T) {
	f := newFixture(t)
	b := signIn(t, f.inst.URL, f.acmeToken, "")
	for _, p := range []string{
		"/orgs/beta/runners", "/orgs/beta/deployments", "/orgs/beta/deployments/" + f.betaDep,
		"/orgs/beta/deployments/" + f.betaDep + "/log.txt", "/orgs/beta/state-keys", "/orgs/beta/tokens",
		"/orgs/acme/deployments/" + f.betaDep, "/orgs/acme/deployments/" + f.betaDep + "/log.txt",
	} {
		resp, page := b.get(p)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s answered %d, want 404", p, resp.StatusCode)
		}
		if strings.Contains(page, "secret-runner") || strings.Contains(page, "beta/key") {
			t.Errorf("GET %s shows beta's data", p)
		}
	}
	if resp := b.post("/orgs/beta/deployments/"+f.betaDep+"/cancel", url.Values{"csrf": {b.csrf}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("cancel of beta's deployment answered %d, want 404", resp.StatusCode)
	}
	if resp, page := b.get("/orgs/acme/state-keys"); resp.StatusCode != http.StatusOK || !strings.Contains(page, "apps/web") || !strings.Contains(page, f.acmeDep) {
		t.Errorf("acme's state keys page (%d) does not list apps/web with its deployment", resp.StatusCode)
	}
	for _, p := range []string{"/orgs/acme/runners", "/orgs/acme/deployments", "/orgs/acme/state-keys"} {
		if _, page := b.get(p); strings.Contains(page, "secret-runner") || strings.Contains(page, f.betaDep) {
			t.Errorf("acme's %s shows beta's data", p)
		}
	}
}

// TestSignInRateLimited: the eleventh attempt within a minute from one address is refused.
func TestSignInRateLimited(t *testing.T) {
	f := newFixture(t)
	for i := range 10 {
		if resp := post(t, f.inst.URL+"/signin", url.Values{"token": {"opo_wrong"}}, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d answered %d, want 401", i+1, resp.StatusCode)
		}
	}
	resp := post(t, f.inst.URL+"/signin", url.Values{"token": {f.acmeToken}}, nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the 11th attempt answered %d (Retry-After %q), want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestEscaping: a runner description, a log line, an event message and an output holding markup
// reach the browser as text.
func TestEscaping(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	const evil = `<script>alert("x")</script><img src=x onerror=alert(1)>`
	r, err := f.acme.GetRunner(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	in := api.RunnerInput{ID: r.ID, Description: evil, PublicKeys: r.PublicKeys, Job: r.Job, StateStorageID: r.StateStorageID}
	if _, err := f.acme.UpdateRunner(ctx, in); err != nil {
		t.Fatal(err)
	}
	b := signIn(t, f.inst.URL, f.acmeToken, "")
	_, page := b.get("/orgs/acme/runners")
	if strings.Contains(page, evil) || !strings.Contains(page, "&lt;script&gt;") {
		t.Fatal("the runner description was not escaped on the runners page")
	}
	// The live stream of the same table escapes it too.
	events := b.stream(ctx, "/orgs/acme/runners/live", "", 1)
	if strings.Contains(events[0].data, evil) || !strings.Contains(events[0].data, "&lt;script&gt;") {
		t.Fatalf("the runners stream did not escape the description: %q", events[0].data)
	}
	agent := f.inst.NewAgent(t, "acme", "r1", f.key, "v-test")
	run := agent.Claim(ctx, f.acmeDep)
	run.Log(ctx, "line one\n"+evil+"\n\x1b[1m\x1b[32mApply complete!\x1b[0m\n")
	run.Event(ctx, api.Event{Type: api.EventProgress, Reason: "image_pull", Message: evil})
	run.Finish(ctx, api.StatusSucceeded, api.Outputs{"name": {Value: []byte(`"` + strings.ReplaceAll(evil, `"`, `\"`) + `"`)}})
	logEvents := b.stream(ctx, "/orgs/acme/deployments/"+f.acmeDep+"/log", "", 2)
	logHTML := logEvents[0].data
	if strings.Contains(logHTML, "<script>") || !strings.Contains(logHTML, "&lt;script&gt;") {
		t.Fatalf("the log line was not escaped: %q", logHTML)
	}
	if !strings.Contains(logHTML, `<span class="ansi-bold ansi-fg-32">Apply complete!</span>`) {
		t.Fatalf("the log's colours were not rendered as classes: %q", logHTML)
	}
	if logEvents[1].name != "end" {
		t.Fatalf("the log of an ended deployment did not end: %+v", logEvents)
	}
	_, page = b.get("/orgs/acme/deployments/" + f.acmeDep)
	if strings.Contains(page, "<script>alert") || strings.Contains(page, "<img src=x") {
		t.Fatal("the deployment page holds the markup of an event message or output unescaped")
	}
}

// TestLogStream: the log stream sends the log as it grows, each event's id the offset after
// it, and a reconnect with Last-Event-ID gets only what follows.
func TestLogStream(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	b := signIn(t, f.inst.URL, f.acmeToken, "")
	run := f.inst.NewAgent(t, "acme", "r1", f.key, "v-test").Claim(ctx, f.acmeDep)
	run.Log(ctx, "first\n")
	ev := b.stream(ctx, "/orgs/acme/deployments/"+f.acmeDep+"/log", "", 1)
	if ev[0].name != "log" || ev[0].data != "first\n" || ev[0].id != "6" {
		t.Fatalf("first event %+v, want the first line with id 6", ev[0])
	}
	run.Log(ctx, "second\nthird, still being written")
	ev = b.stream(ctx, "/orgs/acme/deployments/"+f.acmeDep+"/log", "6", 1)
	if ev[0].data != "second\n" || ev[0].id != "13" {
		t.Fatalf("after a reconnect at 6: %+v, want only the second line (the third is not whole yet)", ev[0])
	}
	run.Log(ctx, "\n")
	run.Finish(ctx, api.StatusSucceeded, nil)
	ev = b.stream(ctx, "/orgs/acme/deployments/"+f.acmeDep+"/log", "13", 2)
	if ev[0].data != "third, still being written\n" || ev[1].name != "end" {
		t.Fatalf("the end of the log: %+v", ev)
	}
	// The summary of an ended deployment comes once, then "done" closes the stream.
	if ev := b.stream(ctx, "/orgs/acme/deployments/"+f.acmeDep+"/live", "", 2); ev[0].name != "summary" ||
		!strings.Contains(ev[0].data, "succeeded") || ev[1].name != "done" {
		t.Fatalf("the summary stream of an ended deployment: %+v", ev)
	}
	resp, raw := b.get("/orgs/acme/deployments/" + f.acmeDep + "/log.txt")
	if resp.StatusCode != http.StatusOK || raw != "first\nsecond\nthird, still being written\n" {
		t.Fatalf("raw log: %d %q", resp.StatusCode, raw)
	}
}

type sseEvent struct{ id, name, data string }

// stream reads n events of an event stream, sending lastID as Last-Event-ID.
func (b *browser) stream(ctx context.Context, path, lastID string, n int) []sseEvent {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	req.AddCookie(b.cookie)
	resp, err := noRedirect.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		b.t.Fatalf("stream %s answered %d: %s", path, resp.StatusCode, body)
	}
	var out []sseEvent
	var cur sseEvent
	var data []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" {
				cur.data = strings.Join(data, "\n")
				out = append(out, cur)
				if len(out) == n {
					return out
				}
			}
			cur, data = sseEvent{}, nil
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = append(data, line[6:])
		}
	}
	b.t.Fatalf("stream %s ended after %d of %d events: %v", path, len(out), n, sc.Err())
	return nil
}

// TestReplicasShareSessionsAndStreams: two orchestrator replicas over one PostgreSQL database: a
// session begun on one opens pages and the log stream on the other, and sign-out on the other
// ends it on both.
func TestReplicasShareSessionsAndStreams(t *testing.T) {
	pgURL := storetest.PostgreSQL(t)
	ctx := t.Context()
	a := orchestratortest.Start(t, orchestratortest.WithDatabase(pgURL))
	b := orchestratortest.Start(t, orchestratortest.WithDatabase(pgURL), orchestratortest.WithData(t.TempDir(), a.AdminToken))
	admin, key := a.RegisterRunner(ctx, t)
	d, err := admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan, StateKey: "k",
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": ""})}}})
	if err != nil {
		t.Fatal(err)
	}
	run := a.NewAgent(t, "acme", "r1", key, "v-test").Claim(ctx, d.ID)
	run.Log(ctx, "written through replica a\n")
	onA := signIn(t, a.URL, a.AdminToken, "acme")
	onB := &browser{t: t, base: b.URL, cookie: onA.cookie, csrf: onA.csrf}
	if resp, page := onB.get("/orgs/acme/deployments/" + d.ID); resp.StatusCode != http.StatusOK || !strings.Contains(page, d.ID) {
		t.Fatalf("replica b did not serve replica a's session: %d", resp.StatusCode)
	}
	if ev := onB.stream(ctx, "/orgs/acme/deployments/"+d.ID+"/log", "", 1); ev[0].data != "written through replica a\n" {
		t.Fatalf("replica b's log stream: %+v", ev[0])
	}
	if resp := onB.post("/signout", url.Values{"csrf": {onB.csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out on replica b answered %d", resp.StatusCode)
	}
	if resp, _ := onA.get("/orgs/acme/runners"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after sign-out on replica b, replica a still served the session (%d)", resp.StatusCode)
	}
}

// TestStateKeysShowTheLockHolder: the state keys page shows what the runner's agent reported of
// a state — its lock holder with the job pod, its versions — escaped, to its organisation only.
func TestStateKeysShowTheLockHolder(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	agent := f.inst.NewAgent(t, "acme", "r1", f.key, "v-test")
	now := time.Now().UTC()
	rep := api.StateReport{Namespace: "states", States: []api.ReportedState{{
		StateKey: "apps/web",
		Versions: []api.StateVersion{{Generation: 2, Serial: 7, Size: 100, WrittenAt: now}, {Generation: 1, Serial: 6, Size: 90, WrittenAt: now}},
		Lock: &api.StateLock{DeploymentID: f.acmeDep, Attempt: 1, Pod: "outpost-dep-x-1-abcde", Holder: "job/" + f.acmeDep + "/1",
			Operation: "OperationTypeApply", AcquiredAt: now, ExpiresAt: now.Add(time.Minute)},
	}, {
		StateKey:      "restored/in-cluster",
		Versions:      []api.StateVersion{{Generation: 1, Serial: 1, WrittenAt: now}},
		LastLockBreak: &api.StateLockBreak{Holder: "job/x/1", By: "ops", Reason: "<script>alert(1)</script>", At: now},
	}}}
	if err := agent.Client.ReportStates(ctx, rep); err != nil {
		t.Fatal(err)
	}
	b := signIn(t, f.inst.URL, f.acmeToken, "")
	resp, page := b.get("/orgs/acme/state-keys")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("state keys page answered %d", resp.StatusCode)
	}
	for _, want := range []string{"outpost-dep-x-1-abcde", "OperationTypeApply", "2, newest serial 7", "restored/in-cluster", "&lt;script&gt;alert(1)"} {
		if !strings.Contains(page, want) {
			t.Errorf("the state keys page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>alert(1)") {
		t.Error("a lock break's reason was not escaped")
	}
	bb := signIn(t, f.inst.URL, f.betaToken, "")
	if _, page := bb.get("/orgs/beta/state-keys"); strings.Contains(page, "outpost-dep-x-1-abcde") {
		t.Error("beta's state keys page shows acme's lock holder")
	}
}
