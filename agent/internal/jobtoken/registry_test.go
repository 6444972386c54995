package jobtoken

import (
	"crypto/ed25519"
	"errors"
	"slices"
	"strings"
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
	r := New(nil)
	w := &recorder{}
	r.Watch(w)
	st := r.Put("dep-1", 2, grant("opj_secret", "team/app", api.OperationApply))
	ctx := t.Context()
	if !r.Has("dep-1", 2) || r.Has("dep-1", 1) || r.StateNamespace("dep-1") != "outpost-state" {
		t.Fatal("Put not recorded per attempt")
	}
	if a, err := r.Authorize(ctx, "dep-1", st, "team/app"); err != nil || a.Holder != "job/dep-1/2" || a.ReadOnly {
		t.Fatalf("Authorize = %+v, %v; an apply may write", a, err)
	}
	// The job token is the orchestrator's credential: the state backend refuses it.
	if _, err := r.Authorize(ctx, "dep-1", "opj_secret", "team/app"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("the job token opened the state: %v", err)
	}
	if _, err := r.Authorize(ctx, "dep-1", "opst_other", "team/app"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("wrong credential: %v", err)
	}
	if _, err := r.Authorize(ctx, "dep-9", st, "team/app"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("unknown job: %v", err)
	}
	if _, err := r.Authorize(ctx, "dep-1", st, "team/other"); !errors.Is(err, ErrForbidden) {
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
	st2 := r.Put("dep-2", 1, grant("opj_two", "k", api.OperationPlan))
	r.Clear()
	if _, err := r.Authorize(ctx, "dep-2", st2, "k"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("a cleared registry authorised: %v", err)
	}
	want := []string{"added outpost-state", "removed job/dep-1/2 outpost-state", "added outpost-state", "cleared"}
	if !slices.Equal(w.events, want) {
		t.Errorf("watcher saw %q, want %q", w.events, want)
	}
}

func TestOnlyApplyAndDestroyWrite(t *testing.T) {
	r := New(nil)
	for i, op := range []api.Operation{api.OperationPlan, api.OperationApply, api.OperationDestroy, "refresh", ""} {
		id := "dep-" + string(rune('a'+i))
		st := r.Put(id, 1, grant("opj_"+id, "k", op))
		a, err := r.Authorize(t.Context(), id, st, "k")
		if err != nil {
			t.Fatal(err)
		}
		if want := op != api.OperationApply && op != api.OperationDestroy; a.ReadOnly != want {
			t.Errorf("operation %q: ReadOnly = %v, want %v", op, a.ReadOnly, want)
		}
	}
}

// TestStateCredentials: the state credential of an attempt is the same whenever an agent with
// the runner's key derives it (a restarted agent adopting a running Job), differs per attempt
// and grant, and cannot be made without the key or from the job token.
func TestStateCredentials(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, other, _ := ed25519.GenerateKey(nil)
	a, b := New(StateCredentialKey(priv)), New(StateCredentialKey(priv))
	st := a.StateToken("dep-1", 1, "opj_x")
	if !strings.HasPrefix(st, StateTokenPrefix) || len(st) < len(StateTokenPrefix)+40 {
		t.Fatalf("state credential %q", st)
	}
	if b.StateToken("dep-1", 1, "opj_x") != st {
		t.Fatal("another registry with the same runner key derives another credential; an adopted Job would be locked out")
	}
	for name, got := range map[string]string{
		"another runner key": New(StateCredentialKey(other)).StateToken("dep-1", 1, "opj_x"),
		"a random key":       New(nil).StateToken("dep-1", 1, "opj_x"),
		"another attempt":    a.StateToken("dep-1", 2, "opj_x"),
		"another deployment": a.StateToken("dep-2", 1, "opj_x"),
		"another job token":  a.StateToken("dep-1", 1, "opj_y"),
	} {
		if got == st {
			t.Errorf("%s gives the same state credential", name)
		}
	}
	if strings.Contains(st, "opj_x") || st == "opj_x" {
		t.Fatal("the state credential shows the job token")
	}
	if got := a.Put("dep-1", 1, grant("opj_x", "k", api.OperationApply)); got != st {
		t.Fatalf("Put returned %q, want the derived %q", got, st)
	}
}

// After a key rotation the registry makes new credentials with the new key and still accepts
// those made with the old one (job runners of Jobs started before the rotation, also after the
// agent restarted), until the old key is no longer held.
func TestStateCredentialsAcrossARotation(t *testing.T) {
	_, oldKey, _ := ed25519.GenerateKey(nil)
	_, newKey, _ := ed25519.GenerateKey(nil)
	r := New(StateCredentialKey(oldKey))
	before := r.Put("dep-1", 1, grant("opj_x", "k", api.OperationApply))

	r.SetKeys([][]byte{StateCredentialKey(newKey), StateCredentialKey(oldKey)})
	if _, err := r.Authorize(t.Context(), "dep-1", before, "k"); err != nil {
		t.Fatalf("a credential made before the rotation: %v", err)
	}
	after := r.Put("dep-2", 1, grant("opj_y", "k2", api.OperationApply))
	if after != New(StateCredentialKey(newKey)).StateToken("dep-2", 1, "opj_y") {
		t.Fatal("a credential made after the rotation is not made with the new key")
	}
	// A restarted agent re-adopts dep-1 (Put again): its job runner's credential still holds.
	r.Put("dep-1", 1, grant("opj_x", "k", api.OperationApply))
	if _, err := r.Authorize(t.Context(), "dep-1", before, "k"); err != nil {
		t.Fatalf("the old credential after re-adoption: %v", err)
	}
	r.SetKeys([][]byte{StateCredentialKey(newKey)})
	if _, err := r.Authorize(t.Context(), "dep-1", before, "k"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("a credential of a key no longer held: %v, want refused", err)
	}
}
