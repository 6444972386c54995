package cli_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/cli"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
)

// TestStateVersionsAndLock: what an agent reports of a state (over the real agent API) is
// what `outpost state list`, `versions` and `lock` show: versions newest first with their
// writer, the lock's deployment, attempt and pod.
func TestStateVersionsAndLock(t *testing.T) {
	h := configured(t)
	ag := clienttest.Register(t, h.admin(), h.inst.URL, "eu-1")
	now := time.Now().UTC()
	rep := api.StateReport{Namespace: "outpost-states", States: []api.ReportedState{{StateKey: "apps/web",
		Versions: []api.StateVersion{
			{Generation: 3, Serial: 7, Lineage: "L", Size: 2048, Resources: 4, DeploymentID: "dep-b", Attempt: 2, Source: "write", WrittenAt: now.Add(-time.Minute)},
			{Generation: 2, Serial: 6, Lineage: "L", Size: 1024, Resources: 3, Source: "rollback to generation 1 by alice: bad apply", WrittenAt: now.Add(-time.Hour)},
		},
		Lock: &api.StateLock{DeploymentID: "dep-c", Attempt: 1, Pod: "outpost-dep-c-1-x7k2p", Holder: "job/dep-c/1", Operation: "OperationTypeApply",
			AcquiredAt: now.Add(-10 * time.Second), ExpiresAt: now.Add(50 * time.Second)}}}}
	if err := ag.Client().ReportStates(context.Background(), rep); err != nil {
		t.Fatal(err)
	}
	h.expect(cli.ExitOK, []string{"state", "list", "eu-1-states"}, "apps/web", "7", "2.0 KiB", "dep-c attempt 1 (pod outpost-dep-c-1-x7k2p)")
	h.expect(cli.ExitOK, []string{"state", "versions", "eu-1-states", "apps/web"}, "GENERATION", "dep-b/2", "operator",
		"rollback to generation 1 by alice", "Locked by dep-c attempt 1 (pod outpost-dep-c-1-x7k2p).")
	r := h.expect(cli.ExitOK, []string{"state", "lock", "eu-1-states", "apps/web", "-o", "json"})
	var l api.StateLock
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || l.Pod != "outpost-dep-c-1-x7k2p" || l.DeploymentID != "dep-c" || l.Attempt != 1 {
		t.Errorf("state lock -o json: %+v, %v\n%s", l, err, r)
	}
	h.expect(cli.ExitError, []string{"state", "versions", "eu-1-states", "apps/other"}, "no agent has reported it")
	h.expect(cli.ExitError, []string{"state", "list", "nowhere"}, "state storage nowhere does not exist")
	h.expect(cli.ExitUsage, []string{"state", "lock", "eu-1-states"}, "a state storage id and a state key")
}

// TestStateOperationCommands: show, diff and rollback wait for the agent's answer (here an
// agent that polls and answers over the real agent API) and say the outcome in the exit code:
// 0 done, 3 failed (with the error's code and message), 1 when --timeout passes first, 2 for a
// rollback without --reason.
func TestStateOperationCommands(t *testing.T) {
	h := configured(t)
	ag := clienttest.Register(t, h.admin(), h.inst.URL, "eu-1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answer := make(chan api.StateOperationResult, 4)
	go func() {
		for ctx.Err() == nil {
			resp, err := ag.Client().Poll(ctx, api.PollRequest{AgentVersion: "test", Instance: "a", Held: []api.HeldAttempt{}, WaitSeconds: 1})
			if err != nil || len(resp.StateOperations) == 0 {
				continue
			}
			select {
			case res := <-answer:
				_, _ = ag.Client().StateOperationResult(ctx, resp.StateOperations[0].ID, res)
			case <-ctx.Done():
			}
		}
	}()
	answer <- api.StateOperationResult{Status: api.StateOperationDone, StateOperationOutcome: api.StateOperationOutcome{Show: &api.StateContents{
		Generation: 4, Serial: 9, Resources: []string{"terraform_data.a"}, Outputs: []api.StateOutputName{{Name: "token", Sensitive: true}}}}}
	h.expect(cli.ExitOK, []string{"state", "show", "eu-1-states", "apps/web"}, "generation 4 (serial 9", "terraform_data.a", "token (sensitive)")
	answer <- api.StateOperationResult{Status: api.StateOperationFailed, StateOperationOutcome: api.StateOperationOutcome{Error: &api.StateOperationError{
		Code: api.StateOpLocked, Message: "state \"apps/web\" is locked by deployment dep-9 attempt 1"}}}
	h.expect(cli.ExitFailed, []string{"state", "rollback", "eu-1-states", "apps/web", "3", "--reason", "bad apply"}, "failed (locked)", "dep-9 attempt 1")
	h.expect(cli.ExitUsage, []string{"state", "rollback", "eu-1-states", "apps/web", "3"}, "--reason is required")
	h.expect(cli.ExitUsage, []string{"state", "diff", "eu-1-states", "apps/web", "3", "x"}, "a generation is a positive number")
	// Nobody answers this one within the timeout.
	h.expect(cli.ExitError, []string{"state", "diff", "eu-1-states", "apps/web", "3", "4", "--timeout", "1s"}, "is still running after 1s", "outpost state operation sop-")
	if err := ag.Client().ReportStates(ctx, api.StateReport{Namespace: "outpost-states", States: []api.ReportedState{{StateKey: "apps/web",
		Versions: []api.StateVersion{{Generation: 4, Serial: 9, WrittenAt: time.Now()}}}}}); err != nil {
		t.Fatal(err)
	}
	h.expect(cli.ExitOK, []string{"state", "versions", "eu-1-states", "apps/web"}, "Rollbacks", "failed (locked)", "bad apply", "admin")
}
