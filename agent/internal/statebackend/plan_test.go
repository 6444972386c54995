package statebackend

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobtoken"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// TestPlanFilesAndCheck, against the test bed's API server: a plan stores its own plan file and
// cannot read it back; only the apply of that plan reads and deletes it (another apply gets 403);
// CheckPlan passes while the state is the one the plan was made against, refuses with stale_plan
// once the state moved, and with plan_expired once the plan file is gone.
func TestPlanFilesAndCheck(t *testing.T) {
	c := testbed.Shared(t)
	ns := testbed.NewNamespace(t, c)
	reg := jobtoken.New(nil)
	s := NewServer(ServerOptions{Kube: c.Client(), Tokens: reg, Org: testOrg, Logger: testLogger()})
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	const key = "apps/web"
	planTok := reg.Put("dep-plan", 1, jobtoken.Grant{Token: "t-plan", StateKey: key, StateNamespace: ns, Operation: api.OperationPlan, PlanTTL: time.Hour})
	applyTok := reg.Put("dep-apply", 1, jobtoken.Grant{Token: "t-apply", StateKey: key, StateNamespace: ns, Operation: api.OperationApply, PlanOf: "dep-plan"})
	otherTok := reg.Put("dep-other", 1, jobtoken.Grant{Token: "t-other", StateKey: key, StateNamespace: ns, Operation: api.OperationApply})
	u := srv.URL + PlanPathPrefix + url.PathEscape(key)
	plan := bytes.Repeat([]byte("PK\x03\x04 a plan file "), 1000)

	if code, body, _ := doReq(t, "PUT", u, "dep-plan", planTok, plan); code != 200 {
		t.Fatalf("the plan stores its plan file: %d %s", code, body)
	}
	if code, _, _ := doReq(t, "GET", u, "dep-plan", planTok, nil); code != 403 {
		t.Errorf("the plan reads its plan file back: %d, want 403", code)
	}
	if code, _, _ := doReq(t, "GET", u, "dep-other", otherTok, nil); code != 403 {
		t.Errorf("an apply of no saved plan reads a plan file: %d, want 403", code)
	}
	if code, _, _ := doReq(t, "PUT", u, "dep-apply", applyTok, []byte("another plan")); code != 403 {
		t.Errorf("the apply replaces the plan file: %d, want 403", code)
	}
	code, body, _ := doReq(t, "GET", u, "dep-apply", applyTok, nil)
	if code != 200 || !bytes.Equal(body, plan) {
		t.Fatalf("the apply of the plan reads %d bytes (%d), want the %d stored", len(body), code, len(plan))
	}

	ctx := t.Context()
	ref := api.PlanRef{DeploymentID: "dep-plan", Lineage: "made-up-by-the-cli", Serial: 0}
	if err := s.CheckPlan(ctx, ns, key, ref); err != nil {
		t.Fatalf("plan made against no state, still none: %v", err)
	}
	st := mustStore(statestore.New(c.Client(), ns, statestore.Options{Scope: testOrg, Logger: testLogger()}))
	if _, err := st.Write(ctx, key, stateDoc(3, "x"), statestore.WriteOptions{Writer: "test"}); err != nil {
		t.Fatal(err)
	}
	var pe *PlanCheckError
	if err := s.CheckPlan(ctx, ns, key, ref); !errors.As(err, &pe) || pe.Reason != api.ReasonStalePlan {
		t.Fatalf("a state appeared since the plan: %v, want stale_plan", err)
	}
	if err := s.CheckPlan(ctx, ns, key, api.PlanRef{DeploymentID: "dep-plan", Lineage: "lin", Serial: 3}); err != nil {
		t.Fatalf("plan made against the current state: %v", err)
	}
	if code, _, _ := doReq(t, "DELETE", u, "dep-apply", applyTok, nil); code != 200 {
		t.Fatalf("the apply deletes the applied plan file: %d", code)
	}
	if err := s.CheckPlan(ctx, ns, key, api.PlanRef{DeploymentID: "dep-plan", Lineage: "lin", Serial: 3}); !errors.As(err, &pe) || pe.Reason != api.ReasonPlanExpired {
		t.Fatalf("plan file gone: %v, want plan_expired", err)
	}
}
