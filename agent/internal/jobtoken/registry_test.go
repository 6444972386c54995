package jobtoken

import (
	"errors"
	"testing"
)

func TestRegistry(t *testing.T) {
	r := New()
	r.Put("dep-1", 2, "opj_secret", "team/app", "outpost-state")
	ctx := t.Context()
	if !r.Has("dep-1", 2) || r.Has("dep-1", 1) || r.StateNamespace("dep-1") != "outpost-state" {
		t.Fatal("Put not recorded per attempt")
	}
	if h, err := r.Authorize(ctx, "dep-1", "opj_secret", "team/app"); err != nil || h != "job/dep-1/2" {
		t.Fatalf("Authorize = %q, %v", h, err)
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
}
