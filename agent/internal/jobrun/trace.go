package jobrun

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
)

// jobTrace is the job runner's part of a deployment's trace: a span for the whole run under the
// TRACEPARENT the executor set (the Job's creation), a span per phase under it, and the CLI's
// own spans under its phase through TRACEPARENT and the OTLP settings in the CLI's environment.
// Without tracing settings every span is the no-op one and the CLI gets no tracing variables.
type jobTrace struct {
	settings tracing.Settings
	provider *tracing.Provider
	tracer   trace.Tracer
	ctx      context.Context // holds the run's span
	span     trace.Span
	// current holds the span of the phase running now (the run's between phases): the parent
	// of the state writes the CLI makes through the state proxy.
	current atomic.Pointer[context.Context]
}

// takeTraceparent takes TRACEPARENT out of the job runner's environment, which every process it
// starts inherits (`tofu version`, git, the CLI), and returns os.Getenv that still answers it:
// only the job runner's spans nest directly under the executor's, each CLI run gets the
// traceparent of its phase (cliEnv).
func takeTraceparent() func(string) string {
	tp := os.Getenv(tracing.EnvTraceparent)
	_ = os.Unsetenv(tracing.EnvTraceparent)
	return func(name string) string {
		if name == tracing.EnvTraceparent {
			return tp
		}
		return os.Getenv(name)
	}
}

// startJobTrace starts the run's span from the environment the executor set (tracing.ChildEnv);
// a setting that cannot work is said in the log and tracing stays off, never failing the run.
func startJobTrace(ctx context.Context, getenv func(string) string, log io.Writer) *jobTrace {
	s, err := tracing.Resolve("", getenv)
	if err != nil {
		fmt.Fprintf(log, "==> outpost: tracing off: %v\n", err)
		s = tracing.Settings{}
	}
	p, err := tracing.Start(ctx, "outpost-job", s)
	if err != nil {
		fmt.Fprintf(log, "==> outpost: tracing off: %v\n", err)
		p, s = tracing.Off(), tracing.Settings{}
	}
	t := &jobTrace{settings: s, provider: p, tracer: p.Tracer("github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobrun")}
	t.ctx, t.span = t.tracer.Start(tracing.WithTraceparent(context.Background(), getenv(tracing.EnvTraceparent)), tracing.SpanJob)
	t.current.Store(&t.ctx)
	return t
}

// describe puts the attempt on the run's span once the job spec says what it is.
func (t *jobTrace) describe(spec *api.JobSpec) {
	t.span.SetAttributes(attribute.String(tracing.AttrDeployment, spec.DeploymentID), attribute.Int(tracing.AttrAttempt, spec.Attempt),
		attribute.String(tracing.AttrOperation, string(spec.Operation)), attribute.String(tracing.AttrRunner, spec.RunnerID))
}

// phase starts the span of one phase under the run's; call the returned end with the phase's
// outcome (a nil error and exit code 0 is success).
func (t *jobTrace) phase(name string) (context.Context, func(code int, err error)) {
	ctx, span := t.tracer.Start(t.ctx, name)
	t.current.Store(&ctx)
	return ctx, func(code int, err error) {
		t.current.Store(&t.ctx)
		switch {
		case err != nil:
			span.SetStatus(codes.Error, err.Error())
		case code != 0:
			span.SetStatus(codes.Error, fmt.Sprintf("exit code %d", code))
		}
		if code != 0 {
			span.SetAttributes(attribute.Int("process.exit.code", code))
		}
		span.End()
	}
}

// stateWrites wraps the state proxy's handler: each state write (the http backend's POST) is a
// span under the phase that made it, with the answer's status. Reads and lock calls are not
// timed: a run makes many, and the CLI's own spans cover them.
func (t *jobTrace) stateWrites(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		_, span := t.tracer.Start(*t.current.Load(), tracing.SpanStateWrite, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.Int64("http.request.body.size", r.ContentLength)))
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		if sw.status >= http.StatusBadRequest {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
		span.End()
	})
}

// statusWriter notes the status of an answer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// cliEnv are the tracing variables of a CLI run in the phase of ctx: its spans nest under the
// phase. With tracing off, TRACEPARENT is blanked, so the CLI never joins the trace of the
// Job's creation through the job runner's own environment.
func (t *jobTrace) cliEnv(ctx context.Context) []string {
	if env := tracing.ChildEnv(ctx, t.settings); env != nil {
		return env
	}
	return []string{tracing.EnvTraceparent + "="}
}

// end ends the run's span with the job runner's exit code and exports what is buffered, within
// ctx.
func (t *jobTrace) end(ctx context.Context, code int) {
	if code != 0 {
		t.span.SetStatus(codes.Error, fmt.Sprintf("exit code %d", code))
		t.span.SetAttributes(attribute.Int("process.exit.code", code))
	}
	t.span.End()
	_ = t.provider.Shutdown(ctx)
}
