// Package metrics defines the agent's Prometheus metrics: orchestrator requests, polls, claims,
// attempts, events and leadership. Metric names stay stable once published; the Go names follow the
// glossary (ARCHITECTURE.md), so some differ (JobsRunning counts attempts). Package health serves
// them on /metrics; the session, the API client's request hook and the leader election update them.
package metrics

import (
	"context"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// Metrics are the agent's Prometheus metrics, on a registry of their own so nothing a library
// registers globally leaks in.
type Metrics struct {
	Registry        *prometheus.Registry
	Requests        *prometheus.CounterVec
	RequestDuration *prometheus.HistogramVec
	PollDuration    prometheus.Histogram
	Claims          *prometheus.CounterVec
	JobsRunning     prometheus.Gauge
	CapacityFree    prometheus.Gauge
	StartLatency    prometheus.Histogram
	JobDuration     *prometheus.HistogramVec
	JobFailures     *prometheus.CounterVec
	// Waiting counts the reasons attempts waited for before their CLI started, as reported.
	Waiting       *prometheus.CounterVec
	Readopted     prometheus.Counter
	PendingEvents prometheus.Gauge
	Leader        prometheus.Gauge
	Events        *prometheus.CounterVec
	PollFailures  *prometheus.CounterVec
	KeyRefused    prometheus.Gauge
	KeyChanges    prometheus.Counter
}

// New registers every metric on a new registry.
func New(version string) *Metrics {
	const ns = "outpost_agent"
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "orchestrator_requests_total",
			Help: "HTTP requests to the orchestrator by endpoint and status code, every try counted (0 = no response)."}, []string{"endpoint", "code"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "orchestrator_request_duration_seconds",
			Help: "Duration of each try of an HTTP request to the orchestrator.", Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"endpoint"}),
		PollDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "poll_duration_seconds",
			Help: "Duration of long polls, held open up to 30 s.", Buckets: []float64{.05, .25, 1, 5, 10, 20, 30, 45}}),
		Claims: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "claims_total",
			Help: "Claims by result: claimed, conflict, error, start_failed, invalid, refused (by the job pod policy)."}, []string{"result"}),
		JobsRunning:  prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "jobs_running", Help: "Attempts held and not finished (their Jobs or processes)."}),
		CapacityFree: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "capacity_free", Help: "Free attempt slots stated in the last poll."}),
		StartLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "job_start_latency_seconds",
			Help: "Time from claim to the attempt's CLI running (the Job's main container, or the process).", Buckets: []float64{.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300}}),
		JobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "job_duration_seconds",
			Help: "Run time of finished attempts by result.", Buckets: prometheus.ExponentialBuckets(1, 2.5, 10)}, []string{"result"}),
		JobFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "job_failures_total",
			Help: "Failed attempts by reason (exit_code, oom_killed, deadline_exceeded, unschedulable, image_pull, ...)."}, []string{"reason"}),
		Waiting: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "job_waits_total",
			Help: "Reasons attempts waited for before their CLI started (unschedulable, image_pull, quota_exceeded, ...), each once per attempt, as reported to the orchestrator."}, []string{"reason"}),
		Readopted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "readopted_jobs_total",
			Help: "Attempts found running when this agent became leader or started."}),
		PendingEvents: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "pending_events",
			Help: "Finished events not yet acknowledged by the orchestrator."}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "leader", Help: "1 while this replica leads."}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "events_total",
			Help: "Event sends by outcome: acknowledged (a finished event), retry, refused."}, []string{"outcome"}),
		PollFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "poll_failures_total",
			Help: "Polls that failed after the client's own retries, by reason: unknown_key, unauthorized, incompatible_protocol, unavailable, other."}, []string{"reason"}),
		KeyRefused: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "key_refused",
			Help: "1 while the orchestrator refuses the runner keys the agent holds as unknown (the last poll failed with unknown_key)."}),
		KeyChanges: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "key_changes_total",
			Help: "Times the runner keys the agent holds changed after the first load (a rotation reached the agent)."}),
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "build_info", Help: "Agent build.", ConstLabels: prometheus.Labels{"version": version}})
	info.Set(1)
	m.Registry.MustRegister(m.Requests, m.RequestDuration, m.PollDuration, m.Claims, m.JobsRunning, m.CapacityFree,
		m.StartLatency, m.JobDuration, m.JobFailures, m.Waiting, m.Readopted, m.PendingEvents, m.Leader, m.Events, m.PollFailures, m.KeyRefused, m.KeyChanges, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// RequestHook counts orchestrator requests; pass it to client.WithRequestHook.
func (m *Metrics) RequestHook(_ context.Context, info client.RequestInfo) {
	ep := Endpoint(info.Path)
	m.Requests.WithLabelValues(ep, statusCode(info.Status)).Inc()
	m.RequestDuration.WithLabelValues(ep).Observe(info.Duration.Seconds())
}

// Endpoint turns a request path into a low-cardinality label: deployment ids are dropped.
func Endpoint(path string) string {
	p := strings.TrimPrefix(path, "/api/v1/")
	parts := strings.Split(p, "/")
	switch {
	case len(parts) >= 4 && parts[0] == "agent" && parts[1] == "deployments":
		return parts[3]
	case len(parts) >= 2 && parts[0] == "agent":
		return parts[1]
	}
	return "other"
}

func statusCode(code int) string { return strconv.Itoa(code) }
