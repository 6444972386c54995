package e2e

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/cli"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// cliConfig is the configuration the CLI test deploys: no provider to download, a symlinked
// tfvars file, and a command whose exit code and duration the variables choose.
const cliConfig = `
variable "name" { type = string }
variable "exit_code" {
  type    = number
  default = 0
}
variable "sleep" {
  type    = number
  default = 0
}
resource "terraform_data" "app" {
  input = var.name
  provisioner "local-exec" { command = "sleep ${var.sleep}; exit ${var.exit_code}" }
}
output "name" { value = terraform_data.app.output }
output "region" { value = var.region }
`

// outpostCLI runs the outpost command line in-process against an env's orchestrator.
type outpostCLI struct {
	t   *testing.T
	env map[string]string
}

type cliRun struct {
	code           int
	stdout, stderr string
}

// run runs `outpost args...`; stdout, when given, receives the output as it comes.
func (c *outpostCLI) run(stdout *clienttest.Buffer, args ...string) cliRun {
	if stdout == nil {
		stdout = &clienttest.Buffer{}
	}
	var stderr clienttest.Buffer
	code := cli.Run(context.Background(), args, cli.Env{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: &stderr,
		Getenv: func(k string) string { return c.env[k] }})
	r := cliRun{code: code, stdout: stdout.String(), stderr: stderr.String()}
	c.t.Logf("$ outpost %s\n%s%s(exit %d)", strings.Join(args, " "), r.stdout, r.stderr, code)
	return r
}

func (c *outpostCLI) must(args ...string) cliRun {
	c.t.Helper()
	r := c.run(nil, args...)
	if r.code != 0 {
		c.t.Fatalf("outpost %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

var queuedID = regexp.MustCompile(`Queued deployment (dep-[a-z0-9]+)`)

// TestCLIDeployFollowOnARealAgent registers a state storage and a runner with the outpost CLI,
// runs the agent (process executor, real terraform, state in the test bed's Secrets) for it, and
// deploys a local directory with `outpost deploy --follow`: the log streams live and the exit
// code is the deployment's result (succeeded 0, failed 3, canceled 4).
func TestCLIDeployFollowOnARealAgent(t *testing.T) {
	t.Parallel()
	tf := "/usr/local/bin/terraform"
	if _, err := os.Stat(tf); err != nil {
		t.Fatalf("terraform CLI not found at %s (the machines have Terraform 1.11 there): %v", tf, err)
	}
	e := newEnv(t, "", 5)
	c := &outpostCLI{t: t, env: map[string]string{"OUTPOST_API_URL": e.orch.URL, "OUTPOST_ORG_ID": "acme", "OUTPOST_TOKEN": e.orch.AdminToken,
		"OUTPOST_CONFIG": filepath.Join(t.TempDir(), "config.yaml")}}

	// Register with the CLI, from files, the key the agent signs with.
	dir := t.TempDir()
	pemKey, err := os.ReadFile(e.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := keys.ParsePrivatePEM(pemKey)
	if err != nil {
		t.Fatal(err)
	}
	pubKey, ok := priv.Public().(ed25519.PublicKey)
	if !ok {
		t.Fatalf("the runner's key is a %T", priv.Public())
	}
	pub, _ := keys.EncodePublicPEM(pubKey)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c.must("state-storage", "create", "-f", write("storage.yaml", "id: web-states\ntype: kubernetes\nkubernetes:\n  namespace: "+e.ns+"\n"))
	c.must("runner", "create", "-f", write("runner.yaml", "id: web\nstate_storage_id: web-states\njob:\n  namespace: "+e.ns+"\n  service_account: deployer\n"),
		"--set", "public_keys.0=@"+write("runner.pub", pub))

	stateAddr, healthAddr := porttest.Addr(t), porttest.Addr(t)
	e.startAgent("agent-0", "--runner-id", "web", "--executor", "process", "--leader-elect=false", "--work-dir", t.TempDir(),
		"--agent-binary", agentBinary(t), "--cli", tf, "--state-listen", stateAddr, "--state-url", "http://"+stateAddr, "--health-listen", healthAddr)
	testbed.WaitFor(t, 30*time.Second, "the agent to connect", func() (bool, string) {
		r := c.run(nil, "runner", "get", "web", "-o", "json")
		return strings.Contains(r.stdout, `"connected": true`), r.stdout
	})

	// The source: what deploy packs, what it leaves out, and a symlink inside the directory.
	src := filepath.Join(dir, "infra")
	write("infra/main.tf", cliConfig)
	write("infra/env/dev.tfvars", "region = \"eu-west-1\"\n")
	write("infra/variables.tf", "variable \"region\" { type = string }\n")
	write("infra/.terraform/providers/junk", "never uploaded")
	write("infra/.git/HEAD", "ref: refs/heads/main\n")
	if err := os.Symlink("env/dev.tfvars", filepath.Join(src, "dev.auto.tfvars")); err != nil {
		t.Fatal(err)
	}

	applied := c.run(nil, "deploy", src, "--runner", "web", "--state-key", "apps/cli", "--var", "name=hello", "--follow")
	if applied.code != cli.ExitOK || !strings.Contains(applied.stdout, "Apply complete! Resources: 1 added") ||
		!strings.Contains(applied.stderr, "left out .git/, .terraform/") || !regexp.MustCompile(`Deployment dep-\w+ succeeded in [\d.]+s \(attempt 1\): exit code 0`).MatchString(applied.stderr) {
		t.Fatalf("deploy --follow of a succeeding apply: exit %d\n%s%s", applied.code, applied.stdout, applied.stderr)
	}
	id := queuedID.FindStringSubmatch(applied.stderr)[1]
	if got := c.must("deployment", "outputs", id, "name").stdout; got != "hello\n" {
		t.Errorf("output name: %q", got)
	}
	if got := c.must("deployment", "outputs", id, "region").stdout; got != "eu-west-1\n" {
		t.Errorf("output region (from the symlinked tfvars): %q", got)
	}
	c.must("deployment", "events", id)

	// The same state again, as a plan: nothing to change.
	plan := c.run(nil, "deploy", src, "--runner", "web", "--state-key", "apps/cli", "--var", "name=hello", "--plan", "--follow")
	if plan.code != cli.ExitOK || !strings.Contains(plan.stdout, "No changes.") {
		t.Fatalf("plan of the applied state: exit %d\n%s%s", plan.code, plan.stdout, plan.stderr)
	}

	// A failing command: exit code 3, and the failure in the log and the summary.
	failed := c.run(nil, "deploy", src, "--runner", "web", "--state-key", "apps/failing", "--var", "name=x", "--var", "exit_code=3", "--follow")
	if failed.code != cli.ExitFailed || !strings.Contains(failed.stdout, "exit status 3") || !strings.Contains(failed.stderr, " failed in ") {
		t.Fatalf("deploy --follow of a failing apply: exit %d, want %d\n%s%s", failed.code, cli.ExitFailed, failed.stdout, failed.stderr)
	}

	// Canceled while it runs: the follower sees the run stop and exits 4.
	var live clienttest.Buffer
	done := make(chan cliRun, 1)
	go func() {
		done <- c.run(&live, "deploy", src, "--runner", "web", "--state-key", "apps/slow", "--var", "name=slow", "--var", "sleep=60", "--follow")
	}()
	testbed.WaitFor(t, 60*time.Second, "terraform to start creating", func() (bool, string) {
		return strings.Contains(live.String(), "terraform_data.app: Creating..."), live.String()
	})
	list := c.must("deployment", "list", "--status", "running", "-o", "json")
	slow := regexp.MustCompile(`"id": "(dep-[a-z0-9]+)"`).FindStringSubmatch(list.stdout)
	if slow == nil {
		t.Fatalf("no running deployment in %s", list.stdout)
	}
	c.must("deployment", "cancel", slow[1])
	select {
	case r := <-done:
		if r.code != cli.ExitCanceled || !strings.Contains(r.stderr, "canceled") {
			t.Fatalf("deploy --follow of a canceled apply: exit %d, want %d\n%s%s", r.code, cli.ExitCanceled, r.stdout, r.stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the canceled deployment did not end within 2 minutes")
	}
	d, err := e.admin.GetDeployment(t.Context(), slow[1])
	if err != nil || d.Status != api.StatusCanceled {
		t.Fatalf("canceled deployment: %+v, %v", d, err)
	}
}
