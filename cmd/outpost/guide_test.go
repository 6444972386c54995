package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// The command-line section of the guide "Migrating from the Humanitec kubernetes-agent runner"
// shows these two files (templates/guides/humanitec-migration.md.tmpl).
const (
	guideScript     = "../../examples/guides/humanitec-migration/cli.sh"
	guideRunnerFile = "../../examples/guides/humanitec-migration/runner-config.yaml"
)

// humanitecKey is the public key of Humanitec's documented runner-config.yaml.
const humanitecKey = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAc5dgCx4ano39JT0XgTsHnts3jej+5xl7ZAwSIrKpef0=\n-----END PUBLIC KEY-----\n"

// TestHumanitecGuideCLI runs the guide's script as a user would, with bash, jq and the built
// outpost binary on PATH, against a real orchestrator: Humanitec's runner-config.yaml as their
// documentation prints it, and their `--set=runner_configuration=$(jq …)` form. It checks what
// was registered, and that both runners share no state storage they should not.
func TestHumanitecGuideCLI(t *testing.T) {
	for _, tool := range []string{"bash", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the guide's script needs %s: %v", tool, err)
		}
	}
	bin := t.TempDir()
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", filepath.Join(bin, "outpost"), ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	work := t.TempDir()
	copyFile(t, guideRunnerFile, filepath.Join(work, "runner-config.yaml"))
	pub, _, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := keys.EncodePublicPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "runner_public_key.pem"), []byte(pubPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(guideScript)
	if err != nil {
		t.Fatal(err)
	}

	o := orchestratortest.Start(t)
	cmd := exec.CommandContext(t.Context(), "bash", script)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"OUTPOST_API_URL="+o.URL, "OUTPOST_ORG_ID=acme", "OUTPOST_TOKEN="+o.AdminToken,
		"OUTPOST_CONFIG="+filepath.Join(t.TempDir(), "config.yaml"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the guide's script failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		"runner my-runner created in org acme",
		"runner_configuration.key → public_keys[0]",
		"state_storage_configuration → state storage my-runner-states, created (namespace humanitec)",
		"runner kubernetes-agent-prod created in org acme",
		"state_storage_configuration → state storage kubernetes-agent-prod-states, created (namespace humanitec-kubernetes-agent-runner-job-ns)",
		"state_storage_configuration → state_storage_id my-runner-states (the existing kubernetes state storage namespace humanitec)",
		"runner my-runner updated",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the script's output lacks %q:\n%s", want, out)
		}
	}

	admin, err := client.NewAdminClient(o.URL, "acme", o.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	r, err := admin.GetRunner(t.Context(), "my-runner")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.PublicKeys) != 1 || r.PublicKeys[0] != humanitecKey || r.Job.Namespace != "default" || r.Job.ServiceAccount != "humanitec-runner" ||
		r.Job.PodTemplate != `{"metadata":{"labels":{"app.kubernetes.io/name":"humanitec-runner"}}}` || r.StateStorageID != "my-runner-states" ||
		r.Description != "moved from Humanitec" {
		t.Errorf("my-runner registered as %+v", r)
	}
	ss, err := admin.GetStateStorage(t.Context(), "my-runner-states")
	if err != nil || ss.Type != "kubernetes" || ss.Kubernetes == nil || ss.Kubernetes.Namespace != "humanitec" {
		t.Errorf("state storage my-runner-states: %+v, %v", ss, err)
	}
	r, err = admin.GetRunner(t.Context(), "kubernetes-agent-prod")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.PublicKeys) != 1 || strings.TrimSpace(r.PublicKeys[0]) != strings.TrimSpace(pubPEM) ||
		r.Job.Namespace != "humanitec-kubernetes-agent-runner-job-ns" || r.Job.ServiceAccount != "humanitec-kubernetes-agent-runner-job" ||
		r.StateStorageID != "kubernetes-agent-prod-states" {
		t.Errorf("kubernetes-agent-prod registered as %+v", r)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
