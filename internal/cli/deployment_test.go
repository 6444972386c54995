package cli_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/cli"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator"
)

// source writes a small configuration directory, with what deploy must leave out.
func source(h *harness) string {
	dir := filepath.Join(h.dir, "infra")
	h.write("infra/main.tf", "variable \"name\" {}\noutput \"name\" { value = var.name }\n")
	h.write("infra/.terraform/providers/cache", "not uploaded")
	h.write("infra/terraform.tfstate", `{"secret": "local state, not uploaded"}`)
	return dir
}

// queue deploys the source and returns the deployment id deploy printed.
func queue(h *harness, extra ...string) string {
	h.t.Helper()
	r := h.must(append([]string{"deploy", source(h), "--runner", "eu-1", "--state-key", "apps/web"}, extra...)...)
	id := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(id, "dep-") {
		h.t.Fatalf("deploy printed %q, want a deployment id", r.stdout)
	}
	return id
}

// follow runs a following command in the background; the result arrives on the channel.
func follow(h *harness, args ...string) <-chan result {
	out := make(chan result, 1)
	go func() { out <- h.runWith(nil, "", args...) }()
	return out
}

func waitResult(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not end within 30s")
	}
	return result{}
}

// TestDeployAndInspectDeployments deploys a directory, plays the agent over the real agent and
// job APIs, and reads the deployment with every deployment command; then it checks the exit
// code of following a deployment that succeeded, failed, was canceled or was lost.
func TestDeployAndInspectDeployments(t *testing.T) {
	h := configured(t)
	admin := h.admin()
	ag := clienttest.Register(t, admin, h.inst.URL, "eu-1")

	h.expect(cli.ExitError, []string{"deploy", source(h), "--runner", "eu-2", "--state-key", "apps/web"},
		"runner eu-2 does not exist in org acme; list runners with `outpost runner list`")
	h.expect(cli.ExitUsage, []string{"deploy", source(h), "--runner", "eu-1"}, "--state-key is required")
	h.expect(cli.ExitUsage, []string{"deploy", source(h), "--runner", "eu-1", "--state-key", "../x"}, "--state-key:")
	h.expect(cli.ExitUsage, []string{"deploy", "--runner", "eu-1", "--state-key", "k"}, "nothing to deploy")
	h.expect(cli.ExitUsage, []string{"deploy", source(h), "--runner", "eu-1", "--state-key", "k", "--plan", "--destroy"}, "plan", "destroy")
	h.expect(cli.ExitUsage, []string{"deploy", source(h), "--state-key", "k"}, "no runner")

	vars := h.write("prod.tfvars", "size = 3\ntags = [\"a\", \"b\"]\nname = \"from-file\"\n")
	r := h.run("", "deploy", source(h), "--runner", "eu-1", "--state-key", "apps/web", "--var-file", vars, "--var", "name=cli", "-o", "json")
	h.check(r, 0, []string{"deploy -o json"}, "Packed "+source(h)+": 1 file, 0 directories,", "left out .terraform/, terraform.tfstate",
		"no agent has connected for runner eu-1 yet", "Queued deployment dep-")
	var dep api.Deployment
	if err := json.Unmarshal([]byte(r.stdout), &dep); err != nil {
		t.Fatalf("deploy -o json: %v\n%s", err, r.stdout)
	}
	if dep.Status != api.StatusQueued || dep.Operation != api.OperationApply || string(dep.Variables["name"]) != `"cli"` ||
		string(dep.Variables["size"]) != "3" || compact(dep.Variables["tags"]) != `["a","b"]` || dep.Source.Inline == nil {
		t.Fatalf("queued deployment %+v", dep)
	}

	// The agent runs it; the log is followed live and the command exits 0.
	followed := follow(h, "deployment", "logs", dep.ID, "--follow")
	run := ag.Start(t, dep.ID)
	run.Log(t, "==> terraform apply\n")
	run.Log(t, "Apply complete! Resources: 1 added, 0 changed, 0 destroyed.\n")
	run.Outputs(t, api.Outputs{"name": {Value: json.RawMessage(`"cli"`)}, "servers": {Value: json.RawMessage(`["a","b"]`)},
		"token": {Value: json.RawMessage(`"s3cr3t"`), Sensitive: true}})
	run.Finish(t, api.StatusSucceeded, 0)
	fr := waitResult(t, followed)
	h.check(fr, cli.ExitOK, []string{"deployment logs --follow"}, "Deployment "+dep.ID+" succeeded", "(attempt 1): exit code 0")
	if fr.stdout != "==> terraform apply\nApply complete! Resources: 1 added, 0 changed, 0 destroyed.\n" {
		t.Errorf("followed log %q", fr.stdout)
	}

	h.expect(0, []string{"deployment", "logs", dep.ID}, "Apply complete!")
	h.expect(0, []string{"deployment", "list"}, dep.ID, "eu-1", "apply", "succeeded", "apps/web")
	h.expect(0, []string{"deployment", "list", "--status", "failed"}, "No deployments match")
	h.expect(cli.ExitUsage, []string{"deployment", "list", "--status", "done"}, `--status "done" is not a status`)
	h.expect(0, []string{"deployment", "get", dep.ID}, "Status:", "succeeded", "Result:", "exit code 0", "Variables:", "name, size, tags", "inline archive")
	out := h.expect(0, []string{"deployment", "outputs", dep.ID}, "name", `"cli"`, `["a","b"]`, "(sensitive)")
	if strings.Contains(out.stdout, "s3cr3t") {
		t.Error("the outputs table shows a sensitive value")
	}
	h.expect(0, []string{"deployment", "outputs", dep.ID, "--show-sensitive"}, "s3cr3t")
	if got := h.must("deployment", "outputs", dep.ID, "name").stdout; got != "cli\n" {
		t.Errorf("outputs NAME printed %q, want the raw string", got)
	}
	if got := h.must("deployment", "outputs", dep.ID, "servers").stdout; got != "[\"a\",\"b\"]\n" {
		t.Errorf("outputs NAME printed %q, want JSON", got)
	}
	h.expect(cli.ExitError, []string{"deployment", "outputs", dep.ID, "nope"}, `has no output "nope"`, "name, servers, token")
	var outs api.Outputs
	if err := json.Unmarshal([]byte(h.must("deployment", "outputs", dep.ID, "-o", "json").stdout), &outs); err != nil || string(outs["token"].Value) != `"s3cr3t"` {
		t.Errorf("outputs -o json: %+v, %v", outs, err)
	}
	h.expect(0, []string{"deployment", "events", dep.ID}, "claimed", "cli_started", "finished", "succeeded")
	var evs api.List[api.Event]
	if err := json.Unmarshal([]byte(h.must("deployment", "events", dep.ID, "-o", "json").stdout), &evs); err != nil || len(evs.Items) != 3 {
		t.Errorf("events -o json: %+v, %v", evs, err)
	}
	h.expect(cli.ExitError, []string{"deployment", "cancel", dep.ID}, "already ended (succeeded)")
	h.expect(cli.ExitError, []string{"deployment", "get", "dep-nope"}, "deployment dep-nope does not exist in org acme; list deployments with `outpost deployment list`")

	// Failed: deploy --follow exits 3 with the failure's exit code and reason.
	failing := follow(h, "deploy", source(h), "--runner", "eu-1", "--state-key", "apps/web", "--plan", "--follow")
	id := waitQueued(t, admin)
	run = ag.Start(t, id)
	run.Log(t, "Error: boom\n")
	run.Finish(t, api.StatusFailed, 1)
	fr = waitResult(t, failing)
	h.check(fr, cli.ExitFailed, []string{"deploy --follow"}, "Error: boom", "Deployment "+id+" failed", "exit code 1")

	// Canceled while queued: cancel, then following exits 4 at once.
	id = queue(h)
	h.expect(0, []string{"deployment", "cancel", id}, "Deployment "+id+" canceled")
	h.expect(cli.ExitCanceled, []string{"deployment", "logs", id, "--follow"}, "canceled")

	// Lost: an apply whose CLI started, and whose agent vanished until its job lease expired.
	id = queue(h)
	ag.Start(t, id)
	h.skew.Store(int64(2 * orchestrator.DefaultLeaseDuration))
	h.inst.Sweep(t)
	lost := h.run("", "deployment", "logs", id, "--follow", "-o", "json")
	h.check(lost, cli.ExitLost, []string{"deployment logs --follow -o json"}, "lost", "check the state (key apps/web)")
	var final api.Deployment
	if err := json.Unmarshal([]byte(lost.stdout), &final); err != nil || final.ID != id || final.Status != api.StatusLost {
		t.Errorf("with -o json, stdout is the final deployment: %+v, %v\n%s", final, err, lost.stdout)
	}
}

// TestDeployLargeSources says the upload of a large source, and refuses one the API would
// refuse before sending a byte.
func TestDeployLargeSources(t *testing.T) {
	h := configured(t)
	clienttest.Register(t, h.admin(), h.inst.URL, "eu-1")
	noise := func(n int) string {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		return string(b)
	}
	h.write("big/main.tf", "# a module with a large file\n")
	h.write("big/blob.bin", noise(2<<20))
	h.expect(0, []string{"deploy", filepath.Join(h.dir, "big"), "--runner", "eu-1", "--state-key", "apps/big"}, "Packed", "2.0 MiB", "Uploading 2.7 MiB…", "Queued deployment")

	h.write("huge/blob.bin", noise(13<<20))
	r := h.expect(cli.ExitError, []string{"deploy", filepath.Join(h.dir, "huge"), "--runner", "eu-1", "--state-key", "apps/huge"},
		"more than the 12 MiB a deployment can carry", "--git")
	if strings.Contains(r.stderr, "Uploading") {
		t.Errorf("a source beyond the limit was uploaded:\n%s", r)
	}
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	_ = json.Compact(&b, raw)
	return b.String()
}

// waitQueued waits for the next queued deployment of the org.
func waitQueued(t *testing.T, admin *client.AdminClient) string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		l, err := admin.ListDeployments(t.Context(), client.DeploymentFilter{Status: api.StatusQueued})
		if err == nil && len(l) > 0 {
			return l[0].ID
		}
	}
	t.Fatal("no deployment was queued")
	return ""
}

// TestInterruptWhileFollowingDetaches sends Ctrl-C to a command following a running
// deployment without a terminal: it detaches, says how to follow again and to cancel, and exits
// 130; the deployment runs on.
func TestInterruptWhileFollowingDetaches(t *testing.T) {
	h := configured(t)
	ag := clienttest.Register(t, h.admin(), h.inst.URL, "eu-1")
	id := queue(h)
	run := ag.Start(t, id)
	run.Log(t, "terraform_data.x: Creating...\n")
	intr := make(chan os.Signal, 1)
	var out clienttest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(t.Context(), []string{"deployment", "logs", id, "--follow"},
			cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: h.getenv, Interrupts: intr})
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "Creating..."); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the log did not arrive:\n%s", out.String())
		}
	}
	intr <- syscall.SIGINT
	select {
	case code := <-done:
		if code != cli.ExitInterrupted {
			t.Errorf("exit %d, want %d", code, cli.ExitInterrupted)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Ctrl-C did not end the follow")
	}
	for _, want := range []string{"Detached from deployment " + id, "outpost deployment logs " + id + " --follow", "outpost deployment cancel " + id} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if d, err := h.admin().GetDeployment(t.Context(), id); err != nil || d.Status != api.StatusRunning || d.CancelRequested {
		t.Errorf("after detaching, the deployment: %+v, %v; want it running on", d, err)
	}
}

// TestFollowSaysWhyItWaits: before the CLI's first line, deploy --follow says the deployment was
// claimed and then why it waits, in the reason's word and the cluster's, as soon as the agent
// reports it; then it follows the log to the end as usual.
func TestFollowSaysWhyItWaits(t *testing.T) {
	h := configured(t)
	ag := clienttest.Register(t, h.admin(), h.inst.URL, "eu-1")
	var stdout, stderr clienttest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(t.Context(), []string{"deploy", source(h), "--runner", "eu-1", "--state-key", "apps/web", "--follow"},
			cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: h.getenv})
	}()
	waitFor := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(stderr.String(), what); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("deploy --follow did not say %q:\n%s", what, stderr.String())
			}
		}
	}
	waitFor("Queued deployment dep-")
	var id string
	for deadline := time.Now().Add(10 * time.Second); id == ""; time.Sleep(20 * time.Millisecond) {
		list, err := h.admin().ListDeployments(t.Context(), client.DeploymentFilter{})
		if err == nil && len(list) == 1 {
			id = list[0].ID
		}
		if time.Now().After(deadline) {
			t.Fatal("the deployment was not queued")
		}
	}
	run := ag.Claim(t, id)
	waitFor("Claimed by the agent of runner eu-1 (attempt 1)")
	const pull = "ErrImagePull: container main cannot get image registry.example.com/tf:1: 401 Unauthorized; check the pull secret"
	run.Waiting(t, api.ReasonImagePull, pull, "401 Unauthorized")
	waitFor("Waiting (image_pull): " + pull)
	run.Started(t)
	run.Log(t, "Initializing the backend...\n")
	run.Finish(t, api.StatusSucceeded, 0)
	select {
	case code := <-done:
		if code != cli.ExitOK {
			t.Fatalf("exit %d:\n%s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("deploy --follow did not end")
	}
	if !strings.Contains(stdout.String(), "Initializing the backend") || strings.Count(stderr.String(), "Waiting (image_pull)") != 1 {
		t.Errorf("stdout %q, stderr:\n%s\nwant the log on stdout and the wait said once", stdout.String(), stderr.String())
	}
}
