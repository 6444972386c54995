package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

const runnerExample = `id: eu-1
description: EU production cluster
public_keys:          # one or two PEM ed25519 keys (two while a key rotates)
  - |
    -----BEGIN PUBLIC KEY-----
    MCowBQYDK2VwAyEA…
    -----END PUBLIC KEY-----
state_storage_id: eu-1-states
job:
  namespace: outpost-jobs
  service_account: outpost-job
  pod_template:         # a PodTemplateSpec as a YAML mapping, or as a JSON string; none = the agent's defaults
    metadata:
      labels: {team: platform}
max_concurrency: 5      # 0 = 5
job_timeout_seconds: 3600
require_approval: false # true: applies and destroys run only as approved saved plans (deploy --save-plan)

# Humanitec's hctl runner file (runner_configuration, state_storage_configuration) is taken as
# it is: it is translated to the fields above, its state storage created or reused, and what
# was translated is said on stderr.`

func runnerResource() *resource[api.Runner, api.RunnerInput] {
	return &resource[api.Runner, api.RunnerInput]{
		kind: "runner", command: "runner", aliases: []string{"runners"},
		short: "Register and inspect runners (where deployments run, each served by one agent)",
		list:  func(ctx context.Context, s *session) ([]api.Runner, error) { return s.ListRunners(ctx) },
		get:   func(ctx context.Context, s *session, id string) (*api.Runner, error) { return s.GetRunner(ctx, id) },
		create: func(ctx context.Context, s *session, in api.RunnerInput) (*api.Runner, error) {
			return s.CreateRunner(ctx, in)
		},
		update: func(ctx context.Context, s *session, in api.RunnerInput) (*api.Runner, error) {
			return s.UpdateRunner(ctx, in)
		},
		remove:  func(ctx context.Context, s *session, id string) error { return s.DeleteRunner(ctx, id) },
		id:      func(in *api.RunnerInput) *string { return &in.ID },
		adapter: docAdapter{adapt: adaptRunner, foreign: hctlKeys},
		complete: func(ctx context.Context, s *session, tr *translation, in *api.RunnerInput) error {
			normalizePodTemplate(in, tr)
			return ensureStorage(ctx, s, tr, in)
		},
		rows:    runnerRows,
		fields:  runnerFields,
		example: runnerExample,
		removed: "The deployments still queued on a runner end canceled; the ones its agent runs are asked to cancel.",
	}
}

func agentState(r *api.Runner) string {
	refused := r.Status.Refused()
	switch {
	case r.Status.Connected:
		return "connected"
	case refused != nil && refused.Code == api.CodeUnknownKey:
		return "key refused"
	case refused != nil && refused.Code == api.CodeIncompatibleProtocol:
		return "incompatible version"
	case r.Status.LastSeenAt == nil:
		return "never connected"
	}
	return "disconnected"
}

func runnerRows(now time.Time, items []api.Runner) [][]string {
	rows := [][]string{{"ID", "AGENT", "LAST SEEN", "VERSION", "STATE STORAGE", "JOBS NAMESPACE", "MAX", "TIMEOUT"}}
	for i := range items {
		r := &items[i]
		last := "-"
		if r.Status.LastSeenAt != nil {
			last = ago(now, r.Status.LastSeenAt)
		}
		rows = append(rows, []string{r.ID, agentState(r), last, orDash(r.Status.AgentVersion), r.StateStorageID,
			r.Job.Namespace, strconv.Itoa(r.MaxConcurrency), short(time.Duration(r.JobTimeoutSeconds) * time.Second)})
	}
	return rows
}

func runnerFields(now time.Time, r *api.Runner) [][2]string {
	agent := agentState(r)
	if r.Status.AgentVersion != "" {
		agent += ", agent " + r.Status.AgentVersion
	}
	if r.Status.KeyFingerprint != "" {
		agent += ", signing with " + r.Status.KeyFingerprint
	}
	tpl := "the agent's defaults"
	if r.Job.PodTemplate != "" {
		tpl = fmt.Sprintf("custom (%s; see -o yaml)", size(int64(len(r.Job.PodTemplate))))
	}
	prints := make([]string, len(r.PublicKeys))
	for i, pem := range r.PublicKeys {
		if k, err := keys.ParsePublicPEM(pem); err == nil {
			prints[i] = keys.Fingerprint(k)
		} else {
			prints[i] = "(not a valid key)"
		}
	}
	fields := [][2]string{
		{"ID", r.ID},
		{"Description", r.Description},
		{"Agent", agent},
		{"Last seen", stamp(now, r.Status.LastSeenAt)},
		{"State storage", r.StateStorageID},
		{"Jobs namespace", r.Job.Namespace},
		{"Service account", r.Job.ServiceAccount},
		{"Pod template", tpl},
		{"Max concurrency", strconv.Itoa(r.MaxConcurrency)},
		{"Job timeout", short(time.Duration(r.JobTimeoutSeconds) * time.Second)},
		{"Approval", map[bool]string{true: "required: applies and destroys run only as approved saved plans", false: "not required"}[r.RequireApproval]},
		{"Public keys", strings.Join(prints, ", ")},
		{"Created", stamp(now, &r.CreatedAt)},
		{"Updated", stamp(now, &r.UpdatedAt)},
	}
	if ref := r.Status.Refused(); ref != nil {
		fields = slices.Insert(fields, 4, [2]string{"Refused", stamp(now, &ref.At) + ": " + ref.Message})
	}
	return fields
}
