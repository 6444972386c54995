package pods

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// TestEveryImageIsPulledFromTheRegistry: the chart installed with global.imageRegistry and
// imagePullSecrets makes every pod pull from the private registry with the pull Secret of its own
// namespace: the agent pod its image with the agent namespace's login, and a job pod both the
// injecting init container's agent image and main's job image with the jobs namespace's login.
// The kubelet's Pulled events say "Successfully pulled image" (a real pull), not "already present
// on machine". The node had the agent image from the agent pod, so the test removes it before
// the deployment: otherwise the init container would not need to pull.
func TestEveryImageIsPulledFromTheRegistry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{replicas: 1})
	agentPods := e.agentPods()
	if len(agentPods) != 1 {
		t.Fatalf("%d agent pods, want 1", len(agentPods))
	}
	if img := agentPods[0].Spec.Containers[0].Image; img != e.agentImage {
		t.Errorf("the agent pod runs %s, want %s (global.imageRegistry %s)", img, e.agentImage, e.registry)
	}
	if s := agentPods[0].Spec.ImagePullSecrets; len(s) != 1 || s[0].Name != pullSecret {
		t.Errorf("the agent pod's imagePullSecrets are %v, want [%s]", s, pullSecret)
	}
	e.wantPulled(e.agentNS, agentPods[0].Name, "agent", e.agentImage)

	if err := e.c.RemoveImage(t.Context(), e.agentImage); err != nil {
		t.Fatal(err)
	}
	r, pod := e.deployWatchingPod(api.OperationPlan, greeting, "pulled")
	if r.d.Status != api.StatusSucceeded {
		t.Fatalf("plan: %s (%s: %s)\n%s", r.d.Status, r.d.Reason, r.d.Message, r.log)
	}
	e.checkJobPod(pod, e.jobImage)
	if s := pod.Spec.ImagePullSecrets; len(s) != 1 || s[0].Name != pullSecret {
		t.Errorf("the job pod's imagePullSecrets are %v, want [%s]", s, pullSecret)
	}
	e.wantPulled(e.jobsNS, pod.Name, kubeexec.InjectContainer, e.agentImage)
	e.wantPulled(e.jobsNS, pod.Name, "main", e.jobImage)
	t.Logf("the agent pod, the job pod's %s and main pulled %s and %s from the registry; plan done %s after the enqueue",
		kubeexec.InjectContainer, e.agentImage, e.jobImage, r.took.Round(10*time.Millisecond))
}

// wantPulled checks that the kubelet pulled image for a container of a pod (its Pulled event says
// "Successfully pulled image", as it does only after a pull from the registry).
func (e *env) wantPulled(ns, pod, container, image string) {
	e.t.Helper()
	fieldPath := "spec.containers{" + container + "}"
	if container == kubeexec.InjectContainer {
		fieldPath = "spec.initContainers{" + container + "}"
	}
	testbed.WaitFor(e.t, 30*time.Second, fmt.Sprintf("the Pulled event of %s/%s[%s]", ns, pod, container), func() (bool, string) {
		evs, err := e.c.Client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + pod + ",reason=Pulled"})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range evs.Items {
			if ev.InvolvedObject.FieldPath != fieldPath {
				continue
			}
			if strings.HasPrefix(ev.Message, `Successfully pulled image "`+image+`"`) {
				return true, ""
			}
			seen = append(seen, ev.Message)
		}
		if len(seen) > 0 {
			e.t.Fatalf("%s/%s[%s] did not pull %s from the registry; its Pulled events: %q", ns, pod, container, image, seen)
		}
		return false, "no Pulled event yet"
	})
}
