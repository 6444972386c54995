package kubernetes

// Starting an attempt: its Job built under the cluster owner's template, defaults and policy,
// then created, then its token Secret.

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
)

// Start implements executor.Executor: the Job first, then its token Secret created with the Job
// as owner, so the garbage collector removes the token with the Job and no Secret is ever left
// without one (two API writes per attempt; the pod waits for the Secret's volume, which exists
// long before the kubelet mounts it). The token Secret's name carries the token's digest, so it
// cannot be prepared before the claim. Every step tolerates having been done before.
func (e *Executor) Start(ctx context.Context, c *api.Claim, stateToken string) (err error) {
	ctx, span := e.createSpan(ctx, c)
	defer func() { tracing.End(span, err) }()
	runnerJob := c.Placement.Job
	if sa := e.o.ServiceAccount; sa != "" && runnerJob.ServiceAccount != sa {
		return fmt.Errorf("%w: the runner's job service account is %q but this agent was installed for %q; set the chart value jobs.serviceAccount.name (OUTPOST_JOB_SERVICE_ACCOUNT) to the runner's job.service_account",
			executor.ErrInvalidJob, runnerJob.ServiceAccount, sa)
	}
	if e.o.Namespace != "" && runnerJob.Namespace != e.o.Namespace {
		return fmt.Errorf("%w: the runner's job namespace is %q but this agent manages %q; set the chart value jobs.namespace (OUTPOST_JOB_NAMESPACE) to the runner's job.namespace",
			executor.ErrInvalidJob, runnerJob.Namespace, e.o.Namespace)
	}
	job, secret, err := e.build(c, stateToken)
	if err != nil {
		return err
	}
	addTraceEnv(&job.Spec.Template.Spec, tracing.ChildEnv(ctx, e.o.Tracing.Settings))
	ns := job.Namespace
	created, err := e.o.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		if created, err = e.o.Client.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("adopt Job %s/%s: %w", ns, job.Name, err)
		}
		if !e.sealed(created) || created.Annotations[AnnDeploymentID] != c.DeploymentID {
			// Not ours: whoever made it must not get this attempt's token, so no Secret is made.
			return fmt.Errorf("%w: a Job named %s already exists in namespace %s and this agent did not create it (it has no valid seal), so it was not adopted; "+
				"delete it (kubectl -n %s delete job %s) and find out who created it", executor.ErrInvalidJob, job.Name, ns, ns, job.Name)
		}
		e.log.Info("adopted existing Job", "deployment_id", c.DeploymentID, "attempt", c.Attempt, "k8s_job", job.Name)
	case err != nil:
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
			return fmt.Errorf("%w: Kubernetes refused Job %s/%s: %w", executor.ErrInvalidJob, ns, job.Name, err)
		}
		return fmt.Errorf("create Job %s/%s: %w", ns, job.Name, err)
	default:
		e.log.Info("created Job", "deployment_id", c.DeploymentID, "attempt", c.Attempt, "k8s_job", job.Name, "namespace", ns)
	}
	secret.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: created.Name, UID: created.UID}}
	secretUID, err := e.ensureSecret(ctx, secret)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.tokenSecrets[created.UID] = secretUID
	e.mu.Unlock()
	e.notify.Notify()
	return nil
}

// build turns a claim into its Job and token Secret, under the cluster owner's pinned template,
// security defaults and job pod policy: a pod the policy refuses is an error, and nothing exists
// yet to clean up.
func (e *Executor) build(c *api.Claim, stateToken string) (*batchv1.Job, *corev1.Secret, error) {
	if pinned := e.o.PinnedTemplate; pinned != "" {
		if c.Placement.Job.PodTemplate != "" && !sameTemplate(c.Placement.Job.PodTemplate, pinned) {
			e.log.Warn("ignoring the runner's pod template: the cluster owner pinned the template of job pods (chart value jobs.podTemplate)",
				"deployment_id", c.DeploymentID, "attempt", c.Attempt)
		}
		if c.Placement.Job.Pod != nil {
			e.log.Warn("ignoring the runner's job pod settings: the cluster owner pinned the template of job pods (chart value jobs.podTemplate)",
				"deployment_id", c.DeploymentID, "attempt", c.Attempt)
		}
		pc := *c
		pc.Placement.Job.PodTemplate = pinned
		pc.Placement.Job.Pod = nil
		c = &pc
	}
	pod, security := &e.o.PodOptions, &e.o.SecurityDefaults
	job, secret, err := BuildJob(c, stateToken, *pod, time.Now())
	if err != nil {
		if errors.Is(err, podtemplate.ErrInvalid) {
			return nil, nil, fmt.Errorf("%w: pod template of runner %s: %w", executor.ErrInvalidJob, pod.RunnerID, err)
		}
		return nil, nil, err
	}
	tpl := &job.Spec.Template
	security.Apply(&tpl.Spec, &e.o.Policy)
	if err := e.o.Policy.Check(tpl, pod.owned(secret.Name)); err != nil {
		return nil, nil, err
	}
	for _, l := range []map[string]string{job.Labels, tpl.Labels, secret.Labels} {
		l[LabelOrgID] = e.o.OrgID
	}
	job.Annotations[AnnOperation] = string(c.Placement.Operation)
	job.Annotations[AnnTokenSHA256] = tokenDigest(c.JobToken)
	e.seal(job)
	return job, secret, nil
}

// sameTemplate compares two templates by their canonical JSON.
func sameTemplate(a, b string) bool {
	na, errA := podtemplate.Normalize(a)
	nb, errB := podtemplate.Normalize(b)
	return errA == nil && errB == nil && na == nb
}
