package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/storetest"
)

// The rules called directly, on both engines (storetest.Each). The HTTP face's suite
// (internal/orchestrator) drives the same rules through the API.

func TestMain(m *testing.M) { storetest.Main(m) }

const lease = 90 * time.Second

// runnerOf is the agent of runner r1 of acme, as the store sees an authenticated request.
var runnerOf = agentauth.Identity{Org: "acme", RunnerID: "r1", Fingerprint: "SHA256:test"}

// newStore is a store over eng with a state storage and runner r1 (three slots) in acme.
func newStore(t *testing.T, eng store.Engine) (*store.Store, *storetest.Clock) {
	t.Helper()
	c := storetest.NewClock()
	s := store.New(eng, store.Options{Secret: []byte("0123456789abcdef0123456789abcdef"), Now: c.Now, LogCap: 1 << 20})
	ctx := t.Context()
	if _, err := s.CreateStorage(ctx, "acme", api.StateStorageInput{
		ID: "state", Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: "outpost-state"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRunner(ctx, "acme", api.RunnerInput{
		ID: "r1", StateStorageID: "state", MaxConcurrency: 3, Job: api.RunnerJob{Namespace: "outpost-jobs", ServiceAccount: "outpost-job"},
	}); err != nil {
		t.Fatal(err)
	}
	return s, c
}

func deploy(t *testing.T, s *store.Store, op api.Operation) *api.Deployment {
	t.Helper()
	d, err := s.CreateDeployment(t.Context(), "acme", api.DeploymentInput{
		RunnerID: "r1", Operation: op, StateKey: "stacks/r1", Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: []byte{0x1f, 0x8b, 0x08, 0x00}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func claim(t *testing.T, s *store.Store, d *api.Deployment) *api.Claim {
	t.Helper()
	c, err := s.Claim(t.Context(), runnerOf, d.ID, api.ClaimRequest{Attempt: d.Attempt, Instance: "pod-a"}, lease)
	if err != nil {
		t.Fatalf("claim %s: %v", d.ID, err)
	}
	return c
}

func status(t *testing.T, s *store.Store, id string) *api.Deployment {
	t.Helper()
	d, err := s.GetDeployment(t.Context(), "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestExpiredLeasesFollowTheRules: once a job lease runs out, a claimed plan is queued again as
// the next attempt, a running apply becomes lost (never re-run by itself) and a deployment
// whose cancel was requested ends canceled; the runner's polls are named for a wake.
func TestExpiredLeasesFollowTheRules(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, eng store.Engine) {
		s, clk := newStore(t, eng)
		ctx := t.Context()
		plan, apply, canceled := deploy(t, s, api.OperationPlan), deploy(t, s, api.OperationApply), deploy(t, s, api.OperationPlan)
		claim(t, s, plan)
		c := claim(t, s, apply)
		claim(t, s, canceled)
		started := api.EventRequest{Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventStarted}, Fencing: c.Lease.Fencing}
		if _, _, err := s.RecordEvent(ctx, runnerOf, apply.ID, started, lease); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CancelDeployment(ctx, "acme", canceled.ID); err != nil {
			t.Fatal(err)
		}
		if runners, err := s.ExpireLeases(ctx); err != nil || len(runners) != 0 {
			t.Fatalf("before expiry: woke %v (%v), want none", runners, err)
		}
		clk.Advance(lease + time.Second)
		runners, err := s.ExpireLeases(ctx)
		if err != nil || len(runners) != 1 || runners[0] != "acme/r1" {
			t.Fatalf("after expiry: woke %v (%v), want [acme/r1]", runners, err)
		}
		if d := status(t, s, plan.ID); d.Status != api.StatusQueued || d.Attempt != 2 || d.Reason != "lease_expired" {
			t.Errorf("plan: %s attempt %d (%s), want queued attempt 2 (lease_expired)", d.Status, d.Attempt, d.Reason)
		}
		if d := status(t, s, apply.ID); d.Status != api.StatusLost || d.Attempt != 1 {
			t.Errorf("running apply: %s attempt %d, want lost attempt 1", d.Status, d.Attempt)
		}
		if d := status(t, s, canceled.ID); d.Status != api.StatusCanceled {
			t.Errorf("canceled plan: %s, want canceled", d.Status)
		}
	})
}

// TestRefusalsCarryAPICodes: what the caller caused comes back as a *store.Refusal with the
// API error code (the HTTP face picks the status), on every engine.
func TestRefusalsCarryAPICodes(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, eng store.Engine) {
		s, _ := newStore(t, eng)
		ctx := t.Context()
		d := deploy(t, s, api.OperationPlan)
		c := claim(t, s, d)
		stale := api.EventRequest{Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventStarted}, Fencing: c.Lease.Fencing - 1}
		for _, tc := range []struct {
			what string
			err  error
			code string
		}{
			{"unknown deployment", func() error { _, err := s.GetDeployment(ctx, "acme", "dep-missing"); return err }(), api.CodeNotFound},
			{"claim held by another instance", func() error {
				_, err := s.Claim(ctx, runnerOf, d.ID, api.ClaimRequest{Attempt: 1, Instance: "pod-b"}, lease)
				return err
			}(), api.CodeConflict},
			{"event of an older grant", func() error { _, _, err := s.RecordEvent(ctx, runnerOf, d.ID, stale, lease); return err }(), api.CodeStaleFencing},
			{"organisation never created", s.CheckOrg(ctx, "nobody"), api.CodeOrgNotFound},
		} {
			var r *store.Refusal
			if !errors.As(tc.err, &r) || r.Code != tc.code {
				t.Errorf("%s: %v, want a refusal with code %s", tc.what, tc.err, tc.code)
			}
		}
	})
}

// TestClaimsInThePollAnswer: ClaimOffers (agent protocol 7) grants what the claim grants, by the
// claim's own rule, on every engine: a job lease with a fencing number and a job token per
// attempt, never beyond max_concurrency even for offers that went stale, never an attempt
// another instance holds, the same grant again to its holder; a grant lost with its answer
// waits out its job lease and is granted anew as the next attempt with a higher fencing number.
func TestClaimsInThePollAnswer(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, eng store.Engine) {
		s, clk := newStore(t, eng)
		ctx := t.Context()
		var ds []*api.Deployment
		for range 5 {
			ds = append(ds, deploy(t, s, api.OperationPlan))
		}
		held := claim(t, s, ds[0]) // by pod-a's claim request: one of the runner's three slots
		poll := &api.PollRequest{Instance: "pod-a", CapacityFree: 5, Protocol: api.AgentProtocols()}
		a, err := s.Offers(ctx, runnerOf, poll, api.ProtocolClaimInPoll)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Offers) != 2 {
			t.Fatalf("offers %+v, want 2 (max_concurrency 3, one held)", a.Offers)
		}
		grants, err := s.ClaimOffers(ctx, runnerOf, a.Offers, "pod-a", lease)
		if err != nil {
			t.Fatal(err)
		}
		if len(grants) != 2 || grants[0].DeploymentID != ds[1].ID || grants[1].DeploymentID != ds[2].ID {
			t.Fatalf("grants %+v, want %s and %s", grants, ds[1].ID, ds[2].ID)
		}
		for _, g := range grants {
			tok, err := s.ParseJobToken(g.JobToken)
			if err != nil || tok.Deployment != g.DeploymentID || tok.Fencing != g.Lease.Fencing || g.Lease.Fencing < 1 || g.Placement.StateKey != "stacks/r1" {
				t.Errorf("grant %+v: token %+v, %v", g, tok, err)
			}
			if d := status(t, s, g.DeploymentID); d.Status != api.StatusClaimed || d.ClaimedAt == nil {
				t.Errorf("%s after its grant: %s, want claimed", g.DeploymentID, d.Status)
			}
		}
		// Offers gone stale (the runner is full now): the claim's rule still holds max_concurrency.
		stale := []api.Offer{{DeploymentID: ds[3].ID, Attempt: 1}, {DeploymentID: ds[4].ID, Attempt: 1}}
		if more, err := s.ClaimOffers(ctx, runnerOf, stale, "pod-a", lease); err != nil || len(more) != 0 {
			t.Fatalf("grants beyond max_concurrency: %+v, %v", more, err)
		}
		if d := status(t, s, ds[3].ID); d.Status != api.StatusQueued {
			t.Fatalf("%s after a refused grant: %s, want queued", ds[3].ID, d.Status)
		}
		// Fencing: another instance gets nothing the runner's agent holds; the holder gets its
		// grants again, unchanged.
		mine := []api.Offer{{DeploymentID: ds[0].ID, Attempt: 1}, {DeploymentID: ds[1].ID, Attempt: 1}}
		if other, err := s.ClaimOffers(ctx, runnerOf, mine, "pod-b", lease); err != nil || len(other) != 0 {
			t.Fatalf("another instance was granted %+v, %v", other, err)
		}
		again, err := s.ClaimOffers(ctx, runnerOf, mine, "pod-a", lease)
		if err != nil || len(again) != 2 || again[0].JobToken != held.JobToken || again[0].Lease.Fencing != held.Lease.Fencing ||
			again[1].JobToken != grants[0].JobToken || again[1].Lease.Fencing != grants[0].Lease.Fencing {
			t.Fatalf("the holder's grants again: %+v, %v; want the same grants", again, err)
		}
		// The answer with grants[1] was lost and pod-a never restates it: its job lease runs out
		// and the next attempt is granted anew, under a higher fencing number.
		clk.Advance(lease + time.Second)
		if _, err := s.ExpireLeases(ctx); err != nil {
			t.Fatal(err)
		}
		if d := status(t, s, ds[2].ID); d.Status != api.StatusQueued || d.Attempt != 2 {
			t.Fatalf("%s after its job lease ran out: %s attempt %d, want queued attempt 2", ds[2].ID, d.Status, d.Attempt)
		}
		next, err := s.ClaimOffers(ctx, runnerOf, []api.Offer{{DeploymentID: ds[2].ID, Attempt: 2}}, "pod-b", lease)
		if err != nil || len(next) != 1 || next[0].Attempt != 2 || next[0].Lease.Fencing <= grants[1].Lease.Fencing {
			t.Fatalf("the next attempt's grant: %+v, %v; want attempt 2 above fencing %d", next, err, grants[1].Lease.Fencing)
		}
	})
}
