package tracing

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// TestExportRefusedSaysWhy: a collector's permanent refusal is not retried and its answer is in
// the error (the SDK's batcher hands it to the OpenTelemetry error handler, which logs it); a
// header variable that cannot be read is refused at Resolve without echoing it.
func TestExportRefusedSaysWhy(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		http.Error(w, "unknown tenant", http.StatusBadRequest)
	}))
	t.Cleanup(srv.Close)
	c, err := newHTTPClient(srv.URL+"/v1/traces", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	err = c.UploadTraces(t.Context(), []*tracepb.ResourceSpans{{}})
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "unknown tenant") {
		t.Fatalf("export error %v, want the collector's 400 and its words", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d requests, want 1: a 400 is not retried", n)
	}

	_, err = Resolve("http://collector:4318", func(k string) string {
		return map[string]string{EnvExporter: "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "api-key-s3cr3t"}[k]
	})
	if !errors.Is(err, ErrSettings) || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("error %v, want ErrSettings that does not echo the header", err)
	}
}

// TestExportCertificateAndTimeout: OTEL_EXPORTER_OTLP_CERTIFICATE names the CA an https
// collector is checked against (without it the same collector is refused), and
// OTEL_EXPORTER_OTLP_TIMEOUT bounds a try.
func TestExportCertificateAndTimeout(t *testing.T) {
	slow := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Slow") != "" {
			select {
			case <-slow:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(func() { close(slow); srv.Close() })
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	spans := []*tracepb.ResourceSpans{{}}
	without, err := newHTTPClient(srv.URL+"/v1/traces", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	without.backoffs.Base, without.backoffs.Max = time.Millisecond, time.Millisecond
	if err := without.UploadTraces(t.Context(), spans); err == nil {
		t.Fatal("an https collector whose CA is not named was taken")
	}
	env := map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": ca, "OTEL_EXPORTER_OTLP_TIMEOUT": "100",
		"OTEL_EXPORTER_OTLP_HEADERS": "x-slow=1"}
	with, err := newHTTPClient(srv.URL+"/v1/traces", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	with.backoffs.Base, with.backoffs.Max = time.Millisecond, time.Millisecond
	if err := with.UploadTraces(t.Context(), spans); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("export to a collector that never answers: %v, want the 100 ms timeout", err)
	}
	with.headers.Del("X-Slow")
	if err := with.UploadTraces(t.Context(), spans); err != nil {
		t.Fatalf("export with the collector's CA: %v", err)
	}
}
