package store_test

import (
	"slices"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/storetest"
)

// TestPageDeployments: pages run newest first over the deployments keep accepts, and say
// whether another page follows; RunnersWork counts queues and work in flight.
func TestPageDeployments(t *testing.T) {
	storetest.Each(t, func(t *testing.T, eng store.Engine) {
		s, _ := newStore(t, eng)
		var ids []string // oldest first
		for i := range 5 {
			op := api.OperationPlan
			if i%2 == 1 {
				op = api.OperationApply
			}
			ids = append(ids, deploy(t, s, op).ID)
		}
		all := func(*api.Deployment) bool { return true }
		page, more, err := s.PageDeployments(t.Context(), "acme", "", "", all, 0, 2)
		if err != nil || !more || len(page) != 2 || page[0].ID != ids[4] || page[1].ID != ids[3] {
			t.Fatalf("first page %v, more %v, %v; want the two newest and more", idsOf(page), more, err)
		}
		page, more, _ = s.PageDeployments(t.Context(), "acme", "", "", all, 4, 2)
		if more || len(page) != 1 || page[0].ID != ids[0] {
			t.Fatalf("last page %v, more %v; want the oldest alone", idsOf(page), more)
		}
		plans := func(d *api.Deployment) bool { return d.Operation == api.OperationPlan }
		page, more, _ = s.PageDeployments(t.Context(), "acme", "r1", api.StatusQueued, plans, 1, 5)
		if more || len(page) != 2 || page[0].ID != ids[2] || page[1].ID != ids[0] {
			t.Fatalf("plans after the first %v, more %v; want the two older plans", idsOf(page), more)
		}
		if page, _, _ := s.PageDeployments(t.Context(), "acme", "r2", "", all, 0, 5); len(page) != 0 {
			t.Fatalf("another runner's page holds %v", idsOf(page))
		}
		// Runners' work from the indexes: one claimed, four queued (counted up to most).
		if _, err := s.Claim(t.Context(), runnerOf, ids[0], api.ClaimRequest{Attempt: 1, Instance: "a"}, lease); err != nil {
			t.Fatal(err)
		}
		work, err := s.RunnersWork(t.Context(), "acme", []string{"r1", "r2"}, 3)
		if err != nil || work["r1"] != (store.RunnerWork{Queued: 3, InFlight: 1}) || work["r2"] != (store.RunnerWork{}) {
			t.Fatalf("runners' work %+v, %v; want r1 3 queued (of 4, counted to 3) and 1 in flight, r2 none", work, err)
		}
	})
}

func idsOf(ds []api.Deployment) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// TestListsAcrossReadBatches: an engine may read a long list in batches (PostgreSQL reads 200 at
// a time); the whole list, a page deep inside it and a filtered page come out newest first, each
// deployment once.
func TestListsAcrossReadBatches(t *testing.T) {
	storetest.Each(t, func(t *testing.T, eng store.Engine) {
		s, _ := newStore(t, eng)
		const n = 450
		var ids []string // oldest first
		for range n {
			ids = append(ids, deploy(t, s, api.OperationPlan).ID)
		}
		list, err := s.ListDeployments(t.Context(), "acme", "", "")
		if err != nil {
			t.Fatal(err)
		}
		got := idsOf(list)
		if len(got) != n {
			t.Fatalf("the list holds %d deployments, want %d", len(got), n)
		}
		for i, id := range got {
			if id != ids[n-1-i] {
				t.Fatalf("list[%d] = %s, want %s (newest first, each once)", i, id, ids[n-1-i])
			}
		}
		all := func(*api.Deployment) bool { return true }
		page, more, err := s.PageDeployments(t.Context(), "acme", "", "", all, 390, 50)
		if err != nil || !more || len(page) != 50 || page[0].ID != ids[n-1-390] || page[49].ID != ids[n-1-439] {
			t.Fatalf("page from 390: %d deployments, more %v, %v; want ids[%d..%d] and more", len(page), more, err, n-1-390, n-1-439)
		}
		third := func(d *api.Deployment) bool { return slices.Index(ids, d.ID)%3 == 0 }
		page, _, _ = s.PageDeployments(t.Context(), "acme", "r1", api.StatusQueued, third, 100, 20)
		for i, d := range page {
			if want := ids[(n-1)/3*3-3*(100+i)]; d.ID != want {
				t.Fatalf("filtered page[%d] = %s, want %s", i, d.ID, want)
			}
		}
		if len(page) != 20 {
			t.Fatalf("filtered page holds %d, want 20", len(page))
		}
	})
}
