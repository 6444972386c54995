package helm

import (
	"context"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

const driftManifest = `---
# Source: x/templates/sa.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: agent
---
# Source: x/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: agent
spec:
  replicas: 2
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
        - name: agent
          image: example.com/agent:1.0
`

func liveDeployment(replicas int32, image string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "ns"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: image}}}},
		},
	}
}

func TestLiveDrift(t *testing.T) {
	rel := &release.Release{Name: "x", Namespace: "ns", Manifest: driftManifest}
	for _, tc := range []struct {
		name string
		live *appsv1.Deployment
		want []string
	}{
		{name: "in sync", live: liveDeployment(2, "example.com/agent:1.0")},
		{name: "scaled", live: liveDeployment(5, "example.com/agent:1.0"), want: []string{"has 5 replicas, the release sets 2"}},
		{name: "image changed", live: liveDeployment(2, "evil/agent:2"), want: []string{`image "evil/agent:2", the release sets "example.com/agent:1.0"`}},
		{name: "deleted", want: []string{"Deployment ns/agent was deleted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			if tc.live != nil {
				if _, err := cs.AppsV1().Deployments("ns").Create(context.Background(), tc.live, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := LiveDrift(context.Background(), cs, rel)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("drift %q, want %q", got, tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("drift %q does not contain %q", got[i], tc.want[i])
				}
			}
		})
	}
}
