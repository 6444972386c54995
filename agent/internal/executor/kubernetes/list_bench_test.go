package kubernetes

import (
	"fmt"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// BenchmarkList is one event pass's read of the executor with 1,000 attempts in flight, each a
// sealed Job with its running pod in the informer caches: the agent does this on every change
// the watches bring while a burst runs.
func BenchmarkList(b *testing.B) {
	e := New(Options{Client: fake.NewClientset(), PodOptions: opts, Logger: slog.New(slog.DiscardHandler)})
	for i := range 1000 {
		j, p := disruptedJob(b, e, "")
		j.Name, j.UID, j.Status.Conditions = fmt.Sprintf("outpost-dep-%d-1", i), types.UID(fmt.Sprintf("job-%d", i)), nil
		j.Labels[LabelDeploymentID], j.Annotations[AnnDeploymentID] = fmt.Sprintf("dep-%d", i), fmt.Sprintf("dep-%d", i)
		e.seal(j)
		p.Name, p.Labels["batch.kubernetes.io/job-name"] = j.Name+"-abcde", j.Name
		p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = j.Name, j.UID
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
		if err := e.informers[0].GetIndexer().Add(j); err != nil {
			b.Fatal(err)
		}
		if err := e.informers[1].GetIndexer().Add(p); err != nil {
			b.Fatal(err)
		}
	}
	close(e.synced)
	b.ResetTimer()
	for b.Loop() {
		statuses, err := e.List(b.Context())
		if err != nil || len(statuses) != 1000 {
			b.Fatalf("%d statuses, %v", len(statuses), err)
		}
	}
}
