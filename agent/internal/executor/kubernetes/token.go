package kubernetes

import (
	"context"
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
)

// The token Secret of an attempt: created after its Job, with the Job as owner (so it goes with
// the Job and needs no delete of its own), read back after a restart only when it holds the token
// sealed on the Job.

func (e *Executor) ensureSecret(ctx context.Context, s *corev1.Secret) (types.UID, error) {
	secrets := e.o.Client.CoreV1().Secrets(s.Namespace)
	created, err := secrets.Create(ctx, s, metav1.CreateOptions{})
	if err == nil {
		return created.UID, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create token Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	have, err := secrets.Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read token Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if string(have.Data[tokenKey]) == string(s.Data[tokenKey]) && string(have.Data[stateTokenKey]) == string(s.Data[stateTokenKey]) {
		return have.UID, nil
	}
	// Different credentials for the same attempt (the claim was granted again), or a Secret
	// someone else put under the name once the Job showed it: replace it. Delete and create need
	// no update permission on Secrets.
	if err := secrets.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}}); err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("replace token Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if created, err = secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("replace token Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return created.UID, nil
}

// JobToken implements executor.Executor from the Job's token Secret.
func (e *Executor) JobToken(ctx context.Context, deploymentID string, attempt int) (string, error) {
	j, err := e.find(ctx, deploymentID, attempt)
	if err != nil {
		return "", err
	}
	if j == nil {
		return "", executor.ErrNoToken
	}
	return e.tokenOf(ctx, j)
}

// tokenOf reads the token of the sealed Job j from its token Secret: only the token sealed on
// j, from a Secret j owns.
func (e *Executor) tokenOf(ctx context.Context, j *batchv1.Job) (string, error) {
	want := j.Annotations[AnnTokenSHA256]
	s, err := e.o.Client.CoreV1().Secrets(j.Namespace).Get(ctx, TokenSecretName(j.Name, want), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", executor.ErrNoToken
	}
	if err != nil {
		return "", fmt.Errorf("read token Secret of Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	token := string(s.Data[tokenKey])
	if token == "" || tokenDigest(token) != want {
		e.log.Warn("the token Secret of a Job does not hold the token the agent sealed on the Job; it is not used",
			"k8s_job", j.Name, "namespace", j.Namespace, "secret", s.Name)
		return "", executor.ErrNoToken
	}
	// The seal cannot name the Job's UID (it is made before the Job exists), so a copy of a
	// sealed Job made by someone who can create Jobs here (the original deleted, its seal
	// copied, its pod spec changed) would pass the seal. The token Secret is owned by the Job
	// the agent created, by UID: only that Job gets the token, and with it the state credential.
	if !slices.ContainsFunc(s.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == j.UID }) {
		e.log.Warn("the token Secret of a Job is owned by another Job (the Job was re-created since the agent made it); its token is not used",
			"k8s_job", j.Name, "namespace", j.Namespace, "uid", string(j.UID), "secret", s.Name)
		return "", executor.ErrNoToken
	}
	return token, nil
}

// reportUnsealed logs, once per Job, that a Job with the agent's labels is not the agent's.
func (e *Executor) reportUnsealed(j *batchv1.Job) {
	e.mu.Lock()
	seen := e.unsealed[j.UID]
	e.unsealed[j.UID] = true
	e.mu.Unlock()
	if !seen {
		e.log.Warn("ignoring a Job with the agent's labels but without a valid seal: the agent did not create it (or it was changed since); it is neither adopted nor reported",
			"k8s_job", j.Name, "namespace", j.Namespace, "uid", string(j.UID))
	}
}
