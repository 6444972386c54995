package kubernetes

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// AttemptPod names the pod an attempt's CLI runs in: the newest pod of the attempt's Job that
// has not ended, or "" when there is none (no Job, no pod yet, or every pod has ended or is
// gone). It reads the informer cache. The state backend names a state lock's pod with it, and
// releases the lock of an attempt whose pod is gone.
func (e *Executor) AttemptPod(ctx context.Context, deploymentID string, attempt int) (string, error) {
	j, err := e.find(ctx, deploymentID, attempt)
	if err != nil || j == nil {
		return "", err
	}
	pods := e.podsOf(j)
	for i := len(pods) - 1; i >= 0; i-- {
		if p := pods[i]; p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return p.Name, nil
		}
	}
	return "", nil
}
