package orchestrator

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// metrics are the orchestrator's Prometheus metrics, in a registry of its own so that several
// servers in one test process do not collide.
type metrics struct {
	registry     *prometheus.Registry
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	authFailures *prometheus.CounterVec
	polls        prometheus.Gauge
	inFlight     prometheus.Gauge
	purged       *prometheus.CounterVec
	reasons      *prometheus.CounterVec
}

// knownAuthReasons are pre-created at zero, so a dashboard (and a test) sees the series before
// the first failure.
var knownAuthReasons = []string{
	string(agentauth.ReasonMissing), string(agentauth.ReasonMalformed), string(agentauth.ReasonUnknownKey),
	string(agentauth.ReasonBadSignature), string(agentauth.ReasonExpired), string(agentauth.ReasonNotYetValid),
	string(agentauth.ReasonLifetime), string(agentauth.ReasonAudience), string(agentauth.ReasonReplayed),
	string(agentauth.ReasonMethod), string(agentauth.ReasonURL), string(agentauth.ReasonBody),
	string(agentauth.ReasonInternal),
	store.AuthReasonAdminToken, store.AuthReasonOrgToken, store.AuthReasonOtherOrg, store.AuthReasonJobToken, store.AuthReasonJobTokenExpired, store.AuthReasonRunnerGone,
}

func newMetrics(st *store.Store) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_orchestrator_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outpost_orchestrator_request_duration_seconds",
			Help:    "HTTP request duration by route pattern; long polls are held up to 30 s.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_orchestrator_auth_failures_total",
			Help: "Refused credentials by reason: agent token checks (agentauth reasons), admin_token, org_token, other_org (an organisation token on another organisation), job_token, job_token_expired, runner_gone.",
		}, []string{"reason"}),
		polls: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outpost_orchestrator_long_polls_in_flight",
			Help: "Agent long polls being held open.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outpost_orchestrator_requests_in_flight",
			Help: "Requests whose handler is running (long polls included).",
		}),
		purged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_orchestrator_purged_total",
			Help: "Ended deployments whose part retention deleted: what=sources (source and variables), logs (log and events), deployments (the whole deployment).",
		}, []string{"what"}),
		reasons: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_orchestrator_deployment_reasons_total",
			Help: "Reasons agents reported by organisation and runner: why an attempt waited (unschedulable, image_pull, quota_exceeded, …) or why it ended without success (oom_killed, deadline_exceeded, canceled, …); each reason counts once per attempt. Reasons an older orchestrator does not know count as other.",
		}, []string{"org", "runner", "reason"}),
	}
	for _, w := range []string{"sources", "logs", "deployments"} {
		m.purged.WithLabelValues(w)
	}
	for _, r := range knownAuthReasons {
		m.authFailures.WithLabelValues(r)
	}
	m.registry.MustRegister(m.requests, m.duration, m.authFailures, m.polls, m.inFlight, m.purged, m.reasons,
		&storeGauge{desc: prometheus.NewDesc("outpost_orchestrator_jobs", "Deployments by status.", []string{"status"}, nil),
			read: func(ctx context.Context) ([]gaugeSample, error) {
				counts, err := st.StatusCounts(ctx)
				out := make([]gaugeSample, 0, len(api.Statuses))
				for _, s := range api.Statuses {
					out = append(out, gaugeSample{float64(counts[s]), []string{string(s)}})
				}
				return out, err
			}},
		&storeGauge{desc: prometheus.NewDesc("outpost_orchestrator_queue_depth",
			"Queued deployments by organisation and runner (runners with none queued are left out).", []string{"org", "runner"}, nil),
			read: func(ctx context.Context) ([]gaugeSample, error) {
				depths, err := st.QueueDepths(ctx)
				out := make([]gaugeSample, 0, len(depths))
				for _, d := range depths {
					out = append(out, gaugeSample{float64(d.Queued), []string{d.Org, d.Runner}})
				}
				return out, err
			}},
		&storeGauge{desc: prometheus.NewDesc("outpost_orchestrator_drifted_states",
			"State keys whose last drift check found changes, by organisation (organisations with none are left out).", []string{"org"}, nil),
			read: func(ctx context.Context) ([]gaugeSample, error) {
				counts, err := st.DriftedStates(ctx)
				out := make([]gaugeSample, 0, len(counts))
				for org, n := range counts {
					out = append(out, gaugeSample{float64(n), []string{org}})
				}
				return out, err
			}},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

func (m *metrics) countPurged(p store.Purged) {
	m.purged.WithLabelValues("sources").Add(float64(p.Sources))
	m.purged.WithLabelValues("logs").Add(float64(p.Logs))
	m.purged.WithLabelValues("deployments").Add(float64(p.Deployments))
}

func (m *metrics) observe(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

// storeGauge reads its samples from the store at scrape time: the per-status counters the store
// keeps in step with the deployments (so a scrape costs one small read, not a scan of every
// deployment; the metric keeps the name outpost_orchestrator_jobs, as metric names stay stable),
// and each runner's queue from the engine's queue index (a scan of the queued deployments only,
// which quotas bound per organisation).
type storeGauge struct {
	desc *prometheus.Desc
	read func(context.Context) ([]gaugeSample, error)
}

// gaugeSample is one value of a storeGauge with its label values.
type gaugeSample struct {
	value  float64
	labels []string
}

func (g *storeGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *storeGauge) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	samples, err := g.read(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(g.desc, err)
		return
	}
	for _, x := range samples {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, x.value, x.labels...)
	}
}
