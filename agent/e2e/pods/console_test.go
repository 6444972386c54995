package pods

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
	"github.com/outpost-dev/terraform-provider-outpost/tools/browsertest"
)

// ticking prints a numbered line every two seconds from its apply, then outputs one plain and one
// sensitive value: a log that grows while the page is open.
var ticking = map[string]string{"main.tf": `
variable "password" {
  type      = string
  sensitive = true
  default   = "console-hunter2"
}

resource "terraform_data" "ticks" {
  input = "ticking"

  provisioner "local-exec" {
    command = "for i in 1 2 3 4 5 6; do echo tick-$i-of-6; sleep 2; done"
  }
}

output "greeting" {
  value = "hello from the console test"
}

output "password" {
  value     = var.password
  sensitive = true
}
`}

// TestConsoleOnRealPods looks at deployments on the real node through the web console in
// Chromium, as a person following them would: the runner's agent connected; a deployment's
// timeline up to its pod on the node and its CLI, its log growing in place while the CLI runs,
// then its outputs with the sensitive one hidden; a running apply canceled from its page; and a
// deployment whose image cannot be pulled showing why it waits, in the registry's words, while
// it waits. Screenshots of each page go with the browser test's (console-pods-*.png).
func TestConsoleOnRealPods(t *testing.T) {
	t.Parallel()
	exe := browsertest.Chromium(t)
	e := newEnv(t, envOptions{})
	ctx := t.Context()
	b := browsertest.New(t, exe, e.orch.URL, browsertest.Screenshots(t), "console-pods-")
	b.SignIn(e.orch.AdminToken, org)

	b.WaitFor("the runner to show as connected",
		`["idle","busy"].includes(document.querySelector("#runner-`+runnerID+` .badge").textContent)`)
	b.Shot("runners")

	// The timeline, the growing log and the outputs.
	d := e.enqueue(api.OperationApply, ticking, "console/ticks")
	b.Open("/orgs/"+org+"/deployments/"+d.ID, "#log")
	browsertest.Eval[string](b, `document.body.dataset.loaded = "once"`)
	b.WaitForWithin("the first tick in the log", `document.querySelector("#log").textContent.includes("tick-1-of-6")`, 3*time.Minute)
	early := browsertest.Eval[string](b, `document.querySelector("#log").textContent`)
	if strings.Contains(early, "tick-6-of-6") {
		t.Fatalf("the log showed the last tick together with the first; the test sees no growth:\n%s", early)
	}
	b.WaitFor("a later tick in the log", `document.querySelector("#log").textContent.includes("tick-4-of-6")`)
	b.WaitFor("the pod on the real node in the timeline",
		`[...document.querySelectorAll("#timeline .kind")].some(k => k.textContent === "pod scheduled on `+testbed.RealNodeName+`")`)
	b.WaitFor("the CLI's start in the timeline", `[...document.querySelectorAll("#timeline .kind")].some(k => k.textContent === "cli started")`)
	// In the order things happened, though Kubernetes gives the pod's steps in whole seconds.
	kinds := browsertest.Eval[[]string](b, `[...document.querySelectorAll("#timeline .kind")].map(k => k.textContent)`)
	if want := []string{"queued", "claimed", "job created", "pod scheduled on " + testbed.RealNodeName, "pod initialized", "cli started"}; len(kinds) < len(want) || !slices.Equal(kinds[:len(want)], want) {
		t.Errorf("the timeline reads %q, want it to start %q", kinds, want)
	}
	b.WaitForWithin("the status to turn succeeded", `document.querySelector("#status").textContent === "succeeded"`, time.Minute)
	b.WaitFor("the outputs", `document.querySelector("#outputs") !== null`)
	if got := browsertest.Eval[string](b, `document.body.dataset.loaded`); got != "once" {
		t.Fatal("the deployment page reloaded; its log and status must change in place")
	}
	if out := b.Text("#outputs"); !strings.Contains(out, "hello from the console test") || strings.Contains(out, "console-hunter2") || !strings.Contains(out, "hidden") {
		t.Errorf("outputs read %q: want the greeting shown and the password hidden", out)
	}
	b.WaitFor("the whole log", `document.querySelector("#log").dataset.complete === "true"`)
	if log := b.Text("#log"); strings.Contains(log, "console-hunter2") {
		t.Error("the page's log shows the sensitive variable's value")
	}
	b.Shot("deployment")

	// Cancel a running apply from its page.
	c := e.enqueue(api.OperationApply, slow(600), "console/cancel")
	b.Open("/orgs/"+org+"/deployments/"+c.ID, "#log")
	b.WaitForWithin("the apply's CLI to run", `document.querySelector("#log").textContent.includes("slow step 2 starts")`, 3*time.Minute)
	b.Do("cancel", chromedp.Click(browsertest.CSS(`#cancel`)))
	b.WaitForWithin("the status to turn canceled", `document.querySelector("#status") && document.querySelector("#status").textContent === "canceled"`, 2*time.Minute)
	if got, err := e.admin.GetDeployment(ctx, c.ID); err != nil || got.Status != api.StatusCanceled {
		t.Fatalf("after the cancel from the page the API says %+v (%v)", got, err)
	}

	// An image that cannot be pulled: the page says why the deployment waits while it waits.
	const image = "registry.outpost.invalid/acme/console-no-such-image:1"
	e.setPodTemplate(`{"spec": {"containers": [{"name": "main", "image": "` + image + `"}]}}`)
	p := e.enqueue(api.OperationPlan, greeting, "console/image")
	b.Open("/orgs/"+org+"/deployments/"+p.ID, "#summary")
	b.WaitForWithin("the image pull reason", `document.querySelector("#summary .badge.reason") !== null && document.querySelector("#summary .badge.reason").textContent === "`+string(api.ReasonImagePull)+`"`, startupTimeout)
	if status := b.Text("#status"); status != string(api.StatusClaimed) {
		t.Errorf("the reason showed only once the deployment was %s; it must show while it waits", status)
	}
	b.WaitFor("the registry's words in the timeline", `document.querySelector("#timeline").textContent.includes("`+image+`")`)
	if reasons := browsertest.Eval[[]string](b, `[...document.querySelectorAll("#timeline .badge.reason")].map(r => r.textContent)`); slices.ContainsFunc(reasons, func(r string) bool { return r != string(api.ReasonImagePull) }) {
		t.Errorf("the timeline of a pull that cannot succeed names other reasons too: %q", reasons)
	}
	b.Shot("image-pull")
	e.follow(p.ID, time.Now(), 2*time.Minute)
	e.noLeftovers()
}
