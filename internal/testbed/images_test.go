package testbed

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// An OCI image archive imported with ImportImage runs on the real node under the name it carries,
// without any registry.
func TestImportImageRunsOnNode(t *testing.T) {
	t.Parallel()
	c := Shared(t)
	RequireNode(t, c)
	binDir, err := findBinaries()
	if err != nil {
		t.Fatal(err)
	}
	ref := "testbed.outpost.invalid/imported:" + rand.String(6)
	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := writeImageArchive(archive, ref, filepath.Join(binDir, podBinary), []string{"/" + podBinary, "echo"}); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(t.Context(), archive); err != nil {
		t.Fatal(err)
	}

	ns := NewNamespace(t, c)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "imported", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: ref, Args: []string{"from", "the", "imported", "image"},
				ImagePullPolicy: corev1.PullIfNotPresent,
			}},
		},
	}
	OnRealNode(&pod.Spec)
	cs := c.Client()
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), "imported", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodSucceeded {
			break
		}
		if p.Status.Phase == corev1.PodFailed || time.Now().After(deadline) {
			t.Fatalf("the Pod did not succeed: %s; events: %s", podSummary(p), podEvents(t.Context(), cs, p))
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, err := cs.CoreV1().Pods(ns).GetLogs("imported", &corev1.PodLogOptions{}).DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "from the imported image\n" {
		t.Errorf("logs %q, want the image's entrypoint (echo) run with the Pod's args", out)
	}
}

// A missing or broken archive fails with an error that names it and carries ctr's reason.
func TestImportImageBadArchive(t *testing.T) {
	t.Parallel()
	c := Shared(t)
	RequireNode(t, c)
	missing := filepath.Join(t.TempDir(), "missing.tar")
	err := c.ImportImage(t.Context(), missing)
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("err = %v, want one naming %s and saying it does not exist", err, missing)
	}
	if err := (&Cluster{}).ImportImage(t.Context(), missing); err == nil || !strings.Contains(err.Error(), "Options{Node: true}") {
		t.Errorf("ImportImage without a node: err = %v, want one saying the test bed has no node", err)
	}
}
