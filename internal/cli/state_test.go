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
