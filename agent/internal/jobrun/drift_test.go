package jobrun

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// fakeDriftCLI stands in for terraform in a drift check: `plan` writes an empty plan file
// (a zip without a prior state) where -out says and exits with planExit; `show -json` prints a
// plan in which local_file.f was deleted outside Terraform and would be created again.
func fakeDriftCLI(t *testing.T, planExit int) string {
	t.Helper()
	script := `#!/bin/sh
case "$1" in
version) echo "Fake Terraform v0.0.1" ;;
init) echo "init" ;;
plan) for a in "$@"; do case "$a" in -out=*) out="${a#-out=}" ;; esac; done
      [ -n "$out" ] && printf 'PK\005\006\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' > "$out"
      echo "plan $*"; exit ` + strconv.Itoa(planExit) + ` ;;
show) echo '{"format_version":"1.2","resource_drift":[{"address":"local_file.f","change":{"actions":["delete"],"before":{"content":"secret text"},"after":null}}],"resource_changes":[{"address":"local_file.f","change":{"actions":["create"],"before":null,"after":{"content":"secret text"},"after_unknown":{}}}]}' ;;
*) echo "unexpected command $*" >&2; exit 64 ;;
esac
`
	p := filepath.Join(t.TempDir(), "terraform")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// driftCheck has a schedule of the orchestrator (swept every 200 ms) queue one drift check and
// returns it; the schedule is deleted so that it queues no more. onDrift is the schedule's
// on_drift ("" for none).
func (h *harness) driftCheck(onDrift ...api.OnDrift) *api.Deployment {
	h.t.Helper()
	ctx := context.Background()
	in := api.ScheduleInput{ID: "drift", RunnerID: testRunner, StateKey: "fake", Cron: "* * * * * *",
		Source: inlineSource(h.t, map[string]string{"main.tf": "# fake\n"})}
	if len(onDrift) > 0 {
		in.OnDrift = onDrift[0]
	}
	sch, err := h.admin.CreateSchedule(ctx, in)
	if err != nil {
		h.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := h.admin.ListDeployments(ctx, client.DeploymentFilter{})
		if err != nil {
			h.t.Fatal(err)
		}
		for i := range list {
			if list[i].ScheduleID == sch.ID {
				if err := h.admin.DeleteSchedule(ctx, sch.ID); err != nil {
					h.t.Fatal(err)
				}
				return &list[i]
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatal("the schedule queued no check within 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDriftCheckReportsThePlansExitCode: a drift check runs plan -detailed-exitcode; exit code
// 2 is a finding, not a failure: the job runner succeeds and reports the summary by address
// (never a value), which marks the state key drifted; 0 reports no drift; 1 fails the check and
// reports nothing.
func TestDriftCheckReportsThePlansExitCode(t *testing.T) {
	for _, tc := range []struct {
		planExit, wantCode int
		drifted, reported  bool
	}{
		{planExit: 2, wantCode: 0, drifted: true, reported: true},
		{planExit: 0, wantCode: 0, drifted: false, reported: true},
		{planExit: 1, wantCode: 1, reported: false},
	} {
		t.Run("plan exits "+strconv.Itoa(tc.planExit), func(t *testing.T) {
			h := newHarness(t, fakeDriftCLI(t, tc.planExit))
			d := h.driftCheck()
			r := h.runJob(d, runOptions{})
			if r.Code != tc.wantCode {
				t.Fatalf("exit %d, want %d:\n%s", r.Code, tc.wantCode, r.Stdout)
			}
			if !strings.Contains(r.Log, "-detailed-exitcode") {
				t.Errorf("the plan ran without -detailed-exitcode:\n%s", r.Log)
			}
			st, err := h.admin.GetState(context.Background(), "in-cluster", "fake")
			switch {
			case tc.drifted:
				if err != nil || st.Drift == nil || st.Drift.DeploymentID != d.ID || st.Drift.Summary == nil ||
					len(st.Drift.Summary.Drift) != 1 || st.Drift.Summary.Drift[0].Address != "local_file.f" || st.Drift.Summary.Counts.Create != 1 {
					t.Fatalf("state key after a plan with changes: %+v, %v\nlog:\n%s", st, err, r.Log)
				}
				if strings.Contains(mustJSON(t, st), "secret text") || strings.Contains(r.Log, "secret text") {
					t.Fatal("a value of the plan left the cluster")
				}
			case err == nil:
				t.Fatalf("state key marked without drift: %+v", st)
			}
			if got := strings.Contains(r.Log, "drift check: "); got != tc.reported {
				t.Errorf("reported %v, want %v:\n%s", got, tc.reported, r.Log)
			}
		})
	}
}

// TestDriftCheckKeepsItsPlanForApproval: with on_drift queue_apply, a check that finds drift keeps
// its own plan file with the state backend and uploads its summary, so the plan can be approved
// and applied exactly; a check that finds nothing keeps no plan file.
func TestDriftCheckKeepsItsPlanForApproval(t *testing.T) {
	for _, drifted := range []bool{true, false} {
		t.Run("drifted="+strconv.FormatBool(drifted), func(t *testing.T) {
			exit := 0
			if drifted {
				exit = 2
			}
			h := newHarness(t, fakeDriftCLI(t, exit))
			d := h.driftCheck(api.OnDriftQueueApply)
			r := h.runJob(d, runOptions{})
			if r.Code != 0 {
				t.Fatalf("exit %d:\n%s", r.Code, r.Log)
			}
			kept := len(h.state.plan("fake")) > 0
			p, err := h.admin.GetPlan(context.Background(), d.ID)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case drifted && (!kept || p.Status != api.PlanReady || p.Summary == nil || p.Summary.ResourceChanges[0].Address != "local_file.f"):
				t.Fatalf("after drift: plan file kept %v, plan %+v; want it kept and ready with its summary\n%s", kept, p, r.Log)
			case !drifted && (kept || p.Status != api.PlanDiscarded):
				t.Fatalf("without drift: plan file kept %v, plan %+v; want none kept and the plan discarded\n%s", kept, p, r.Log)
			}
		})
	}
}
