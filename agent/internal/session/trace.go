package session

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
)

// claimSpan starts the span of a claim that succeeded, under the deployment's enqueue span (the
// placement's traceparent), from when the claim was sent (or the poll answer that carried it,
// agent protocol 7, arrived): it lasts until the executor started
// the attempt, whose span (the Job's creation) nests under it and is handed to the job runner.
// The span starts only once the claim is answered because only the answer carries the
// traceparent; an untraced deployment gets a span of a trace of its own only when the agent
// traces at all.
func (s *Session) claimSpan(ctx context.Context, c *api.Claim, from time.Time) (context.Context, trace.Span) {
	tracer := s.o.TracerProvider.Tracer("github.com/outpost-dev/terraform-provider-outpost/agent/internal/session")
	ctx, span := tracer.Start(tracing.WithTraceparent(ctx, c.Placement.Traceparent), tracing.SpanClaim, trace.WithTimestamp(from))
	if span.IsRecording() { // untraced, nothing is built for the no-op span
		span.SetAttributes(attribute.String(tracing.AttrDeployment, c.DeploymentID), attribute.Int(tracing.AttrAttempt, c.Attempt),
			attribute.String(tracing.AttrOperation, string(c.Placement.Operation)))
	}
	return ctx, span
}
