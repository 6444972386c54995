package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/cli -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test ./internal/cli -run %s -update rewrites it)\n--- got\n%s--- want\n%s", path, t.Name(), got, want)
	}
}

func at(s string) *time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return &t
}

// TestHumanTablesGolden renders the tables and detail views of runners, state storages,
// deployments and outputs from fixed objects and a fixed clock.
func TestHumanTablesGolden(t *testing.T) {
	t.Setenv("TZ", "UTC")
	time.Local = time.UTC
	now := *at("2026-11-23T12:00:00Z")
	pub, _, _ := keys.Generate()
	pem, _ := keys.EncodePublicPEM(pub)
	runners := []api.Runner{
		{ID: "eu-1", Description: "EU production", PublicKeys: []string{"not a key"}, StateStorageID: "eu-1-states",
			Job:            api.RunnerJob{Namespace: "outpost-jobs", ServiceAccount: "outpost-job", PodTemplate: `{"spec":{"containers":[{"name":"main"}]}}`},
			MaxConcurrency: 5, JobTimeoutSeconds: 3600, CreatedAt: *at("2026-11-01T09:00:00Z"), UpdatedAt: *at("2026-11-20T09:00:00Z"),
			Status: api.RunnerStatus{Connected: true, LastSeenAt: at("2026-11-23T11:59:58Z"), AgentVersion: "1.4.0", KeyFingerprint: "SHA256:abc"}},
		{ID: "us-2", PublicKeys: []string{pem}, StateStorageID: "us-states", Job: api.RunnerJob{Namespace: "jobs", ServiceAccount: "deployer"},
			MaxConcurrency: 20, JobTimeoutSeconds: 5400, CreatedAt: *at("2026-11-23T10:00:00Z"), UpdatedAt: *at("2026-11-23T10:00:00Z"),
			Status: api.RunnerStatus{LastSeenAt: at("2026-11-21T12:00:00Z"), AgentVersion: "1.3.9"}},
		{ID: "lab", PublicKeys: []string{pem}, StateStorageID: "lab", Job: api.RunnerJob{Namespace: "lab", ServiceAccount: "lab"},
			MaxConcurrency: 1, JobTimeoutSeconds: 600, CreatedAt: *at("2026-11-23T11:58:30Z"), UpdatedAt: *at("2026-11-23T11:58:30Z")},
		{ID: "locked", PublicKeys: []string{"not a key"}, StateStorageID: "lab", Job: api.RunnerJob{Namespace: "lab", ServiceAccount: "lab"},
			MaxConcurrency: 1, JobTimeoutSeconds: 600, CreatedAt: *at("2026-11-22T11:00:00Z"), UpdatedAt: *at("2026-11-23T11:00:00Z"),
			Status: api.RunnerStatus{LastSeenAt: at("2026-11-23T11:00:00Z"), AgentVersion: "1.4.0", LastRefusal: &api.RunnerRefusal{
				Code: api.CodeUnknownKey, At: *at("2026-11-23T11:59:50Z"), KeyFingerprint: "SHA256:stray",
				Message: "the agent signs with key SHA256:stray, which the runner does not have; put the runner's private key in the agent's key Secret, or add its public key to the runner"}}},
	}
	var b bytes.Buffer
	table(&b, runnerRows(now, runners))
	golden(t, "runner-list.txt", b.String())
	b.Reset()
	details(&b, runnerFields(now, &runners[0]))
	golden(t, "runner-get.txt", b.String())
	b.Reset()
	details(&b, runnerFields(now, &runners[3]))
	golden(t, "runner-get-refused.txt", b.String())

	storages := []api.StateStorage{
		{StateStorageInput: api.StateStorageInput{ID: "eu-1-states", Type: "kubernetes", Kubernetes: &api.KubernetesStateSpec{Namespace: "outpost-states"}},
			CreatedAt: *at("2026-11-01T09:00:00Z")},
		{StateStorageInput: api.StateStorageInput{ID: "bucket", Type: "s3", Description: "shared bucket of the platform team, with a long description",
			S3: &api.S3StateSpec{Bucket: "tf-state", Region: "eu-west-1", PathPrefix: "teams/a"}}, CreatedAt: *at("2026-11-23T11:00:00Z")},
		{StateStorageInput: api.StateStorageInput{ID: "gcs", Type: "gcs", GCS: &api.GCSStateSpec{Bucket: "states"}}, CreatedAt: *at("2026-11-23T11:00:00Z")},
		{StateStorageInput: api.StateStorageInput{ID: "azure", Type: "azurerm", AzureRM: &api.AzureRMStateSpec{StorageAccountName: "tfstate",
			ContainerName: "states", ResourceGroupName: "rg"}}, CreatedAt: *at("2026-11-23T11:00:00Z")},
	}
	b.Reset()
	table(&b, stateStorageRows(now, storages))
	golden(t, "state-storage-list.txt", b.String())

	one, three := 1, 0
	deps := []api.Deployment{
		{ID: "dep-4kq2x7mbh3z9p", RunnerID: "eu-1", Operation: api.OperationApply, StateKey: "apps/web", Status: api.StatusRunning,
			CancelRequested: true, Attempt: 1, CreatedAt: *at("2026-11-23T11:55:00Z"), StartedAt: at("2026-11-23T11:56:00Z")},
		{ID: "dep-pu4ltregiyewe", RunnerID: "eu-1", Operation: api.OperationPlan, StateKey: "apps/api", Status: api.StatusFailed, Attempt: 2,
			ExitCode: &one, Reason: "cli_failed", Message: "terraform plan exited 1\nError: boom", CreatedAt: *at("2026-11-23T09:00:00Z"),
			ClaimedAt: at("2026-11-23T09:00:01Z"), StartedAt: at("2026-11-23T09:00:02Z"), FinishedAt: at("2026-11-23T09:01:32Z"),
			TimeoutSeconds: 1800, LogSize: 5 << 10, Source: api.Source{Git: &api.GitSource{URL: "https://git.example.com/infra.git", Ref: "main", Path: "stacks/api"}},
			Variables: map[string]json.RawMessage{"size": json.RawMessage("3"), "name": json.RawMessage(`"x"`)}},
		{ID: "dep-rdg3jmvanjqwg", RunnerID: "us-2", Operation: api.OperationDestroy, StateKey: "apps/old", Status: api.StatusQueued, Attempt: 1,
			CreatedAt: *at("2026-11-20T12:00:00Z")},
		{ID: "dep-a2b3c4d5e6f7g", RunnerID: "us-2", Operation: api.OperationApply, StateKey: "apps/old", Status: api.StatusSucceeded, Attempt: 1,
			ExitCode: &three, CreatedAt: *at("2026-11-23T11:00:00Z"), StartedAt: at("2026-11-23T11:00:05Z"), FinishedAt: at("2026-11-23T11:00:17Z"),
			Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: make([]byte, 2300)}}},
	}
	b.Reset()
	table(&b, deploymentRows(now, deps))
	golden(t, "deployment-list.txt", b.String())
	b.Reset()
	details(&b, deploymentFields(now, &deps[1]))
	golden(t, "deployment-get.txt", b.String())

	b.Reset()
	table(&b, outputRows(api.Outputs{"greeting": {Value: json.RawMessage(`"hello"`)}, "api_token": {Value: json.RawMessage(`"x"`), Sensitive: true},
		"servers": {Value: json.RawMessage(`["server-01","server-02"]`)}}, false))
	golden(t, "deployment-outputs.txt", b.String())
}

// TestEveryCommandHasHelpWithExamples walks the command tree: every command a person runs has a
// one-line summary and examples, and every group has commands.
func TestEveryCommandHasHelpWithExamples(t *testing.T) {
	a := &app{env: Env{Getenv: func(string) string { return "" }}}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" || (c.Parent() != nil && c.Parent().Name() == "completion") {
			return
		}
		if c.Short == "" {
			t.Errorf("%s has no summary", c.CommandPath())
		}
		switch {
		case c.Runnable() && !c.HasSubCommands() && c.Example == "":
			t.Errorf("%s has no examples", c.CommandPath())
		case !c.Runnable() && !c.HasSubCommands():
			t.Errorf("%s neither runs nor has commands", c.CommandPath())
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(a.rootCommand())
}

// TestAskWhatToDoAfterCtrlC answers the question put after Ctrl-C while following.
func TestAskWhatToDoAfterCtrlC(t *testing.T) {
	dep := &api.Deployment{ID: "dep-x", Operation: api.OperationApply, RunnerID: "eu-1"}
	for answer, want := range map[string]choice{"c\n": choiceCancel, "cancel\n": choiceCancel, "f\n": choiceResume, "\n": choiceDetach, "d\n": choiceDetach, "": choiceDetach} {
		var errb bytes.Buffer
		a := &app{env: Env{Stdin: strings.NewReader(answer), Stderr: &errb}}
		if got := a.ask(t.Context(), dep, make(chan os.Signal)); got != want {
			t.Errorf("answer %q: choice %d, want %d", answer, got, want)
		}
		if !strings.Contains(errb.String(), "[c] cancel it") || !strings.Contains(errb.String(), "outpost deployment logs dep-x --follow") {
			t.Errorf("the question:\n%s", errb.String())
		}
	}
	// A second Ctrl-C while the question waits detaches.
	r, w, _ := os.Pipe()
	defer w.Close()
	defer r.Close()
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGINT
	a := &app{env: Env{Stdin: r, Stderr: &bytes.Buffer{}}}
	if got := a.ask(t.Context(), dep, sigs); got != choiceDetach {
		t.Errorf("Ctrl-C during the question: choice %d, want detach", got)
	}
}
