package browsertest

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// TestConsoleInBrowser walks the console as a person would, in Chromium: sign in, watch a
// runner appear and its last poll advance, follow a deployment's log to its outputs, cancel from
// the page, and checks that a forged form is refused, that markup in a runner description and in
// a log line stays text, and that one organisation's session cannot open another's pages.
func TestConsoleInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short starts no browser")
	}
	exe := Chromium(t)
	dir := Screenshots(t)
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

	b := New(t, exe, inst.URL, dir, "")
	b.SignIn(tok.Token, "")

	// A runner appears and its last poll advances without a reload.
	Eval[string](b, `document.body.dataset.loaded = "once"`)
	if got := b.Text(`#runner-r1 .last-poll`); got != "never" {
		t.Fatalf("before any poll the last poll reads %q, want never", got)
	}
	in2 := in
	in2.ID, in2.Description = "r2", "us-east cluster"
	if _, err := acme.CreateRunner(ctx, in2); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("runner r2 to appear", `document.querySelector("#runner-r2") !== null`)
	agent := inst.NewAgent(t, "acme", "r1", key, "v0.0.0-old")
	agent.Poll(ctx)
	b.WaitFor("the first poll to show", `document.querySelector("#runner-r1 .last-poll").textContent.endsWith("s ago")`)
	first := b.Text(`#runner-r1 .last-poll`)
	b.WaitFor("the last poll to advance", `document.querySelector("#runner-r1 .last-poll").textContent !== `+JSString(first))
	if Eval[string](b, `document.body.dataset.loaded`) != "once" {
		t.Fatal("the runners page reloaded; the last poll must change in place")
	}
	if badge := b.Text(`#runner-r1 .badge.skew`); !strings.Contains(badge, "differs") {
		t.Fatalf("the agent of another release has no skew badge: %q", badge)
	}
	// An agent locked out (a key its runner does not have, then a protocol the orchestrator does
	// not speak) shows as such, live, with what to do.
	in3 := in
	in3.ID, in3.Description = "r3", "locked out"
	if _, err := acme.CreateRunner(ctx, in3); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("runner r3 to appear", `document.querySelector("#runner-r3") !== null`)
	_, strayKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	stray, err := client.NewAgentClient(inst.URL, agentauth.NewSigner("acme", "r3", strayKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stray.Poll(ctx, api.PollRequest{Instance: "stray", Protocol: api.AgentProtocols()}); !errors.Is(err, api.ErrUnknownKey) {
		t.Fatalf("a poll with a stray key: %v, want unknown_key", err)
	}
	b.WaitFor("runner r3 to show its key refused", `document.querySelector("#runner-r3 .badge").textContent === "key-refused"`)
	if msg := b.Text(`#runner-r3 .refusal`); !strings.Contains(msg, "which the runner does not have") {
		t.Fatalf("the refusal of runner r3 reads %q; want what is wrong and what to do", msg)
	}
	b.Shot("runner-key-refused")
	// r3 has r1's keys: this agent gets through the signature check and is refused for its protocol.
	future, err := client.NewAgentClient(inst.URL, agentauth.NewSigner("acme", "r3", key))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := future.Poll(ctx, api.PollRequest{Instance: "future", AgentVersion: "v99.0.0", Protocol: api.ProtocolRange{Min: 99, Max: 99}}); !errors.Is(err, api.ErrIncompatibleProtocol) {
		t.Fatalf("a poll of protocol 99: %v, want incompatible_protocol", err)
	}
	b.WaitFor("runner r3 to show its incompatible version", `document.querySelector("#runner-r3 .badge").textContent === "incompatible-version"`)
	if msg := b.Text(`#runner-r3 .refusal`); !strings.Contains(msg, "v99.0.0") {
		t.Fatalf("the refusal of runner r3 reads %q; want the agent's release named", msg)
	}
	// The description's markup is text: no script ran, no element was made from it.
	title := Eval[string](b, `document.title`)
	injected := Eval[int](b, `document.querySelectorAll("table.runners script, table.runners img").length`)
	if title == "pwned" || injected != 0 || !strings.Contains(b.Text(`#runner-r1 .desc`), "<script>") {
		t.Fatalf("the runner description's markup was not kept as text (title %q, %d elements)", title, injected)
	}
	b.Shot("runners")

	// A deployment's log grows live, then its outputs show (the sensitive one hidden).
	src := api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": ""})}}
	d, err := acme.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationApply, StateKey: "apps/web", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	page := "/orgs/acme/deployments/" + d.ID
	b.Do("open the deployment", chromedp.Navigate(inst.URL+page), chromedp.WaitVisible(CSS(`#log`)))
	run := agent.Claim(ctx, d.ID)
	b.WaitFor("the status to turn running", `document.querySelector("#status").textContent === "running"`)
	run.Log(ctx, "\x1b[0m\x1b[1mInitializing the backend...\x1b[0m\n")
	b.WaitFor("the first log line", `document.querySelector("#log").textContent.includes("Initializing the backend")`)
	run.Log(ctx, "module.web: Creating... "+evil+"\n")
	b.WaitFor("the second log line", `document.querySelector("#log").textContent.includes("module.web: Creating")`)
	injected = Eval[int](b, `document.querySelectorAll("#log script, #log img").length`)
	title = Eval[string](b, `document.title`)
	if injected != 0 || title == "pwned" || !strings.Contains(b.Text(`#log`), "<script>") {
		t.Fatalf("a log line's markup was not kept as text (title %q, %d elements)", title, injected)
	}
	run.Log(ctx, "\x1b[0m\x1b[1m\x1b[32mApply complete! Resources: 3 added, 0 changed, 0 destroyed.\x1b[0m\n")
	b.WaitFor("the green line", `document.querySelector("#log .ansi-fg-32") !== null`)
	run.Finish(ctx, api.StatusSucceeded, api.Outputs{
		"url":      {Value: []byte(`"https://web.example.com"`)},
		"password": {Value: []byte(`"hunter2"`), Sensitive: true},
	})
	b.WaitFor("the outputs", `document.querySelector("#outputs") !== null`)
	b.WaitFor("the status to turn succeeded", `document.querySelector("#status").textContent === "succeeded"`)
	if out := b.Text(`#outputs`); !strings.Contains(out, "web.example.com") || strings.Contains(out, "hunter2") || !strings.Contains(out, "hidden") {
		t.Fatalf("outputs read %q: want the url shown and the password hidden", out)
	}
	b.WaitFor("the whole log", `document.querySelector("#log").dataset.complete === "true"`)
	b.Shot("deployment")

	// Cancel from the page.
	d2, err := acme.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan, StateKey: "apps/api", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	b.Do("open the second deployment", chromedp.Navigate(inst.URL+"/orgs/acme/deployments/"+d2.ID), chromedp.WaitVisible(CSS(`#cancel`)))
	b.Do("cancel", chromedp.Click(CSS(`#cancel`)))
	b.WaitFor("the status to turn canceled", `document.querySelector("#status") && document.querySelector("#status").textContent === "canceled"`)
	if got, _ := acme.GetDeployment(ctx, d2.ID); got.Status != api.StatusCanceled {
		t.Fatalf("after the cancel from the page the deployment is %s", got.Status)
	}

	// A forged POST (no CSRF token) from the signed-in browser is refused and changes nothing.
	d3, err := acme.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan, StateKey: "apps/db", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	status := Eval[int](b, `fetch("/orgs/acme/deployments/`+d3.ID+`/cancel", {method: "POST", body: new URLSearchParams({})}).then(r => r.status)`)
	if got, _ := acme.GetDeployment(ctx, d3.ID); status != 403 || got.Status != api.StatusQueued {
		t.Fatalf("a forged cancel answered %d and left the deployment %s; want 403 and queued", status, got.Status)
	}

	b.Do("open the deployments", chromedp.Navigate(inst.URL+"/orgs/acme/deployments"), chromedp.WaitVisible(CSS(`table.deployments`)))
	b.Shot("deployments")
	b.Do("filter on succeeded and canceled", chromedp.Click(CSS(`input[name=status][value=succeeded]`)),
		chromedp.Click(CSS(`input[name=status][value=canceled]`)), chromedp.Click(CSS(`form.filters button`)))
	b.WaitFor("the filtered list", `location.search.includes("status=canceled") && document.querySelector("#deployment-rows") !== null`)
	if rows := Eval[int](b, `document.querySelectorAll("#deployment-rows tr[id]").length`); rows != 2 {
		t.Fatalf("filtering on succeeded and canceled shows %d deployments, want 2", rows)
	}

	// Connect a runner: the steps for it, then live, its registration and its agent's first poll.
	b.Open("/orgs/acme/runners", "#connect-link")
	b.Do("open the connect page", chromedp.Click(CSS(`#connect-link`)), chromedp.WaitVisible(CSS(`#snippet-terraform`)))
	b.Do("ask for runner r9", chromedp.SetValue(CSS(`.connect-form input[name=runner]`), "r9"), chromedp.Click(CSS(`.connect-form button`)))
	b.WaitFor("the steps for r9", `document.querySelector("#snippet-terraform").textContent.includes('runner_id = "r9"')`)
	b.WaitFor("the wait for r9's registration", `document.querySelector("#connect-stage").dataset.stage === "unregistered"`)
	b.Shot("connect")
	in9 := in
	in9.ID, in9.Description = "r9", "connected from the connect page"
	if _, err := acme.CreateRunner(ctx, in9); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("r9 to show as registered", `document.querySelector("#connect-stage").dataset.stage === "registered"`)
	inst.NewAgent(t, "acme", "r9", key, "v-connect").Poll(ctx)
	b.WaitFor("r9 to show as connected", `document.querySelector("#connect-stage").dataset.stage === "connected"`)
	if got := b.Text(`#connect-stage`); !strings.Contains(got, "v-connect") {
		t.Fatalf("the connect page's last word is %q; want the agent's release", got)
	}

	// Organisation beta's pages stay closed to acme's session.
	beta, err := client.NewAdminClient(inst.URL, "beta", inst.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := beta.CreateToken(ctx, "beta-console"); err != nil {
		t.Fatal(err)
	}
	b.Do("open beta's runners", chromedp.Navigate(inst.URL+"/orgs/beta/runners"), chromedp.WaitVisible(CSS(`main h1`)))
	if h := b.Text(`main h1`); h != "Not Found" {
		t.Fatalf("acme's session opened beta's runners page: %q", h)
	}
}
