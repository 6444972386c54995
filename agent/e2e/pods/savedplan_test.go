package pods

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/plansummary"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// reviewed is the configuration of the saved-plan test: a greeting, a sensitive variable that
// goes into a resource, and an output; reviewedExtra is the same configuration changed after
// the plan (another resource and a changed greeting).
var (
	reviewed = map[string]string{"main.tf": `
variable "greeting" {
  type = string
}

variable "secret" {
  type      = string
  sensitive = true
}

resource "terraform_data" "greeting" {
  input = var.greeting
}

resource "terraform_data" "secret" {
  input = var.secret
}

output "greeting" {
  value = terraform_data.greeting.output
}
`}
	reviewedExtra = map[string]string{"main.tf": reviewed["main.tf"] + `
resource "terraform_data" "extra" {
  input = "added after the plan"
}
`}
)

// TestSavedPlansOnRealPods: on a runner that requires approval, with OpenTofu and with Terraform in
// real job pods, a plan with save_plan keeps its plan file in the cluster and sends only its
// summary, which matches `show -json` of that very plan file and holds no value; an apply or a
// destroy that is not the apply of an approved plan is refused (approval_required); once
// approved, the apply of the plan runs `apply <planfile>` and applies exactly the plan, not a
// configuration changed after it; a plan made before the state moved is refused (stale_plan)
// before any job pod starts for it, an applied plan is not applied again, an expired plan and a
// discarded one are refused with their reasons. No value of the sensitive variable appears in the
// logs, the summaries or the events.
func TestSavedPlansOnRealPods(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		template bool
		local    string // the same CLI on this machine, for show -json of the plan file
	}{
		{name: "OpenTofu from the default job image", local: os.Getenv("OUTPOST_TOFU")},
		{name: "Terraform from the pod template's image", template: true, local: "/usr/local/bin/terraform"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.local == "" {
				t.Skip("OUTPOST_TOFU is not set (make test sets it)")
			}
			images(t, testbed.Shared(t))
			tpl := ""
			if tc.template {
				tpl = `{"spec": {"containers": [{"name": "main", "image": "` + registryVar + "/" + pushed.terraform + `"}]}}`
			}
			e := newEnv(t, envOptions{podTemplate: tpl})
			e.savedPlans(tc.local)
		})
	}
}

func (e *env) savedPlans(localCLI string) {
	t, ctx := e.t, e.t.Context()
	secret := "s3cr3t-" + rand.String(24)
	vars := func(greeting string) map[string]json.RawMessage {
		return map[string]json.RawMessage{"greeting": json.RawMessage(`"` + greeting + `"`), "secret": json.RawMessage(`"` + secret + `"`)}
	}
	e.setRequireApproval(true)

	// Nothing but the apply of an approved plan changes anything on this runner.
	for _, op := range []api.Operation{api.OperationApply, api.OperationDestroy} {
		_, err := e.admin.CreateDeployment(ctx, e.input(op, reviewed, vars("v1"), false))
		wantCode(t, "an unreviewed "+string(op), err, api.CodeApprovalRequired, 403)
	}

	start := time.Now()
	p1 := e.savePlan(reviewed, vars("v1"), 0)
	// The configuration changes after the plan: a second plan of it, never approved.
	p2 := e.savePlan(reviewedExtra, vars("v2"), 0)
	r1 := e.follow(p1.ID, start, 5*time.Minute)
	r2 := e.follow(p2.ID, start, 5*time.Minute)
	for _, r := range []run{r1, r2} {
		if r.d.Status != api.StatusSucceeded || !strings.Contains(r.log, "==> plan saved in the cluster") {
			t.Fatalf("plan %s: %s (%s)\n%s", r.d.ID, r.d.Status, r.d.Message, r.log)
		}
	}
	plan, err := e.admin.GetPlan(ctx, p1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Status != api.PlanReady || plan.Summary == nil {
		t.Fatalf("saved plan of %s: %+v, want ready with a summary", p1.ID, plan)
	}
	e.checkSummary(localCLI, p1.ID, plan.Summary)

	// Approve, then apply exactly that plan.
	approved, err := e.admin.ApprovePlan(ctx, p1.ID)
	if err != nil || approved.Status != api.PlanApproved || approved.ApprovedBy == "" || approved.ApprovedAt == nil {
		t.Fatalf("approve: %+v, %v", approved, err)
	}
	_, err = e.admin.ApplyPlan(ctx, p2.ID)
	wantCode(t, "the apply of a plan nobody approved", err, api.CodePlanNotApproved, 409)
	a, err := e.admin.ApplyPlan(ctx, p1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Operation != api.OperationApply || a.PlanOf != p1.ID {
		t.Fatalf("apply of the plan: %+v", a)
	}
	ra := e.follow(a.ID, time.Now(), 5*time.Minute)
	if ra.d.Status != api.StatusSucceeded {
		t.Fatalf("apply of the saved plan: %s (%s)\n%s", ra.d.Status, ra.d.Message, ra.log)
	}
	for _, want := range []string{"==> fetched the saved plan of deployment " + p1.ID, "outpost.tfplan", "==> applied the saved plan of deployment " + p1.ID} {
		if !strings.Contains(ra.log, want) {
			t.Errorf("the apply's log lacks %q:\n%s", want, ra.log)
		}
	}
	if strings.Contains(ra.log, "terraform_data.extra") || e.outputs(a.ID)["greeting"] != `"v1"` {
		t.Errorf("the apply did not apply exactly the approved plan (greeting %s):\n%s", e.outputs(a.ID)["greeting"], ra.log)
	}
	_, err = e.admin.ApplyPlan(ctx, p1.ID)
	wantCode(t, "a second apply of one plan", err, api.CodePlanApplied, 409)

	// The state moved since p2 was made: its apply is refused before any job pod starts, by the
	// orchestrator when the agent's state report arrived, else by the agent at the claim.
	if _, err := e.admin.ApprovePlan(ctx, p2.ID); err != nil {
		t.Fatal(err)
	}
	stale, err := e.admin.ApplyPlan(ctx, p2.ID)
	switch {
	case err != nil:
		wantCode(t, "the apply of a stale plan", err, api.CodeStalePlan, 409)
		t.Logf("stale plan refused at enqueue: %v", err)
	default:
		rs := e.follow(stale.ID, time.Now(), 2*time.Minute)
		if rs.d.Status != api.StatusFailed || rs.d.Reason != api.ReasonStalePlan {
			t.Fatalf("the apply of a stale plan: %s, reason %q (%s)\n%s", rs.d.Status, rs.d.Reason, rs.d.Message, rs.log)
		}
		e.checkTimeline(stale.ID, api.StepClaimed, api.StepFinished) // no Job, no pod
		t.Logf("stale plan refused at the claim: %s", rs.d.Message)
	}

	// The state moves behind the orchestrator's back (written in the cluster, so no state report
	// tells it): the enqueue passes, and the agent refuses the claim before any Job exists.
	p4 := e.savePlan(reviewed, vars("v1"), 0)
	if r4 := e.follow(p4.ID, time.Now(), 5*time.Minute); r4.d.Status != api.StatusSucceeded {
		t.Fatalf("plan p4: %s\n%s", r4.d.Status, r4.log)
	}
	if _, err := e.admin.ApprovePlan(ctx, p4.ID); err != nil {
		t.Fatal(err)
	}
	e.bumpSerial("reviewed")
	behind, err := e.admin.ApplyPlan(ctx, p4.ID)
	if err != nil {
		t.Fatalf("the apply of a plan whose state moved unreported: %v, want it queued (the agent refuses it)", err)
	}
	rb := e.follow(behind.ID, time.Now(), 2*time.Minute)
	if rb.d.Status != api.StatusFailed || rb.d.Reason != api.ReasonStalePlan {
		t.Fatalf("the apply of a plan whose state moved: %s, reason %q (%s)\n%s", rb.d.Status, rb.d.Reason, rb.d.Message, rb.log)
	}
	e.checkTimeline(behind.ID, api.StepClaimed, api.StepFinished) // no Job, no pod
	t.Logf("stale plan refused at the claim: %s", rb.d.Message)

	// A plan whose time is up is refused; so is a discarded one.
	p3 := e.savePlan(reviewed, vars("v1"), api.MinPlanTTLSeconds)
	r3 := e.follow(p3.ID, time.Now(), 5*time.Minute)
	if r3.d.Status != api.StatusSucceeded {
		t.Fatalf("short-lived plan: %s\n%s", r3.d.Status, r3.log)
	}
	if _, err := e.admin.ApprovePlan(ctx, p3.ID); err != nil {
		// Its ten seconds may be up already when the deployment's end reached the orchestrator.
		wantCode(t, "approve of a short-lived plan", err, api.CodePlanExpired, 409)
	}
	testbed.WaitFor(t, time.Minute, "the plan to expire", func() (bool, string) {
		p, err := e.admin.GetPlan(ctx, p3.ID)
		if err != nil {
			return false, err.Error()
		}
		return p.Status == api.PlanExpired, string(p.Status)
	})
	_, err = e.admin.ApplyPlan(ctx, p3.ID)
	wantCode(t, "the apply of an expired plan", err, api.CodePlanExpired, 409)
	if _, err := e.admin.DiscardPlan(ctx, p3.ID); err != nil {
		t.Fatal(err)
	}
	_, err = e.admin.ApplyPlan(ctx, p3.ID)
	wantCode(t, "the apply of a discarded plan", err, api.CodePlanDiscarded, 409)

	// The review is in the plan deployment's events, with who asked.
	evs, err := e.admin.ListEvents(ctx, p2.ID)
	if err != nil {
		t.Fatal(err)
	}
	var steps []api.Step
	for _, ev := range evs {
		if ev.Seq >= api.SeqReview {
			steps = append(steps, ev.Step)
			if ev.By == "" {
				t.Errorf("review event %s names nobody", ev.Step)
			}
		}
	}
	if !reflect.DeepEqual(steps, []api.Step{api.StepApplyRefused, api.StepApproved, api.StepApplyRefused}) &&
		!reflect.DeepEqual(steps, []api.Step{api.StepApplyRefused, api.StepApproved, api.StepApplyQueued}) {
		t.Errorf("review events of %s: %v", p2.ID, steps)
	}

	// The sensitive variable's value is nowhere in what the API answers about the plans, nor in
	// any log.
	for _, id := range []string{p1.ID, p2.ID, p3.ID, a.ID} {
		var answers []any
		for _, get := range []func() (any, error){
			func() (any, error) { return e.admin.GetPlan(ctx, id) },
			func() (any, error) { return e.admin.ListEvents(ctx, id) },
			func() (any, error) {
				c, err := e.admin.GetLogs(ctx, id, 0, 4<<20)
				if err != nil {
					return nil, err
				}
				return string(c.Data), nil // as text: JSON would hide it in base64
			},
			func() (any, error) { return e.admin.GetOutputs(ctx, id) },
		} {
			v, err := get()
			if err == nil {
				answers = append(answers, v)
			}
		}
		b, _ := json.Marshal(answers)
		if bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte(strings.TrimPrefix(secret, "s3cr3t-"))) {
			t.Errorf("the sensitive variable's value is in the API's answers about %s", id)
		}
	}
	e.noLeftovers()
}

// bumpSerial writes the state of key again with the next serial, in the cluster, as an operator's
// tool would: the agent's state backend does not see it, so no state report tells the
// orchestrator.
func (e *env) bumpSerial(key string) {
	e.t.Helper()
	ctx := e.t.Context()
	st, err := statestore.New(e.c.Client(), e.stateNS, statestore.Options{Scope: org})
	if err != nil {
		e.t.Fatal(err)
	}
	raw, _, err := st.Read(ctx, key)
	if err != nil {
		e.t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		e.t.Fatal(err)
	}
	serial, ok := doc["serial"].(float64)
	if !ok {
		e.t.Fatalf("state %q has no numeric serial", key)
	}
	doc["serial"] = serial + 1
	raw, _ = json.Marshal(doc)
	if _, err := st.Write(ctx, key, raw, statestore.WriteOptions{Writer: "test"}); err != nil {
		e.t.Fatal(err)
	}
}

// setRequireApproval sets the runner's require_approval.
func (e *env) setRequireApproval(on bool) {
	e.t.Helper()
	r, err := e.admin.GetRunner(e.t.Context(), runnerID)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.admin.UpdateRunner(e.t.Context(), api.RunnerInput{ID: r.ID, PublicKeys: r.PublicKeys, Job: r.Job, StateStorageID: r.StateStorageID,
		MaxConcurrency: r.MaxConcurrency, JobTimeoutSeconds: r.JobTimeoutSeconds, RequireApproval: on}); err != nil {
		e.t.Fatal(err)
	}
}

// input is a deployment of files on the test's state key "reviewed".
func (e *env) input(op api.Operation, files map[string]string, vars map[string]json.RawMessage, save bool) api.DeploymentInput {
	return api.DeploymentInput{RunnerID: runnerID, Operation: op, StateKey: "reviewed", Variables: vars, SavePlan: save,
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(e.t, files)}}}
}

// savePlan queues a plan with save_plan (ttl seconds; 0: the default).
func (e *env) savePlan(files map[string]string, vars map[string]json.RawMessage, ttl int) *api.Deployment {
	e.t.Helper()
	in := e.input(api.OperationPlan, files, vars, true)
	in.PlanTTLSeconds = ttl
	d, err := e.admin.CreateDeployment(e.t.Context(), in)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// checkSummary compares the summary the job pod uploaded with `show -json` of the plan file it
// kept in the cluster, read from the state namespace's Secrets, by the same CLI on this machine.
func (e *env) checkSummary(localCLI, planID string, got *api.PlanSummary) {
	t := e.t
	st, err := statestore.New(e.c.Client(), e.stateNS, statestore.Options{Scope: org})
	if err != nil {
		t.Fatal(err)
	}
	data, err := st.GetPlan(t.Context(), "reviewed", planID, time.Now())
	if err != nil {
		t.Fatalf("the plan file of %s in the cluster: %v", planID, err)
	}
	dir := t.TempDir()
	planFile := filepath.Join(dir, "plan.tfplan")
	if err := os.WriteFile(planFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), localCLI, "show", "-json", planFile)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CHECKPOINT_DISABLE=1")
	show, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s show -json: %v", localCLI, err)
	}
	var raw struct {
		ResourceChanges []struct {
			Address string `json:"address"`
			Change  struct {
				Actions []string `json:"actions"`
			} `json:"change"`
		} `json:"resource_changes"`
		OutputChanges map[string]any `json:"output_changes"`
	}
	if err := json.Unmarshal(show, &raw); err != nil {
		t.Fatal(err)
	}
	var shown, summarised []string
	for _, rc := range raw.ResourceChanges {
		shown = append(shown, rc.Address+" "+strings.Join(rc.Change.Actions, ","))
	}
	for _, rc := range got.ResourceChanges {
		summarised = append(summarised, rc.Address+" "+string(rc.Action))
	}
	if !reflect.DeepEqual(shown, []string{"terraform_data.greeting create", "terraform_data.secret create"}) ||
		!reflect.DeepEqual(summarised, []string{"terraform_data.greeting create", "terraform_data.secret create"}) ||
		got.Counts.Create != 2 || len(got.OutputChanges) != 1 || got.OutputChanges[0].Name != "greeting" || raw.OutputChanges["greeting"] == nil {
		t.Errorf("summary %+v; show -json has %v and outputs %v", got, shown, raw.OutputChanges)
	}
	want, err := plansummary.FromPlan(bytes.NewReader(show), planFile)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&want, got) {
		t.Errorf("the uploaded summary differs from the summary of show -json of the kept plan file:\n got  %+v\n want %+v", got, want)
	}
}

// wantCode fails the test unless err is the API's refusal with code and HTTP status.
func wantCode(t testing.TB, what string, err error, code string, status int) {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != code || ae.StatusCode != status {
		t.Errorf("%s: %v, want HTTP %d %s", what, err, status, code)
	}
}
