package kubernetes

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Trimming the history deletes each Job beyond its limit once, even when trims run again before
// the informer has seen the delete (here it never does: the cache is filled by hand).
func TestTrimHistoryDeletesEachExpiredJobOnce(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if ca, ok := a.(k8stesting.CreateAction); ok {
			if o, ok := ca.GetObject().(metav1.Object); ok {
				o.SetUID(types.UID("uid-" + o.GetName()))
			}
		}
		return false, nil, nil
	})
	e := New(Options{Client: cs, PodOptions: opts, History: History{Succeeded: 1}})
	for i := range 3 {
		c := claim("")
		c.DeploymentID = fmt.Sprintf("dep-%d", i)
		if err := e.Start(t.Context(), c, "opst_test"); err != nil {
			t.Fatal(err)
		}
		j, err := cs.BatchV1().Jobs("jobs").Get(t.Context(), JobName(c.DeploymentID, c.Attempt), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		j.Labels[LabelHistory] = HistorySucceeded
		j.Annotations[AnnAcknowledgedAt] = fmt.Sprintf("2026-11-26T10:00:0%d.000000000Z", i)
		if err := e.informers[0].GetIndexer().Add(j); err != nil {
			t.Fatal(err)
		}
	}
	cs.ClearActions()
	for range 3 {
		e.trimHistory(t.Context())
	}
	var deleted []string
	for _, a := range cs.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && d.GetResource().Resource == "jobs" {
			deleted = append(deleted, d.GetName())
		}
	}
	if len(deleted) != 2 || deleted[0] == deleted[1] {
		t.Errorf("deleted %q; want the two older Jobs (the history keeps 1), each once", deleted)
	}
	for _, name := range deleted {
		if name == JobName("dep-2", 2) {
			t.Errorf("deleted the newest Job %s", name)
		}
	}
}
