package console_test

import (
	"bytes"
	"html"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// snippet is the text of the <pre> with the given id on a page, unescaped as a browser shows it.
func snippet(t *testing.T, page, id string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<pre class="snippet" id="` + id + `">(.*?)</pre>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the page has no snippet %s", id)
	}
	return html.UnescapeString(m[1])
}

// TestConnectPage: the connect page shows, for the runner id asked for, a Terraform module call
// and the Helm steps that name this orchestrator, the organisation and the runner, and both
// parse (terraform fmt, bash -n); its live part goes from unregistered to registered to
// connected as the runner is registered and its agent polls; an id that cannot be a runner's is
// refused with the reason.
func TestConnectPage(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	b := signIn(t, f.inst.URL, f.acmeToken, "")

	_, page := b.get("/orgs/acme/connect?runner=prod-eu")
	tf := snippet(t, page, "snippet-terraform")
	for _, want := range []string{`api_url = "` + f.inst.URL + `"`, `org_id  = "acme"`, `runner_id = "prod-eu"`, "//modules/kubernetes-agent-runner"} {
		if !strings.Contains(tf, want) {
			t.Errorf("the Terraform snippet lacks %q:\n%s", want, tf)
		}
	}
	helm := snippet(t, page, "snippet-helm")
	for _, want := range []string{"OUTPOST_API_URL=" + f.inst.URL, "OUTPOST_ORG_ID=acme", "id: prod-eu", "runnerId=prod-eu", "privateKey.existingSecret=prod-eu-key"} {
		if !strings.Contains(helm, want) {
			t.Errorf("the Helm steps lack %q:\n%s", want, helm)
		}
	}
	if tfBin, err := exec.LookPath("terraform"); err == nil || os.Getenv("CI") == "true" {
		cmd := exec.CommandContext(ctx, tfBin, "fmt", "-")
		cmd.Stdin = strings.NewReader(tf)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("terraform fmt - of the snippet: %v\n%s", err, stderr.String())
		}
	}
	cmd := exec.CommandContext(ctx, "bash", "-n")
	cmd.Stdin = strings.NewReader(helm)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("bash -n of the Helm steps: %v\n%s", err, out)
	}

	if _, page := b.get("/orgs/acme/connect?runner=Not_An_ID"); !strings.Contains(page, `runner_id = "my-cluster"`) || !strings.Contains(page, `role="alert"`) {
		t.Errorf("an invalid runner id was not refused with a message (and the default used):\n%s", page)
	}

	stage := func() string {
		t.Helper()
		ev := b.stream(ctx, "/orgs/acme/connect/live?runner=prod-eu", "", 1)
		m := regexp.MustCompile(`data-stage="([a-z]+)"`).FindStringSubmatch(ev[0].data)
		if m == nil {
			t.Fatalf("the connect stream sent no stage: %q", ev[0].data)
		}
		return m[1]
	}
	if got := stage(); got != "unregistered" {
		t.Fatalf("before the runner exists the stage is %q", got)
	}
	r1, err := f.acme.GetRunner(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.acme.CreateRunner(ctx, api.RunnerInput{ID: "prod-eu", PublicKeys: r1.PublicKeys, Job: r1.Job, StateStorageID: r1.StateStorageID}); err != nil {
		t.Fatal(err)
	}
	if got := stage(); got != "registered" {
		t.Fatalf("after the runner is registered the stage is %q", got)
	}
	f.inst.NewAgent(t, "acme", "prod-eu", f.key, "v-test").Poll(ctx)
	evs := b.stream(ctx, "/orgs/acme/connect/live?runner=prod-eu", "", 2)
	if !strings.Contains(evs[0].data, `data-stage="connected"`) || !strings.Contains(evs[0].data, "v-test") || evs[1].name != "done" {
		t.Fatalf("after the agent's poll the stream sent %+v; want connected with the agent's release, then done", evs)
	}
}
