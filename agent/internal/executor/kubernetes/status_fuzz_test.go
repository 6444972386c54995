package kubernetes

import (
	"log/slog"
	"strconv"
	"testing"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// FuzzJobStatus feeds the agent Jobs as anyone who can write to the jobs namespace could make
// them: the agent's labels and annotations with fuzzed values, a fuzzed seal and pending event.
// A Job whose seal the agent did not make is never taken for an attempt (it is not restated in
// polls, adopted or given a token); a Job the agent sealed is reported with exactly the values
// it sealed, and stops being the agent's when any sealed value changes; a pending event counts
// only with its own seal, for that Job's UID. Nothing panics. Seeds: testdata/fuzz/FuzzJobStatus.
func FuzzJobStatus(f *testing.F) {
	f.Add("dep-123", "2", "7", "apply", "prod/net", "ns-state", "2026-11-27T08:00:00Z", "seal", `{"type":"finished"}`, "", uint8(0), "x")
	f.Add("", "x", "-1", "", "", "", "not a time", "", "", "yes", uint8(3), "")
	e := New(Options{Client: fake.NewClientset(), PodOptions: opts, SealKey: []byte("fuzz-seal-key-0123456789abcdef01"), Logger: slog.New(slog.DiscardHandler)})
	f.Fuzz(func(t *testing.T, dep, attempt, fencing, op, key, ns, claimedAt, seal, event, cancel string, change uint8, to string) {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "outpost-" + strconv.Itoa(len(dep)), Namespace: "jobs", UID: types.UID("uid-1"),
			Labels: map[string]string{LabelManagedBy: ManagedByValue, LabelRunnerID: "r1", LabelDeploymentID: labelValue(dep), LabelAttempt: attempt},
			Annotations: map[string]string{AnnDeploymentID: dep, AnnFencing: fencing, AnnOperation: op, AnnStateKey: key, AnnStateNS: ns,
				AnnClaimedAt: claimedAt, AnnSeal: seal, AnnPendingEvent: event, AnnCancel: cancel}}}
		if _, ok := e.status(j); ok {
			t.Fatalf("a Job with a seal the agent did not make (%q) was taken for an attempt", seal)
		}
		// The agent's own seal: reported as sealed, with the sealed values.
		e.seal(j)
		s, ok := e.status(j)
		valid := true // the agent never seals what is not UTF-8, and such a seal never holds
		for _, f := range sealedFields(j) {
			valid = valid && utf8.ValidString(f)
		}
		if _, err := strconv.Atoi(attempt); ok != (dep != "" && err == nil && valid) {
			t.Fatalf("a sealed Job (deployment %q, attempt %q, valid UTF-8 %v): taken %v", dep, attempt, valid, ok)
		}
		if ok && (s.DeploymentID != dep || strconv.Itoa(s.Attempt) != strconv.Itoa(mustAtoi(attempt)) || s.StateKey != key || s.StateNamespace != ns || string(s.Operation) != op) {
			t.Fatalf("status %+v does not say what was sealed", s)
		}
		if ok && len(s.PendingEvent) != 0 {
			t.Fatalf("a pending event without its seal was taken: %q", s.PendingEvent)
		}
		if ok && event != "" && utf8.ValidString(event) {
			j.Annotations[AnnPendingEventSeal] = e.eventSeal(j, event)
			if s, _ := e.status(j); string(s.PendingEvent) != event {
				t.Fatalf("a sealed pending event %q read back as %q", event, s.PendingEvent)
			}
			moved := j.DeepCopy()
			moved.UID = "uid-2"
			if s, _ := e.status(moved); len(s.PendingEvent) != 0 {
				t.Fatal("a pending event sealed to one Job was taken on another")
			}
		}
		// Any sealed value changed: no longer the agent's.
		fields := []string{AnnDeploymentID, AnnFencing, AnnOperation, AnnStateKey, AnnStateNS, AnnClaimedAt, AnnTokenSHA256}
		name := fields[int(change)%len(fields)]
		if j.Annotations[name] == to {
			return
		}
		j.Annotations[name] = to
		if _, ok := e.status(j); ok {
			t.Fatalf("the sealed Job stayed the agent's after %s changed to %q", name, to)
		}
	})
}

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
