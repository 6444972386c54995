package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing/tracingtest"
)

// TestExportOverHTTP: spans reach a collector that decodes them with the OTLP protobuf types
// (the request is written by hand, so the real decoder checks its encoding), with the headers and
// the gzip compression of the standard variables, over a collector that answers 503 twice first.
func TestExportOverHTTP(t *testing.T) {
	col := tracingtest.Start(t, "127.0.0.1:0")
	target, _ := url.Parse(col.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var seen []http.Header
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		n := len(seen)
		mu.Unlock()
		if n <= 2 {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":           front.URL,
		"OTEL_EXPORTER_OTLP_HEADERS":            "x-team=platform,authorization=Bearer%20abc",
		"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip",
	}
	s, err := tracing.Resolve("", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	p, err := tracing.Start(t.Context(), "outpost-test", s)
	if err != nil {
		t.Fatal(err)
	}
	ctx, root := p.Tracer("test").Start(t.Context(), "root")
	_, child := p.Tracer("test").Start(ctx, "child")
	child.End()
	root.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown (the export, after two 503s): %v", err)
	}
	got := tracingtest.Tree(col.Trace(root.SpanContext().TraceID().String()))
	if want := "root (outpost-test)\n  child (outpost-test)\n"; got != want {
		t.Fatalf("the collector holds\n%s\nwant\n%s", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 {
		t.Fatalf("%d requests, want 3 (two 503s, then the export)", len(seen))
	}
	h := seen[2]
	if h.Get("X-Team") != "platform" || h.Get("Authorization") != "Bearer abc" || h.Get("Content-Encoding") != "gzip" ||
		h.Get("Content-Type") != "application/x-protobuf" {
		t.Fatalf("request headers %v: want x-team, the decoded authorization, gzip and protobuf", h)
	}
}

// TestNoGRPCInTheBinaries: the programs that can trace do not link gRPC. The SDK's own OTLP/HTTP
// exporter pulled it in through the collector's service package (+19.6 MB for outpost-agent,
// which every job pod copies, and +10 MiB resident with tracing off).
func TestNoGRPCInTheBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("go list of three programs' dependencies: skipped under -short")
	}
	for _, pkg := range []string{"agent", "cmd/outpost-orchestrator", "cmd/outpost"} {
		out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "github.com/outpost-dev/terraform-provider-outpost/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for dep := range strings.SplitSeq(string(out), "\n") {
			if dep == "google.golang.org/grpc" || strings.HasPrefix(dep, "github.com/grpc-ecosystem/") {
				t.Errorf("%s links %s", pkg, dep)
			}
		}
	}
}
