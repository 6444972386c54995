package cli_test

import (
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/cli"
)

// TestRunnerFileShapes feeds `runner create` and `runner update` the runner files users paste:
// Humanitec's hctl shape (the key under job, as their extended example has it; s3 state in the
// Terraform provider's nested shape), Outpost's with a pod template as a YAML mapping or as
// YAML text, and the wrong shapes, whose errors say which shapes are taken.
func TestRunnerFileShapes(t *testing.T) {
	h := configured(t)
	keyFile, _ := publicKeyFile(h, "runner.pub")
	pem := h.readFile(keyFile)

	// Their extended example: the key in job.key; an s3 state storage in the nested shape.
	ext := h.write("extended.yaml", `runner_configuration:
  type: kubernetes-agent
  job:
    key: |
`+indentLines(pem, "      ")+`    namespace: humanitec-runner
    service_account: humanitec-runner
    pod_template:
      spec:
        containers:
          - name: main
            env:
              - name: TF_EXAMPLE
                value: "1"
state_storage_configuration:
  type: s3
  s3_configuration:
    bucket: tf-state
    region: eu-west-1
    path_prefix: runners
`)
	h.expect(0, []string{"runner", "create", "ext-1", "-f", ext}, "runner ext-1 created",
		"runner_configuration.job.key → public_keys[0]", "state storage ext-1-states, created (s3://tf-state/runners (eu-west-1))")
	r, err := h.admin().GetRunner(t.Context(), "ext-1")
	if err != nil || r.PublicKeys[0] != pem || r.StateStorageID != "ext-1-states" ||
		r.Job.PodTemplate != `{"spec":{"containers":[{"env":[{"name":"TF_EXAMPLE","value":"1"}],"name":"main"}]}}` {
		t.Fatalf("ext-1: %+v, %v", r, err)
	}
	// A second runner with the same state storage settings shares it; update keeps doing so.
	h.expect(0, []string{"runner", "create", "ext-2", "-f", ext}, "state_storage_id ext-1-states (the existing s3 state storage")
	h.expect(0, []string{"runner", "update", "ext-2", "-f", ext, "--set", "max_concurrency=2"}, "runner ext-2 updated", "state_storage_id ext-1-states")
	if r, err := h.admin().GetRunner(t.Context(), "ext-2"); err != nil || r.StateStorageID != "ext-1-states" || r.MaxConcurrency != 2 {
		t.Fatalf("ext-2: %+v, %v", r, err)
	}
	// A storage id taken by other settings is not overwritten.
	other := h.write("other.yaml", strings.Replace(h.readFile(ext), "bucket: tf-state", "bucket: elsewhere", 1))
	h.expect(cli.ExitError, []string{"runner", "create", "ext-1", "-f", other}, "state storage ext-1-states exists with other settings")

	// Outpost's shape with a pod template as a mapping, and as YAML text from --set @FILE.
	native := h.write("native.yaml", "id: nat-1\nstate_storage_id: ext-1-states\njob:\n  namespace: jobs\n  service_account: deployer\n  pod_template:\n    metadata:\n      labels: {team: a}\n")
	h.expect(0, []string{"runner", "create", "-f", native, "--set", "public_keys.0=@" + keyFile}, "runner nat-1 created", "job.pod_template: the mapping → a JSON string")
	tpl := h.write("tpl.yaml", "metadata:\n  labels:\n    team: b\n")
	h.expect(0, []string{"runner", "update", "nat-1", "--set", "job.pod_template=@" + tpl}, "runner nat-1 updated", "job.pod_template: YAML → a JSON string")
	if r, err := h.admin().GetRunner(t.Context(), "nat-1"); err != nil || r.Job.PodTemplate != `{"metadata":{"labels":{"team":"b"}}}` {
		t.Fatalf("nat-1: %+v, %v", r, err)
	}

	// Wrong shapes say what is taken.
	for _, bad := range []struct{ body, want string }{
		{"id: w\njob:\n  pod_template: [a, b]\n", "job.pod_template: a list is not a pod template; give a Kubernetes PodTemplateSpec as a YAML/JSON mapping (metadata:, spec:) or as a JSON string"},
		{"runner_configuration:\n  type: kubernetes-agent\n  job:\n    pod_template: 3\n", "a number is not a pod template"},
		{"runner_configuration:\n  type: vm\n", "type vm: Outpost runs kubernetes-agent runners only"},
		{"runner_configuration:\n  keys: []\n", `unknown field "keys"; the fields are type, key and job`},
		{"runner_configuration: {}\npublic_keys: []\n", "give the runner either in Humanitec's shape (runner_configuration) or in Outpost's"},
		{"id: w\nstate_storage_configuration: {type: ftp}\n", "type ftp: the state storage types are kubernetes, s3, gcs, azurerm"},
		{"id: w\nstate_storage_configuration: {type: kubernetes, name_space: x}\n", `kubernetes settings: unknown field "name_space"; the fields are namespace`},
		{"id: w\nstate_storage_id: x\nstate_storage_configuration: {type: kubernetes, namespace: x}\n", "the file also sets state_storage_id"},
	} {
		h.expect(cli.ExitError, []string{"runner", "create", "w", "-f", h.write("bad.yaml", bad.body)}, bad.want)
	}
	if _, err := h.admin().GetRunner(t.Context(), "w"); err == nil {
		t.Error("a refused file registered runner w")
	}
	storages, err := h.admin().ListStateStorages(t.Context())
	if err != nil || len(storages) != 1 {
		t.Errorf("state storages after the refused files: %+v, %v", storages, err)
	}
}

// indentLines indents every line of s.
func indentLines(s, by string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = by + l
		}
	}
	return strings.Join(lines, "")
}
