// Package tracing is Outpost's OpenTelemetry tracing: one deployment is one trace, from the
// orchestrator's enqueue through the agent's claim and Job creation to the job runner's phases
// and the spans of OpenTofu itself. It is off unless configured, and off means the OpenTelemetry
// no-op tracer: no exporter, no goroutine, no allocation per span.
//
// The trace context travels as a W3C traceparent: stored on the deployment by the orchestrator,
// handed to the agent in the claim's placement, to the job runner in its environment
// (TRACEPARENT), and by the job runner to the CLI (TRACEPARENT plus the OTEL_* settings that make
// OpenTofu export its own spans to the same collector).
//
// Only OTLP over HTTP with protobuf is spoken (export.go): the one protocol OpenTofu, the Go SDK
// and every collector share without gRPC in the binaries (TestNoGRPCInTheBinaries).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The standard OpenTelemetry variables Outpost reads, and hands to the CLI.
const (
	// EnvExporter selects the trace exporter: otlp turns tracing on, none off.
	EnvExporter = "OTEL_TRACES_EXPORTER"
	// EnvEndpoint is the collector's OTLP base URL; /v1/traces is appended.
	EnvEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"
	// EnvTracesEndpoint is the full URL of the traces endpoint; it wins over EnvEndpoint.
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	// EnvProtocol is the OTLP protocol. Only http/protobuf is supported; OpenTofu needs it set,
	// as its default is gRPC.
	EnvProtocol = "OTEL_EXPORTER_OTLP_PROTOCOL"
	// EnvTracesProtocol is EnvProtocol for traces only.
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	// EnvTraceparent is the W3C traceparent of the span a process's own spans nest under, the
	// variable OpenTofu reads (its RFC #2448) and the job runner is given.
	EnvTraceparent = "TRACEPARENT"
	// ProtocolHTTP is the only OTLP protocol Outpost speaks.
	ProtocolHTTP = "http/protobuf"
)

// Settings say where traces go. The zero value is tracing off.
type Settings struct {
	// TracesURL is the full URL of the collector's traces endpoint (…/v1/traces); empty is off.
	TracesURL string

	// client is the exporter's connection as Resolve read it from the environment (headers,
	// compression, timeout, CA); nil is the defaults.
	client *httpClient
}

// String is the traces URL for logs, any password in it masked; "" when off.
func (s Settings) String() string {
	if u, err := url.Parse(s.TracesURL); err == nil {
		return u.Redacted()
	}
	return ""
}

// Enabled reports whether traces are exported.
func (s Settings) Enabled() bool { return s.TracesURL != "" }

// ErrSettings is a tracing configuration that cannot work.
var ErrSettings = errors.New("tracing settings")

// Resolve reads the settings: endpoint (a flag or configuration value: the collector's OTLP
// base URL, e.g. http://otel-collector:4318) wins, then the standard variables read with getenv.
// Tracing is on when an endpoint is known and OTEL_TRACES_EXPORTER is empty or otlp; otlp with
// no endpoint is the OTLP default, http://localhost:4318. OTEL_TRACES_EXPORTER=none turns it off
// whatever else is set.
func Resolve(endpoint string, getenv func(string) string) (Settings, error) {
	exporter := strings.TrimSpace(getenv(EnvExporter))
	switch exporter {
	case "", "otlp":
	case "none":
		return Settings{}, nil
	default:
		return Settings{}, fmt.Errorf("%w: %s=%q is not supported; use otlp (or none to turn tracing off)", ErrSettings, EnvExporter, exporter)
	}
	for _, name := range []string{EnvTracesProtocol, EnvProtocol} {
		if p := getenv(name); p != "" && p != ProtocolHTTP {
			return Settings{}, fmt.Errorf("%w: %s=%q is not supported; Outpost exports OTLP over HTTP only: set it to %s and point the endpoint at the collector's HTTP port (4318)", ErrSettings, name, p, ProtocolHTTP)
		}
	}
	var traces string
	switch {
	case endpoint != "":
		traces = tracesURL(endpoint)
	case getenv(EnvTracesEndpoint) != "":
		traces = getenv(EnvTracesEndpoint)
	case getenv(EnvEndpoint) != "":
		traces = tracesURL(getenv(EnvEndpoint))
	case exporter == "otlp":
		traces = "http://localhost:4318/v1/traces"
	default:
		return Settings{}, nil
	}
	u, err := url.Parse(traces)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Settings{}, fmt.Errorf("%w: the traces endpoint %q is not an http:// or https:// URL; give the collector's OTLP/HTTP base URL, e.g. http://otel-collector:4318", ErrSettings, traces)
	}
	client, err := newHTTPClient(traces, getenv)
	if err != nil {
		return Settings{}, err
	}
	return Settings{TracesURL: traces, client: client}, nil
}

// tracesURL is the traces endpoint under an OTLP base URL, as the OTLP specification derives it.
func tracesURL(base string) string { return strings.TrimRight(base, "/") + "/v1/traces" }

// Provider is a running tracer provider. Shutdown flushes what is buffered.
type Provider struct {
	trace.TracerProvider
	shutdown func(context.Context) error
}

// Shutdown exports the spans still buffered and stops the exporter; a no-op when tracing is off.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.shutdown == nil {
		return nil
	}
	return p.shutdown(ctx)
}

// Off is a provider whose tracers record nothing.
func Off() *Provider { return &Provider{TracerProvider: noop.NewTracerProvider()} }

// Start starts a provider for service (the resource's service.name, unless OTEL_SERVICE_NAME
// says otherwise) exporting to s, or Off when s is off. Spans are batched; Shutdown flushes them.
func Start(ctx context.Context, service string, s Settings) (*Provider, error) {
	if !s.Enabled() {
		return Off(), nil
	}
	client := s.client
	if client == nil {
		var err error
		if client, err = newHTTPClient(s.TracesURL, func(string) string { return "" }); err != nil {
			return nil, err
		}
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: start the OTLP exporter for %s: %w", s.TracesURL, err)
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", service)), resource.Environment())
	if err != nil {
		res = resource.NewSchemaless(attribute.String("service.name", service))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{TracerProvider: tp, shutdown: tp.Shutdown}, nil
}

// OrOff is p, or the no-op provider when p is nil, so a component's zero configuration traces
// nothing.
func OrOff(p trace.TracerProvider) trace.TracerProvider {
	if p == nil {
		return noop.NewTracerProvider()
	}
	return p
}

// End ends span, marking it failed with err when err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

var propagator = propagation.TraceContext{}

// Traceparent is the W3C traceparent of the span in ctx, or "" when ctx holds no valid (that
// is, recorded) span context: with tracing off nothing is carried.
func Traceparent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c.Get("traceparent")
}

// WithTraceparent is ctx with the remote span context of a W3C traceparent as the parent of the
// next span; ctx as it is when tp is empty or malformed (a bad traceparent starts a new trace,
// never fails a deployment).
func WithTraceparent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// TraceID is the trace id of a W3C traceparent, or "".
func TraceID(tp string) string {
	sc := trace.SpanContextFromContext(WithTraceparent(context.Background(), tp))
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// ChildEnv are the variables that make a child process (the CLI, the job runner) export its
// spans to s under the span in ctx: TRACEPARENT and the OTLP settings, in NAME=value form. None
// when tracing is off or ctx holds no span.
func ChildEnv(ctx context.Context, s Settings) []string {
	tp := Traceparent(ctx)
	if !s.Enabled() || tp == "" {
		return nil
	}
	return []string{
		EnvTraceparent + "=" + tp,
		EnvExporter + "=otlp",
		EnvTracesEndpoint + "=" + s.TracesURL,
		EnvProtocol + "=" + ProtocolHTTP,
		EnvTracesProtocol + "=" + ProtocolHTTP,
	}
}
