package tracing

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name     string
		endpoint string
		env      map[string]string
		want     string
		err      string
	}{
		{name: "nothing set is off"},
		{name: "the flag", endpoint: "http://col:4318/", want: "http://col:4318/v1/traces"},
		{name: "the flag wins", endpoint: "http://flag:4318", env: map[string]string{EnvEndpoint: "http://env:4318"}, want: "http://flag:4318/v1/traces"},
		{name: "base endpoint", env: map[string]string{EnvEndpoint: "https://env:4318"}, want: "https://env:4318/v1/traces"},
		{name: "traces endpoint wins", env: map[string]string{EnvEndpoint: "http://env:4318", EnvTracesEndpoint: "http://t:9/x"}, want: "http://t:9/x"},
		{name: "otlp alone is the default", env: map[string]string{EnvExporter: "otlp"}, want: "http://localhost:4318/v1/traces"},
		{name: "none wins", endpoint: "http://col:4318", env: map[string]string{EnvExporter: "none"}},
		{name: "other exporter", env: map[string]string{EnvExporter: "jaeger"}, err: "use otlp"},
		{name: "grpc refused", endpoint: "http://col:4317", env: map[string]string{EnvProtocol: "grpc"}, err: "http/protobuf"},
		{name: "not a URL", endpoint: "col:4318", err: "not an http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Resolve(tc.endpoint, env(tc.env))
			if tc.err != "" {
				if !errors.Is(err, ErrSettings) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want ErrSettings saying %q", err, tc.err)
				}
				return
			}
			if err != nil || s.TracesURL != tc.want {
				t.Fatalf("Resolve = %q, %v; want %q", s.TracesURL, err, tc.want)
			}
		})
	}
}

// TestOffIsNoop: tracing off is the no-op provider, and nothing is carried to children.
func TestOffIsNoop(t *testing.T) {
	p, err := Start(t.Context(), "x", Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.TracerProvider.(noop.TracerProvider); !ok {
		t.Fatalf("provider %T, want the no-op one", p.TracerProvider)
	}
	ctx, span := p.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	if span.IsRecording() || Traceparent(ctx) != "" || ChildEnv(ctx, Settings{}) != nil {
		t.Fatal("a span of the off provider records or is carried")
	}
}

func TestTraceparentRoundTrip(t *testing.T) {
	const tp = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"
	ctx := WithTraceparent(context.Background(), tp)
	if got := Traceparent(ctx); got != tp {
		t.Fatalf("Traceparent = %q, want %q", got, tp)
	}
	if got := TraceID(tp); got != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("TraceID = %q", got)
	}
	if TraceID("garbage") != "" || Traceparent(WithTraceparent(context.Background(), "garbage")) != "" {
		t.Fatal("a malformed traceparent is carried")
	}
	env := ChildEnv(ctx, Settings{TracesURL: "http://c:4318/v1/traces"})
	if !strings.Contains(strings.Join(env, " "), EnvTraceparent+"="+tp) || !strings.Contains(strings.Join(env, " "), EnvProtocol+"="+ProtocolHTTP) {
		t.Fatalf("ChildEnv = %v", env)
	}
}

// TestOffCostsOneContext: an untraced step (the no-op tracer, attributes built only for a
// recording span, as Outpost's spans do) costs one context value and no export.
func TestOffCostsOneContext(t *testing.T) {
	tracer := Off().Tracer("t")
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		_, span := tracer.Start(ctx, SpanEnqueue)
		if span.IsRecording() {
			t.Fatal("the no-op span records")
		}
		span.End()
	})
	if allocs > 1 {
		t.Fatalf("%.0f allocations per untraced span, want at most 1 (the context holding it)", allocs)
	}
}
