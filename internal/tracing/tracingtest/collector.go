// Package tracingtest is an OTLP/HTTP trace collector for tests: it listens on loopback,
// decodes what exporters send to /v1/traces (protobuf or JSON, gzip or not) with the OTLP
// protobuf types, and keeps every span so a test can check a trace tree.
package tracingtest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened: ids in lowercase hex (as in a W3C traceparent), the
// parent's span id empty for a root.
type Span struct {
	TraceID  string
	SpanID   string
	ParentID string
	Name     string
	// Service is the resource's service.name: which program sent the span.
	Service string
	// Attrs are the span's attributes with their values as strings.
	Attrs map[string]string
	Start time.Time
	End   time.Time
}

// Collector receives OTLP/HTTP trace exports. Its zero value is not usable: call Start.
type Collector struct {
	// URL is the collector's base URL (http://127.0.0.1:port), the value for
	// OTEL_EXPORTER_OTLP_ENDPOINT.
	URL string

	mu    sync.Mutex
	spans []Span
	// requests counts export requests, so a test can tell "nothing sent" from "sent, no spans".
	requests int
}

// Start listens on addr (127.0.0.1:0 for any free loopback port; a test bed address where
// pods must reach it) and serves until the test ends.
func Start(t testing.TB, addr string) *Collector {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("tracingtest: listen on %s: %v", addr, err)
	}
	c := &Collector{URL: "http://" + l.Addr().String()}
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return c
}

// ServeHTTP takes one export request at /v1/traces.
func (c *Collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Method != http.MethodPost {
		http.Error(w, "only POST /v1/traces", http.StatusNotFound)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	raw, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	isJSON := strings.HasPrefix(r.Header.Get("Content-Type"), "application/json")
	if isJSON {
		err = protojson.Unmarshal(raw, &req)
	} else {
		err = proto.Unmarshal(raw, &req)
	}
	if err != nil {
		http.Error(w, "decode: "+err.Error(), http.StatusBadRequest)
		return
	}
	c.add(&req)
	resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	if isJSON {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

func (c *Collector) add(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, Span{
					TraceID:  hex.EncodeToString(s.GetTraceId()),
					SpanID:   hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()),
					Name:     s.GetName(),
					Service:  service,
					Attrs:    attrs(s.GetAttributes()),
					Start:    time.Unix(0, int64(s.GetStartTimeUnixNano())),
					End:      time.Unix(0, int64(s.GetEndTimeUnixNano())),
				})
			}
		}
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			m[kv.GetKey()] = v.GetStringValue()
		default:
			m[kv.GetKey()] = strings.Trim(fmt.Sprint(v.GetValue()), "&{}")
		}
	}
	return m
}

// Spans returns a copy of every span received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Requests is how many export requests arrived.
func (c *Collector) Requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests
}

// Trace returns the spans of one trace, sorted by start time.
func (c *Collector) Trace(traceID string) []Span {
	var out []Span
	for _, s := range c.Spans() {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// Tree renders a trace as an indented outline of "name (service)" lines, children under their
// parent in start order, so a failing test shows what arrived. A span whose parent never arrived
// is shown at the top level with "(parent missing)".
func Tree(spans []Span) string {
	byID := map[string]bool{}
	children := map[string][]Span{}
	for _, s := range spans {
		byID[s.SpanID] = true
	}
	var roots []Span
	for _, s := range spans {
		if s.ParentID == "" || !byID[s.ParentID] {
			roots = append(roots, s)
			continue
		}
		children[s.ParentID] = append(children[s.ParentID], s)
	}
	var b strings.Builder
	var walk func(s Span, depth int)
	walk = func(s Span, depth int) {
		fmt.Fprintf(&b, "%s%s (%s)", strings.Repeat("  ", depth), s.Name, s.Service)
		if depth == 0 && s.ParentID != "" {
			b.WriteString(" (parent missing)")
		}
		b.WriteString("\n")
		for _, c := range children[s.SpanID] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}
