package jobtoken

import (
	"errors"
	"slices"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// recorder is a Watcher that records what it is told.
type recorder struct{ events []string }

func (r *recorder) Added(ns string)           { r.events = append(r.events, "added "+ns) }
func (r *recorder) Removed(holder, ns string) { r.events = append(r.events, "removed "+holder+" "+ns) }
func (r *recorder) Cleared()                  { r.events = append(r.events, "cleared") }
func grant(token, key string, op api.Operation) Grant {
	return Grant{Token: token, StateKey: key, StateNamespace: "outpost-state", Operation: op}
}

func TestRegistry(t *testing.T) {
	r := New()
	w := &recorder{}
	r.Watch(w)
	r.Put("dep-1", 2, grant("opj_secret", "team/app", api.OperationApply))
	ctx := t.Context()
	if !r.Has("dep-1", 2) || r.Has("dep-1", 1) || r.StateNamespace("dep-1") != "outpost-state" {
		t.Fatal("Put not recorded per attempt")
	}
	if a, err := r.Authorize(ctx, "dep-1", "opj_secret", "team/app"); err != nil || a.Holder != "job/dep-1/2" || a.ReadOnly {
		t.Fatalf("Authorize = %+v, %v; an apply may write", a, err)
	}
	if _, err := r.Authorize(ctx, "dep-1", "opj_other", "team/app"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := r.Authorize(ctx, "dep-9", "opj_secret", "team/app"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("unknown job: %v", err)
	}
	if _, err := r.Authorize(ctx, "dep-1", "opj_secret", "team/other"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("other state: %v", err)
	}
	if alive, _ := r.HolderAlive(ctx, "job/dep-1/2"); !alive {
		t.Fatal("the holder of a held token is alive")
	}
	if alive, _ := r.HolderAlive(ctx, "job/dep-1/1"); alive {
		t.Fatal("an earlier attempt's holder is not alive")
	}
	r.Delete("dep-1", 1) // another attempt: no effect
	if !r.Has("dep-1", 2) {
		t.Fatal("Delete of another attempt removed the token")
	}
	r.Delete("dep-1", 2)
	if alive, _ := r.HolderAlive(ctx, "job/dep-1/2"); alive || r.Has("dep-1", 2) {
		t.Fatal("Delete kept the token")
	}
	r.Put("dep-2", 1, grant("opj_two", "k", api.OperationPlan))
	r.Clear()
	if _, err := r.Authorize(ctx, "dep-2", "opj_two", "k"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("a cleared registry authorised: %v", err)
	}
	want := []string{"added outpost-state", "removed job/dep-1/2 outpost-state", "added outpost-state", "cleared"}
	if !slices.Equal(w.events, want) {
		t.Errorf("watcher saw %q, want %q", w.events, want)
	}
}

func TestOnlyApplyAndDestroyWrite(t *testing.T) {
	r := New()
	for i, op := range []api.Operation{api.OperationPlan, api.OperationApply, api.OperationDestroy, "refresh", ""} {
		id := "dep-" + string(rune('a'+i))
		r.Put(id, 1, grant("opj_"+id, "k", op))
		a, err := r.Authorize(t.Context(), id, "opj_"+id, "k")
		if err != nil {
			t.Fatal(err)
		}
		if want := op != api.OperationApply && op != api.OperationDestroy; a.ReadOnly != want {
			t.Errorf("operation %q: ReadOnly = %v, want %v", op, a.ReadOnly, want)
		}
	}
}
