package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// The history: once the orchestrator has acknowledged an attempt's finished event, its Job is
// not deleted at once but kept, labelled with its outcome, so `kubectl get jobs,pods` and
// `kubectl logs` show the last runs in the cluster (as the closed agents keep theirs). The agent
// keeps the newest History.Succeeded succeeded and History.Failed failed (or canceled) Jobs of
// its runner and deletes older ones; the Job controller's TTL (historyTTL) ends any the agent
// never gets to, for example after it was uninstalled. A kept Job is no attempt any more: the
// agent neither restates it in polls nor adopts it after a restart.
const (
	// LabelHistory marks a kept Job with its outcome, HistorySucceeded or HistoryFailed.
	LabelHistory     = "outpost.dev/history"
	HistorySucceeded = "succeeded"
	HistoryFailed    = "failed"
	// AnnAcknowledgedAt is when the finished event was acknowledged; the history is ordered by it.
	AnnAcknowledgedAt = "outpost.dev/acknowledged-at"
	// historyTTL bounds how long a kept Job stays after it finished.
	historyTTL = 7 * 24 * 3600
)

// History says how many finished Jobs the agent keeps; zero keeps none of that outcome.
type History struct {
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
}

func (h History) keeps() bool { return h.Succeeded > 0 || h.Failed > 0 }

// historyOutcome is the history label of an attempt's result.
func historyOutcome(s api.Status) string {
	if s == api.StatusSucceeded {
		return HistorySucceeded
	}
	return HistoryFailed
}

// kept reports whether a Job is in the history (no attempt any more).
func kept(j *batchv1.Job) bool { return j.Labels[LabelHistory] != "" }

// keep moves a finished Job into the history: the token Secret goes (no job runner needs it any
// more), the Job is labelled with its outcome, and the history is trimmed. It returns false when
// the Job's outcome has no room in the history, so the caller deletes it.
func (e *Executor) keep(ctx context.Context, j *batchv1.Job, result api.Status) (bool, error) {
	outcome := historyOutcome(result)
	if e.limit(outcome) == 0 {
		return false, nil
	}
	if err := e.deleteTokenSecret(ctx, j); err != nil {
		return true, err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{LabelHistory: outcome},
		"annotations": map[string]string{AnnAcknowledgedAt: time.Now().UTC().Format(time.RFC3339Nano)},
	}})
	_, err := e.o.Client.BatchV1().Jobs(j.Namespace).Patch(ctx, j.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return true, fmt.Errorf("keep Job %s/%s in the history: %w", j.Namespace, j.Name, err)
	}
	e.log.Debug("kept Job in the history", "k8s_job", j.Name, "namespace", j.Namespace, "outcome", outcome)
	e.trimHistory(ctx)
	return true, nil
}

func (e *Executor) limit(outcome string) int {
	if outcome == HistorySucceeded {
		return e.o.History.Succeeded
	}
	return e.o.History.Failed
}

// trimHistory deletes the kept Jobs beyond the history's limits, oldest first. It reads the
// informer cache, so a Job kept a moment ago may be counted on the next call (the watchdog tick)
// rather than this one; the history is then one over its limit for a few seconds at most.
func (e *Executor) trimHistory(ctx context.Context) {
	jobs, err := e.jobs.List(labels.Everything())
	if err != nil {
		return
	}
	byOutcome := map[string][]*batchv1.Job{}
	present := make(map[types.UID]bool, len(jobs))
	e.mu.Lock()
	for _, j := range jobs {
		present[j.UID] = true
		if kept(j) && j.DeletionTimestamp == nil && !e.expiring[j.UID] && e.sealed(j) {
			byOutcome[j.Labels[LabelHistory]] = append(byOutcome[j.Labels[LabelHistory]], j)
		}
	}
	for uid := range e.expiring {
		if !present[uid] { // its delete was seen before it was marked
			delete(e.expiring, uid)
		}
	}
	e.mu.Unlock()
	for outcome, js := range byOutcome {
		n := e.limit(outcome)
		if len(js) <= n {
			continue
		}
		// Newest first; RFC 3339 with fixed nanoseconds sorts as text, the name breaks ties.
		slices.SortFunc(js, func(a, b *batchv1.Job) int {
			if c := strings.Compare(b.Annotations[AnnAcknowledgedAt], a.Annotations[AnnAcknowledgedAt]); c != 0 {
				return c
			}
			return strings.Compare(b.Name, a.Name)
		})
		for _, j := range js[n:] {
			e.mu.Lock()
			again := e.expiring[j.UID]
			e.expiring[j.UID] = true
			e.mu.Unlock()
			if again {
				continue // another trim is deleting it now
			}
			if err := e.deleteJob(ctx, j); err != nil {
				e.mu.Lock()
				delete(e.expiring, j.UID)
				e.mu.Unlock()
				e.log.Warn("expire Job from the history", "k8s_job", j.Name, "namespace", j.Namespace, "err", err)
				continue
			}
			e.log.Debug("expired Job from the history", "k8s_job", j.Name, "namespace", j.Namespace, "outcome", outcome)
		}
	}
}

// deleteJob deletes a Job (its pods and token Secret go with it, as its dependents).
func (e *Executor) deleteJob(ctx context.Context, j *batchv1.Job) error {
	bg := metav1.DeletePropagationBackground
	err := e.o.Client.BatchV1().Jobs(j.Namespace).Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &j.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	return nil
}

// deleteTokenSecret deletes the token Secret of a Job kept in the history (no job runner needs
// it any more), and only if the Job owns it: a Secret of that name that is not the Job's is left
// alone, as anything in the jobs namespace the agent did not make. The Secret this process
// created for the Job is deleted by its UID at once, one request instead of two; one it does not
// know (made before a restart, or replaced since) is read first to check its owner.
func (e *Executor) deleteTokenSecret(ctx context.Context, j *batchv1.Job) error {
	secrets := e.o.Client.CoreV1().Secrets(j.Namespace)
	name := TokenSecretName(j.Name, j.Annotations[AnnTokenSHA256])
	e.mu.Lock()
	uid, known := e.tokenSecrets[j.UID]
	e.mu.Unlock()
	if known {
		err := secrets.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil || apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err):
			return fmt.Errorf("delete token Secret of Job %s/%s: %w", j.Namespace, j.Name, err)
		}
	}
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read token Secret of Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	if !slices.ContainsFunc(s.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == j.UID }) {
		e.log.Warn("not deleting a Secret that is not the token Secret of the agent's Job", "secret", s.Name, "k8s_job", j.Name, "namespace", j.Namespace)
		return nil
	}
	err = secrets.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete token Secret of Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	return nil
}
