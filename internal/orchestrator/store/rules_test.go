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
