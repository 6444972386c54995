package kubernetes

import (
	"crypto/ed25519"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// After a key rotation the executor seals new Jobs with the new key and still recognises the
// Jobs (and their pending events) it sealed with the old one, as long as it holds that key: the
// attempts in flight across a rotation stay the agent's, also after a restart. A seal of a key
// it no longer holds, or a Job changed after sealing, does not hold.
func TestSealsAcrossARotation(t *testing.T) {
	_, oldKey, _ := ed25519.GenerateKey(nil)
	_, newKey, _ := ed25519.GenerateKey(nil)
	e := New(Options{PodOptions: opts, SealKey: SealKey(oldKey)})
	old, _, err := e.build(claimWithPod("", nil), "opst_test")
	if err != nil {
		t.Fatal(err)
	}
	old.UID = types.UID("job-uid")
	old.Annotations[AnnPendingEvent] = `{"type":"finished"}`
	old.Annotations[AnnPendingEventSeal] = e.eventSeal(old, old.Annotations[AnnPendingEvent])

	e.SetSealKeys([][]byte{SealKey(newKey), SealKey(oldKey)})
	if !e.sealed(old) {
		t.Fatal("a Job sealed with the replaced key is not recognised after the rotation")
	}
	if _, ok := e.pendingEvent(old); !ok {
		t.Fatal("a pending event sealed with the replaced key is not recognised after the rotation")
	}
	fresh, _, err := e.build(claimWithPod("", nil), "opst_test")
	if err != nil {
		t.Fatal(err)
	}
	onlyNew := New(Options{PodOptions: opts, SealKey: SealKey(newKey)})
	if !onlyNew.sealed(fresh) {
		t.Fatal("a Job built after the rotation is not sealed with the new key")
	}
	if onlyNew.sealed(old) {
		t.Fatal("a seal of a key the executor does not hold holds")
	}
	old.Annotations[AnnStateKey] = "someone-else"
	if e.sealed(old) {
		t.Fatal("a Job changed after sealing is still sealed")
	}
}
