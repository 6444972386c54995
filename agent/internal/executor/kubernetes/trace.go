package kubernetes

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
)

// Tracing is where the executor's span of each Job creation goes, and where the job runner and
// its CLI send theirs: the agent's settings, handed to main with the traceparent of the Job's
// creation (tracing.ChildEnv).
type Tracing struct {
	Settings tracing.Settings
	// Provider makes the executor's spans; nil traces nothing.
	Provider trace.TracerProvider
}

// createSpan starts the span of one Job's creation, under the claim's span in ctx.
func (e *Executor) createSpan(ctx context.Context, c *api.Claim) (context.Context, trace.Span) {
	tracer := tracing.OrOff(e.o.Tracing.Provider).Tracer("github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes")
	ctx, span := tracer.Start(ctx, tracing.SpanCreateJob)
	if span.IsRecording() { // untraced, nothing is built for the no-op span
		span.SetAttributes(attribute.String(tracing.AttrDeployment, c.DeploymentID), attribute.Int(tracing.AttrAttempt, c.Attempt),
			attribute.String(tracing.AttrJob, JobName(c.DeploymentID, c.Attempt)))
	}
	return ctx, span
}

// addTraceEnv sets main's tracing variables (NAME=value pairs, tracing.ChildEnv): the job
// runner's spans nest under the Job's creation. They replace variables of the same names the
// template set, since a stale TRACEPARENT would graft the run onto another trace.
func addTraceEnv(spec *corev1.PodSpec, vars []string) {
	if len(vars) == 0 {
		return
	}
	env := make([]corev1.EnvVar, 0, len(vars))
	for _, kv := range vars {
		name, value, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: name, Value: value})
	}
	for i := range spec.Containers {
		if c := &spec.Containers[i]; c.Name == podtemplate.MainContainer {
			c.Env = podtemplate.ReplaceByKey(c.Env, env, func(e corev1.EnvVar) []string { return []string{e.Name} })
		}
	}
}
