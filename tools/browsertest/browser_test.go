// Package browsertest drives the web console (package console) in a real Chromium (Debian's
// package, installed by scripts/chromium.sh) with chromedp, against a real orchestrator on
// loopback whose runner is played step by step by orchestratortest.Agent. It is a package of its
// own so its dependency (chromedp) stays out of the product's packages.
//
// Screenshots of every screen are written to $OUTPOST_CONSOLE_SCREENSHOTS, or else to
// outpost-console-screenshots in the temporary directory; the test logs where.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// chromium finds Debian's Chromium; without it the test is skipped, except under CI=true.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium: install it with scripts/chromium.sh (Debian package chromium)")
	}
	t.Skip("needs Chromium: scripts/chromium.sh installs Debian's package")
	return ""
}

// screenshots is the directory the screenshots go to.
func screenshots(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("OUTPOST_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "outpost-console-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// session is one browser (its own profile, so its own cookies) on the console.
type session struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string
}

func newSession(t *testing.T, exe, base, dir string) *session {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], //nolint:gocritic // a copy: the array is not changed
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return &session{t: t, ctx: ctx, base: base, dir: dir}
}

// do runs steps with a time limit, failing the test with what was being done (and a
// screenshot of the page then).
func (s *session) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		s.failed(what, err)
	}
}

func (s *session) failed(what string, err error) {
	s.t.Helper()
	if shot, serr := chromedp.Run(s.ctx, chromedp.FullScreenshot(100)); serr == nil {
		_ = os.WriteFile(filepath.Join(s.dir, "failed-"+strings.Join(strings.Fields(what), "-")+".png"), shot, 0o644)
	}
	s.t.Fatalf("%s: %v", what, err)
}

// shot saves a screenshot of the page as name.png.
func (s *session) shot(name string) {
	s.t.Helper()
	png, err := chromedp.Run(s.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		s.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, name+".png"), png, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// text is the text of the first element matching the CSS selector sel.
func (s *session) text(sel string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 20*time.Second)
	defer cancel()
	out, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		s.failed("read "+sel, err)
	}
	return out
}

// eval evaluates a JavaScript expression in the page (awaiting a promise) and returns its value.
func eval[T any](s *session, expr string) T {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 20*time.Second)
	defer cancel()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		s.failed("evaluate "+expr, err)
	}
	return out
}

// waitFor waits until the JavaScript expression is true. A poll that a navigation cut short
// (the page it ran in went away) starts again in the new page.
func (s *session) waitFor(what, expr string) {
	s.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithDeadline(s.ctx, deadline)
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond)))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.failed("wait for "+what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

func (s *session) signIn(token, org string) {
	s.t.Helper()
	s.do("open the sign-in page", chromedp.Navigate(s.base+"/signin"), chromedp.WaitVisible(css(`input[name=token]`)))
	s.do("type the token", chromedp.SendKeys(css(`input[name=token]`), token))
	if org != "" {
		s.do("type the organisation", chromedp.SendKeys(css(`input[name=org]`), org))
	}
	s.shot("signin")
	s.do("sign in", chromedp.Click(css(`form.signin button`)), chromedp.WaitVisible(css(`table.runners`)))
}

// TestConsoleInBrowser walks the console as a person would, in Chromium: sign in, watch a
// runner appear and its last poll advance, follow a deployment's log to its outputs, cancel from
// the page, and checks that a forged form is refused, that markup in a runner description and in
// a log line stays text, and that one organisation's session cannot open another's pages.
func TestConsoleInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short starts no browser")
	}
	exe := chromium(t)
	dir := screenshots(t)
	ctx := t.Context()
	inst := orchestratortest.Start(t)
	acme, key := inst.RegisterRunner(ctx, t)
	boot, err := client.NewAdminClient(inst.URL, "acme", inst.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := boot.CreateToken(ctx, "console")
	if err != nil {
		t.Fatal(err)
	}
	r1, err := acme.GetRunner(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	const evil = `<script>document.title="pwned"</script><img src=x onerror="document.title='pwned'">`
	in := api.RunnerInput{ID: "r1", Description: "eu-west cluster " + evil, PublicKeys: r1.PublicKeys, Job: r1.Job,
		StateStorageID: r1.StateStorageID, MaxConcurrency: 4}
	if _, err := acme.UpdateRunner(ctx, in); err != nil {
		t.Fatal(err)
	}

	b := newSession(t, exe, inst.URL, dir)
	b.signIn(tok.Token, "")

	// A runner appears and its last poll advances without a reload.
	eval[string](b, `document.body.dataset.loaded = "once"`)
	if got := b.text(`#runner-r1 .last-poll`); got != "never" {
		t.Fatalf("before any poll the last poll reads %q, want never", got)
	}
	in2 := in
	in2.ID, in2.Description = "r2", "us-east cluster"
	if _, err := acme.CreateRunner(ctx, in2); err != nil {
		t.Fatal(err)
	}
	b.waitFor("runner r2 to appear", `document.querySelector("#runner-r2") !== null`)
	agent := inst.NewAgent(t, "acme", "r1", key, "v0.0.0-old")
	agent.Poll(ctx)
	b.waitFor("the first poll to show", `document.querySelector("#runner-r1 .last-poll").textContent.endsWith("s ago")`)
	first := b.text(`#runner-r1 .last-poll`)
	b.waitFor("the last poll to advance", `document.querySelector("#runner-r1 .last-poll").textContent !== `+jsString(first))
	if eval[string](b, `document.body.dataset.loaded`) != "once" {
		t.Fatal("the runners page reloaded; the last poll must change in place")
	}
	if badge := b.text(`#runner-r1 .badge.skew`); !strings.Contains(badge, "differs") {
		t.Fatalf("the agent of another release has no skew badge: %q", badge)
	}
	// The description's markup is text: no script ran, no element was made from it.
	title := eval[string](b, `document.title`)
	injected := eval[int](b, `document.querySelectorAll("table.runners script, table.runners img").length`)
	if title == "pwned" || injected != 0 || !strings.Contains(b.text(`#runner-r1 .desc`), "<script>") {
		t.Fatalf("the runner description's markup was not kept as text (title %q, %d elements)", title, injected)
	}
	b.shot("runners")

	// A deployment's log grows live, then its outputs show (the sensitive one hidden).
	src := api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": ""})}}
	d, err := acme.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationApply, StateKey: "apps/web", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	page := "/orgs/acme/deployments/" + d.ID
	b.do("open the deployment", chromedp.Navigate(inst.URL+page), chromedp.WaitVisible(css(`#log`)))
	run := agent.Claim(ctx, d.ID)
	b.waitFor("the status to turn running", `document.querySelector("#status").textContent === "running"`)
	run.Log(ctx, "\x1b[0m\x1b[1mInitializing the backend...\x1b[0m\n")
	b.waitFor("the first log line", `document.querySelector("#log").textContent.includes("Initializing the backend")`)
	run.Log(ctx, "module.web: Creating... "+evil+"\n")
	b.waitFor("the second log line", `document.querySelector("#log").textContent.includes("module.web: Creating")`)
	injected = eval[int](b, `document.querySelectorAll("#log script, #log img").length`)
	title = eval[string](b, `document.title`)
	if injected != 0 || title == "pwned" || !strings.Contains(b.text(`#log`), "<script>") {
		t.Fatalf("a log line's markup was not kept as text (title %q, %d elements)", title, injected)
	}
	run.Log(ctx, "\x1b[0m\x1b[1m\x1b[32mApply complete! Resources: 3 added, 0 changed, 0 destroyed.\x1b[0m\n")
	b.waitFor("the green line", `document.querySelector("#log .ansi-fg-32") !== null`)
	run.Finish(ctx, api.StatusSucceeded, api.Outputs{
		"url":      {Value: []byte(`"https://web.example.com"`)},
		"password": {Value: []byte(`"hunter2"`), Sensitive: true},
	})
	b.waitFor("the outputs", `document.querySelector("#outputs") !== null`)
	b.waitFor("the status to turn succeeded", `document.querySelector("#status").textContent === "succeeded"`)
	if out := b.text(`#outputs`); !strings.Contains(out, "web.example.com") || strings.Contains(out, "hunter2") || !strings.Contains(out, "hidden") {
		t.Fatalf("outputs read %q: want the url shown and the password hidden", out)
	}
	b.waitFor("the whole log", `document.querySelector("#log").dataset.complete === "true"`)
	b.shot("deployment")

	// Cancel from the page.
	d2, err := acme.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan, StateKey: "apps/api", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	b.do("open the second deployment", chromedp.Navigate(inst.URL+"/orgs/acme/deployments/"+d2.ID), chromedp.WaitVisible(css(`#cancel`)))
	b.do("cancel", chromedp.Click(css(`#cancel`)))
	b.waitFor("the status to turn canceled", `document.querySelector("#status") && document.querySelector("#status").textContent === "canceled"`)
	if got, _ := acme.GetDeployment(ctx, d2.ID); got.Status != api.StatusCanceled {
		t.Fatalf("after the cancel from the page the deployment is %s", got.Status)
	}

	// A forged POST (no CSRF token) from the signed-in browser is refused and changes nothing.
	d3, err := acme.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan, StateKey: "apps/db", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	status := eval[int](b, `fetch("/orgs/acme/deployments/`+d3.ID+`/cancel", {method: "POST", body: new URLSearchParams({})}).then(r => r.status)`)
	if got, _ := acme.GetDeployment(ctx, d3.ID); status != 403 || got.Status != api.StatusQueued {
		t.Fatalf("a forged cancel answered %d and left the deployment %s; want 403 and queued", status, got.Status)
	}

	b.do("open the deployments", chromedp.Navigate(inst.URL+"/orgs/acme/deployments"), chromedp.WaitVisible(css(`table.deployments`)))
	b.shot("deployments")
	b.do("filter on succeeded and canceled", chromedp.Click(css(`input[name=status][value=succeeded]`)),
		chromedp.Click(css(`input[name=status][value=canceled]`)), chromedp.Click(css(`form.filters button`)))
	b.waitFor("the filtered list", `location.search.includes("status=canceled") && document.querySelector("#deployment-rows") !== null`)
	if rows := eval[int](b, `document.querySelectorAll("#deployment-rows tr[id]").length`); rows != 2 {
		t.Fatalf("filtering on succeeded and canceled shows %d deployments, want 2", rows)
	}

	// Organisation beta's pages stay closed to acme's session.
	beta, err := client.NewAdminClient(inst.URL, "beta", inst.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := beta.CreateToken(ctx, "beta-console"); err != nil {
		t.Fatal(err)
	}
	b.do("open beta's runners", chromedp.Navigate(inst.URL+"/orgs/beta/runners"), chromedp.WaitVisible(css(`main h1`)))
	if h := b.text(`main h1`); h != "Not Found" {
		t.Fatalf("acme's session opened beta's runners page: %q", h)
	}
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}
