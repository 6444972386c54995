package tracing

// The OTLP/HTTP client. The SDK's own HTTP exporter (otlptracehttp) marshals its requests with
// the collector's service package, which also holds that service's gRPC stubs, and so linked
// gRPC and grpc-gateway into every binary that can trace: +19.6 MB for outpost-agent (47.6 →
// 67.2 MB, and the job runner copied into every job pod is that binary) and +10 MiB of resident
// memory in `outpost-agent version` (25.3 → 35.2 MiB), with tracing off. The request is one
// repeated field around the spans the SDK's transform already made, so it is written here.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// The standard variables of the exporter's own connection, read as the SDK's exporter read them;
// the TRACES_ form wins over the general one. They are not handed on to job pods.
const (
	envHeaders           = "OTEL_EXPORTER_OTLP_HEADERS"
	envTracesHeaders     = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	envCompression       = "OTEL_EXPORTER_OTLP_COMPRESSION"
	envTracesCompression = "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"
	envTimeout           = "OTEL_EXPORTER_OTLP_TIMEOUT"
	envTracesTimeout     = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
	envCertificate       = "OTEL_EXPORTER_OTLP_CERTIFICATE"
	envTracesCertificate = "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"
)

// exportTries bounds the tries of one batch: spans are worth a retry over a collector's restart,
// not a backlog that grows while it is down.
const exportTries = 3

// httpClient sends batches of spans to a collector's traces endpoint as OTLP/HTTP protobuf.
type httpClient struct {
	url      string
	headers  http.Header
	gzip     bool
	timeout  time.Duration
	client   *http.Client
	backoffs retry.Backoff
}

var _ otlptrace.Client = (*httpClient)(nil)

// newHTTPClient reads the connection's settings from getenv: headers (W3C baggage form,
// key=value pairs separated by commas, values percent-encoded), gzip compression, the timeout in
// milliseconds and a CA certificate file for https.
func newHTTPClient(tracesURL string, getenv func(string) string) (*httpClient, error) {
	pick := func(traces, general string) string {
		if v := strings.TrimSpace(getenv(traces)); v != "" {
			return v
		}
		return strings.TrimSpace(getenv(general))
	}
	c := &httpClient{url: tracesURL, headers: http.Header{}, timeout: 10 * time.Second,
		backoffs: retry.Backoff{Base: 500 * time.Millisecond, Max: 5 * time.Second}}
	if h := pick(envTracesHeaders, envHeaders); h != "" {
		for pair := range strings.SplitSeq(h, ",") {
			k, v, ok := strings.Cut(pair, "=")
			k = strings.TrimSpace(k)
			val, err := url.PathUnescape(strings.TrimSpace(v))
			if !ok || k == "" || err != nil {
				// The value may hold a credential: name the variable, never echo it.
				return nil, fmt.Errorf("%w: %s holds an entry that is not key=value (percent-encoded); write it as key1=value1,key2=value2", ErrSettings, envHeaders)
			}
			c.headers.Add(k, val)
		}
	}
	switch comp := pick(envTracesCompression, envCompression); comp {
	case "", "none":
	case "gzip":
		c.gzip = true
	default:
		return nil, fmt.Errorf("%w: %s=%q is not supported; use gzip or none", ErrSettings, envCompression, comp)
	}
	if t := pick(envTracesTimeout, envTimeout); t != "" {
		ms, err := strconv.Atoi(t)
		if err != nil || ms <= 0 {
			return nil, fmt.Errorf("%w: %s=%q is not a positive number of milliseconds", ErrSettings, envTimeout, t)
		}
		c.timeout = time.Duration(ms) * time.Millisecond
	}
	base, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, fmt.Errorf("tracing: unexpected default HTTP transport %T", http.DefaultTransport)
	}
	transport := base.Clone()
	if ca := pick(envTracesCertificate, envCertificate); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%w: read the collector's CA certificate named by %s: %w", ErrSettings, envCertificate, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: %s (%s) holds no PEM certificate", ErrSettings, envCertificate, ca)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c.client = &http.Client{Transport: transport}
	return c, nil
}

// Start is part of otlptrace.Client; the HTTP client needs no connection set up.
func (c *httpClient) Start(context.Context) error { return nil }

// Stop is part of otlptrace.Client; idle connections go.
func (c *httpClient) Stop(context.Context) error {
	c.client.CloseIdleConnections()
	return nil
}

// UploadTraces sends one ExportTraceServiceRequest: field 1 (resource_spans), repeated.
func (c *httpClient) UploadTraces(ctx context.Context, spans []*tracepb.ResourceSpans) error {
	var body []byte
	for _, rs := range spans {
		b, err := proto.Marshal(rs)
		if err != nil {
			return fmt.Errorf("tracing: encode spans: %w", err)
		}
		body = protowire.AppendTag(body, 1, protowire.BytesType)
		body = protowire.AppendBytes(body, b)
	}
	if c.gzip {
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		_, _ = w.Write(body)
		if err := w.Close(); err != nil {
			return fmt.Errorf("tracing: compress spans: %w", err)
		}
		body = z.Bytes()
	}
	b := c.backoffs
	for try := 1; ; try++ {
		wait, err := c.send(ctx, body)
		if err == nil || !errors.Is(err, errRetryable) || try == exportTries {
			return err
		}
		if err := retry.Sleep(ctx, b.Next(wait)); err != nil {
			return err
		}
	}
}

// errRetryable marks an export a later try may get through: no answer, 429, 502, 503 or 504.
var errRetryable = errors.New("retryable")

// send makes one try; on a retryable failure it returns the collector's Retry-After, if any.
func (c *httpClient) send(ctx context.Context, body []byte) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("tracing: %w", err)
	}
	for k, vs := range c.headers {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if c.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("tracing: export to %s: %w: %w", redacted(c.url), errRetryable, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode/100 == 2:
		return 0, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusBadGateway ||
		resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
		after, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return time.Duration(after) * time.Second, fmt.Errorf("tracing: export to %s: %w: %s", redacted(c.url), errRetryable, resp.Status)
	default:
		return 0, fmt.Errorf("tracing: the collector at %s refused the spans: %s: %s", redacted(c.url), resp.Status, strings.TrimSpace(string(msg)))
	}
}

// redacted is a URL with any password masked, for errors and logs.
func redacted(raw string) string { return Settings{TracesURL: raw}.String() }
