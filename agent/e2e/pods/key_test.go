package pods

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/connection"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// TestUnknownKeyShowsInReadiness: the agent pod runs with a key the runner does not have (the
// runner's key is replaced and the old one revoked, as after a leak). The first refused poll
// makes the pod unready with the key's fingerprint in the readiness message and the log says
// the same, with what to do; the pod is not restarted. Registering the key lets it back in.
func TestUnknownKeyShowsInReadiness(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := t.Context()
	r, err := e.admin.GetRunner(ctx, runnerID)
	if err != nil {
		t.Fatal(err)
	}
	agentKey := r.PublicKeys[0]
	agentFP := r.Status.KeyFingerprint
	pub, _, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := keys.EncodePublicPEM(pub)
	in := api.RunnerInput{ID: runnerID, PublicKeys: []string{other}, StateStorageID: r.StateStorageID, Job: r.Job,
		MaxConcurrency: r.MaxConcurrency, JobTimeoutSeconds: r.JobTimeoutSeconds, RevokeReplacedKeys: true}
	pod := e.agentPods()[0]
	e.waitReady(pod.Name, true)
	revoked := time.Now()
	if _, err := e.admin.UpdateRunner(ctx, in); err != nil {
		t.Fatal(err)
	}

	var logged time.Duration
	testbed.WaitFor(t, time.Minute, "the agent to log that its key is refused", func() (bool, string) {
		b, err := e.c.Client().CoreV1().Pods(e.agentNS).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		if err != nil {
			return false, err.Error()
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if strings.Contains(line, "refuses this agent's key") {
				if !strings.Contains(line, agentFP) || !strings.Contains(line, "public_keys") {
					t.Fatalf("the refusal is logged without the key's fingerprint %s or what to do: %s", agentFP, line)
				}
				logged = time.Since(revoked)
				return true, ""
			}
		}
		return false, "no refusal in the log yet"
	})
	e.waitReady(pod.Name, false)
	unready := time.Since(revoked)
	// The connection record that `helm test` reads names the key too (the kubelet's probe
	// event carries only the status code).
	testbed.WaitFor(t, time.Minute, "the connection record to name the refused key", func() (bool, string) {
		l, err := e.c.Client().CoordinationV1().Leases(e.agentNS).Get(context.Background(), releaseName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := l.Annotations[connection.AnnotationLastError]
		return strings.Contains(got, agentFP) && strings.Contains(got, "unknown_key"), fmt.Sprintf("last poll error %q", got)
	})
	t.Logf("key refused: logged %s and pod unready %s after the runner's key was revoked", logged.Round(10*time.Millisecond), unready.Round(10*time.Millisecond))

	// The key is registered again: the same pod gets in, ready again, without a restart.
	in.PublicKeys, in.RevokeReplacedKeys = []string{agentKey}, false
	if _, err := e.admin.UpdateRunner(ctx, in); err != nil {
		t.Fatal(err)
	}
	e.waitReady(pod.Name, true)
	if d := e.deploy(api.OperationApply, greeting, "key"); d.d.Status != api.StatusSucceeded {
		t.Fatalf("a deployment after the key was registered again: %s (%s)", d.d.Status, d.d.Message)
	}
	if p := e.agentPods()[0]; p.Name != pod.Name || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("agent pod %s restarted (%d) or replaced (%s)", pod.Name, p.Status.ContainerStatuses[0].RestartCount, p.Name)
	}
}

// waitReady waits until the pod's Ready condition is ready.
func (e *env) waitReady(pod string, ready bool) {
	e.t.Helper()
	want := corev1.ConditionFalse
	if ready {
		want = corev1.ConditionTrue
	}
	testbed.WaitFor(e.t, 2*time.Minute, fmt.Sprintf("agent pod %s to be Ready=%s", pod, want), func() (bool, string) {
		p, err := e.c.Client().CoreV1().Pods(e.agentNS).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == want, fmt.Sprintf("Ready=%s (%s)", c.Status, c.Message)
			}
		}
		return false, "no Ready condition"
	})
}
