package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
)

// The token Secret of an attempt: created before its Job, handed to the Job as owner, read back
// after a restart only when it holds the token sealed on the Job, deleted only when it is the
// Job's.

func (e *Executor) ensureSecret(ctx context.Context, s *corev1.Secret) error {
	secrets := e.o.Client.CoreV1().Secrets(s.Namespace)
	_, err := secrets.Create(ctx, s, metav1.CreateOptions{})
	if err == nil || !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("create token Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
		return nil
	}
	have, err := secrets.Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read token Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if string(have.Data[tokenKey]) == string(s.Data[tokenKey]) && string(have.Data[stateTokenKey]) == string(s.Data[stateTokenKey]) {
		return nil
	}
	// Different credentials for the same attempt (the claim was granted again): replace the Secret.
	// Delete and create need no update permission on Secrets.
	if err := secrets.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("replace token Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("replace token Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

func (e *Executor) ownSecret(ctx context.Context, job *batchv1.Job, name string) error {
	ref := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{ref}}})
	_, err := e.o.Client.CoreV1().Secrets(job.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsForbidden(err) {
		// The owner reference is a safety net (Cleanup deletes the Secret itself); without
		// `patch` on Secrets only Jobs deleted by someone else leave their Secret behind.
		e.log.Warn("cannot hand the token Secret to its Job; grant patch on secrets in the jobs namespace", "secret", name, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("set owner of token Secret %s/%s: %w", job.Namespace, name, err)
	}
	return nil
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
	return token, nil
}

// deleteTokenSecret deletes the token Secret of one of the agent's (sealed) Jobs, and only if
// the Secret is the Job's: owned by it, or not yet handed to it and holding the sealed token.
func (e *Executor) deleteTokenSecret(ctx context.Context, j *batchv1.Job) error {
	secrets := e.o.Client.CoreV1().Secrets(j.Namespace)
	s, err := secrets.Get(ctx, TokenSecretName(j.Name, j.Annotations[AnnTokenSHA256]), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read token Secret of Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	owned := slices.ContainsFunc(s.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == j.UID })
	if !owned && (len(s.OwnerReferences) > 0 || tokenDigest(string(s.Data[tokenKey])) != j.Annotations[AnnTokenSHA256]) {
		e.log.Warn("not deleting a Secret that is not the token Secret of the agent's Job", "secret", s.Name, "k8s_job", j.Name, "namespace", j.Namespace)
		return nil
	}
	err = secrets.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete token Secret of Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	return nil
}

// deleteOwnSecret deletes a token Secret this call created, after its Job turned out not to be
// the agent's.
func (e *Executor) deleteOwnSecret(ctx context.Context, s *corev1.Secret) {
	secrets := e.o.Client.CoreV1().Secrets(s.Namespace)
	have, err := secrets.Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil || string(have.Data[tokenKey]) != string(s.Data[tokenKey]) {
		return
	}
	if err := secrets.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}}); err != nil && !apierrors.IsNotFound(err) {
		e.log.Error("delete the token Secret of a refused attempt", "secret", s.Name, "namespace", s.Namespace, "err", err)
	}
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
