package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/cli"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// configured is a harness whose environment points at its orchestrator, as a CI job would.
func configured(t *testing.T) *harness {
	h := newHarness(t)
	h.setenv("OUTPOST_API_URL", h.inst.URL)
	h.setenv("OUTPOST_ORG_ID", "acme")
	h.setenv("OUTPOST_TOKEN", h.inst.AdminToken)
	return h
}

func publicKeyFile(h *harness, name string) (string, string) {
	pub, _, err := keys.Generate()
	if err != nil {
		h.t.Fatal(err)
	}
	pem, _ := keys.EncodePublicPEM(pub)
	return h.write(name, pem), keys.Fingerprint(pub)
}

// TestRegisterRunnersAndStateStorages drives the create, list, get, update and delete commands
// of runners and state storages against the orchestrator, from YAML and JSON files, --set
// overrides and `get -o yaml` output fed back to update.
func TestRegisterRunnersAndStateStorages(t *testing.T) {
	h := configured(t)
	// A fresh organisation does not exist yet: the error says so and how to begin it (a mistyped
	// organisation gets the same answer, not an empty list).
	h.expect(cli.ExitError, []string{"state-storage", "list"}, `no such organisation "acme"`, "outpost state-storage create -f FILE", "--org")
	h.expect(cli.ExitError, []string{"runner", "get", "eu-1"}, `no such organisation "acme"`)

	// State storages, from YAML and from JSON on stdin.
	ss := h.write("storage.yaml", "id: eu-1-states\ntype: kubernetes\nkubernetes:\n  namespace: outpost-states\n")
	h.expect(0, []string{"state-storage", "create", "-f", ss}, "state storage eu-1-states created in org acme")
	h.expect(cli.ExitError, []string{"state-storage", "create", "-f", ss}, "state storage eu-1-states already exists in org acme", "outpost state-storage update eu-1-states -f FILE")
	r := h.run(`{"id": "bucket", "type": "s3", "s3": {"bucket": "tf-state", "region": "eu-west-1"}}`, "state-storage", "create", "-f", "-", "-o", "json")
	h.check(r, 0, []string{"state-storage create -f -"})
	var created api.StateStorage
	if err := json.Unmarshal([]byte(r.stdout), &created); err != nil || created.S3 == nil || created.S3.Bucket != "tf-state" || created.CreatedAt.IsZero() {
		t.Fatalf("create -o json: %+v, %v", created, err)
	}
	h.expect(0, []string{"state-storage", "update", "bucket", "--set", "s3.path_prefix=teams/a", "--set", "description=shared bucket"}, "state storage bucket updated")
	h.expect(0, []string{"state-storage", "list"}, "s3://tf-state/teams/a (eu-west-1)", "namespace outpost-states", "shared bucket")
	h.expect(0, []string{"state-storage", "get", "bucket"}, "Location:", "s3://tf-state/teams/a")
	h.expect(cli.ExitError, []string{"state-storage", "get", "nope"}, "state storage nope does not exist in org acme; list state storages with `outpost state-storage list`")
	h.expect(cli.ExitError, []string{"state-storage", "create", "--set", "id=x", "--set", "type=ftp"}, "type")
	h.expect(0, []string{"state-storage", "delete", "bucket"}, "state storage bucket deleted")

	// Runners: the key from a file with --set, the rest from YAML.
	keyFile, fingerprint := publicKeyFile(h, "runner.pub")
	rf := h.write("runner.yaml", "id: eu-1\ndescription: EU cluster\nstate_storage_id: eu-1-states\njob:\n  namespace: outpost-jobs\n  service_account: outpost-job\n")
	h.expect(cli.ExitError, []string{"runner", "create", "-f", rf}, "public_keys", "at least one public key")
	h.expect(0, []string{"runner", "create", "-f", rf, "--set", "public_keys.0=@" + keyFile, "--set", "max_concurrency=3"}, "runner eu-1 created in org acme")
	h.expect(cli.ExitUsage, []string{"runner", "create", "eu-2", "-f", rf}, "the id argument is eu-2 but "+rf+" says id eu-1")
	h.expect(cli.ExitUsage, []string{"runner", "update", "eu-1", "--set", "job.image=x"}, `no field "image" here; the fields are namespace, service_account, pod_template`)
	h.expect(cli.ExitUsage, []string{"runner", "update", "eu-1", "--set", "max_concurrency=lots"}, `"lots" is not a whole number`)
	h.expect(cli.ExitUsage, []string{"runner", "update", "eu-1"}, "nothing to change")
	h.expect(cli.ExitUsage, []string{"runner", "lst"}, `unknown command "lst" for "outpost runner"; did you mean`, "list")
	h.expect(cli.ExitError, []string{"runner", "create", "-f", h.write("bad.yaml", "id: eu-9\ncolour: red\n")}, `unknown field "colour"`, "state_storage_id")
	h.expect(cli.ExitError, []string{"runner", "get", "eu-2"}, "runner eu-2 does not exist in org acme; list runners with `outpost runner list`")
	h.expect(cli.ExitError, []string{"runner", "delete", "eu-2"}, "runner eu-2 does not exist in org acme")

	h.expect(0, []string{"runner", "list"}, "eu-1", "never connected", "eu-1-states", "outpost-jobs")
	h.expect(0, []string{"runner", "get", "eu-1"}, "Description:", "EU cluster", fingerprint, "Max concurrency:  3")
	var list api.List[api.Runner]
	if err := json.Unmarshal([]byte(h.must("runner", "list", "-o", "json").stdout), &list); err != nil || len(list.Items) != 1 || list.Items[0].MaxConcurrency != 3 {
		t.Fatalf("runner list -o json: %+v, %v", list, err)
	}

	// --set on the runner as it is keeps every other field.
	h.must("runner", "update", "eu-1", "--set", "description=moved")
	got, err := h.admin().GetRunner(t.Context(), "eu-1")
	if err != nil || got.Description != "moved" || got.MaxConcurrency != 3 || len(got.PublicKeys) != 1 {
		t.Fatalf("after update --set: %+v, %v", got, err)
	}
	// `get -o yaml`, edited, fed back to update -f: read-only fields (status, timestamps) are
	// dropped; a second key is added for a rotation.
	yml := h.must("runner", "get", "eu-1", "-o", "yaml").stdout
	if !strings.Contains(yml, "status:") || !strings.Contains(yml, "type: kubernetes-agent") {
		t.Fatalf("get -o yaml:\n%s", yml)
	}
	edited := h.write("edited.yaml", strings.Replace(yml, "description: moved", "description: edited", 1))
	second, _ := publicKeyFile(h, "second.pub")
	h.expect(0, []string{"runner", "update", "eu-1", "-f", edited, "--set", "public_keys.1=@" + second}, "runner eu-1 updated")
	got, err = h.admin().GetRunner(t.Context(), "eu-1")
	if err != nil || got.Description != "edited" || len(got.PublicKeys) != 2 || got.MaxConcurrency != 3 {
		t.Fatalf("after update -f: %+v, %v", got, err)
	}
	h.expect(cli.ExitError, []string{"runner", "update", "eu-1", "-f", h.write("wrongtype.yaml", strings.Replace(yml, "type: kubernetes-agent", "type: vm", 1))},
		"the only runner type is kubernetes-agent")

	h.expect(cli.ExitError, []string{"state-storage", "delete", "eu-1-states"}, "eu-1")
	h.expect(0, []string{"runner", "delete", "eu-1"}, "runner eu-1 deleted")
	h.expect(0, []string{"state-storage", "delete", "eu-1-states"}, "state storage eu-1-states deleted")
	h.expect(0, []string{"runner", "list"}, "No runners in org acme yet")
}

// TestShellCompletion generates the completion scripts and asks the command line for the
// completions a shell would ask for: ids from the orchestrator, profiles from the config file.
func TestShellCompletion(t *testing.T) {
	h := configured(t)
	clienttest.Register(t, h.admin(), h.inst.URL, "eu-1")
	for shell, want := range map[string]string{"bash": "__start_outpost", "zsh": "#compdef outpost", "fish": "complete -c outpost"} {
		h.expect(0, []string{"completion", shell}, want)
	}
	h.expect(0, []string{"__complete", "runner", "get", ""}, "eu-1\n", ":4")
	h.expect(0, []string{"__complete", "deploy", "--runner", ""}, "eu-1\n")
	h.expect(0, []string{"__complete", "state-storage", "delete", ""}, "eu-1-states\n")
	h.expect(0, []string{"__complete", "deployment", "list", "--status", ""}, "queued\n", "lost\n")
	h.expect(0, []string{"__complete", "config", "set", ""}, "api_url\t", "token_file\t")
	h.must("config", "set", "--profile", "prod", "org", "acme")
	h.expect(0, []string{"__complete", "config", "use", ""}, "prod\n")
	// Without a working connection a completion offers nothing and prints no error.
	h.setenv("OUTPOST_TOKEN", "wrong")
	if r := h.must("__complete", "runner", "get", ""); strings.Contains(r.stdout, "eu-1") || strings.Contains(r.stdout, "Error") {
		t.Errorf("completion with a refused token:\n%s", r)
	}
}
