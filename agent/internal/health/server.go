// Package health serves the agent's /healthz, /readyz and Prometheus /metrics, from the moment
// the process starts. Readiness means "this replica can do its part": it reaches the Kubernetes
// API, it has what it needs to start (its private key: the key source sets check private_key
// until it has one), and if it leads, its session with the orchestrator is alive. /readyz says
// which check failed and why (the kubelet's probe event shows only the status code: read
// /readyz through a port-forward, the agent's log, or the connection record `helm test` reads).
package health

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// State is what readiness is judged on. Every field is updated by its owner (leader election,
// session, Kubernetes probe, the wait for the private key) and read by /readyz.
type State struct {
	mu        sync.Mutex
	leader    bool
	lastPoll  time.Time
	pollWait  time.Duration
	kubeCheck func(context.Context) error
	kubeOK    time.Time
	kubeErr   error
	failing   map[string]error // checks their owners run themselves (SetCheck), by name
	now       func() time.Time
}

// NewState returns a State; pollWait is the long-poll time (a poll older than twice that means
// the session is dead); kubeCheck probes the Kubernetes API (nil when the agent needs none).
func NewState(pollWait time.Duration, kubeCheck func(context.Context) error) *State {
	return &State{pollWait: pollWait, kubeCheck: kubeCheck, failing: map[string]error{}, now: time.Now}
}

// SetCheck records the outcome of a check its owner runs itself: while err is not nil the
// replica is not ready and /readyz shows check name failing with err's message; nil clears it.
func (s *State) SetCheck(name string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.failing, name)
		return
	}
	s.failing[name] = err
}

// SetLeader records whether this replica leads.
func (s *State) SetLeader(v bool) {
	s.mu.Lock()
	s.leader = v
	s.mu.Unlock()
}

// PollOK records a successful poll.
func (s *State) PollOK() {
	s.mu.Lock()
	s.lastPoll = s.now()
	s.mu.Unlock()
}

type check struct {
	OK      bool   `json:"ok"`
	Message string `json:"message,omitempty"`
}

// Ready evaluates readiness; the map says which check failed and why.
//
// A standby is ready too: it reaches Kubernetes and stands by to take over, and it forwards
// state-backend requests to the leader. Gating readiness on leadership would leave the standby
// unready forever, which stalls every rolling update of the Deployment and lets the
// PodDisruptionBudget block node drains. The leader must also hold a live session.
func (s *State) Ready(ctx context.Context) (bool, map[string]check) {
	s.mu.Lock()
	leader, last, wait := s.leader, s.lastPoll, s.pollWait
	out := map[string]check{"leader": {OK: true, Message: "this replica leads"}}
	for name, err := range s.failing {
		out[name] = check{Message: err.Error()}
	}
	s.mu.Unlock()
	if !leader {
		out["leader"] = check{OK: true, Message: "another replica leads; this one stands by"}
		out["session"] = check{OK: true, Message: "standby: the leader holds the session"}
	} else {
		age := s.now().Sub(last)
		switch {
		case last.IsZero():
			out["session"] = check{Message: "no successful poll yet"}
		case age > 2*wait:
			out["session"] = check{Message: "last successful poll " + age.Round(time.Second).String() + " ago"}
		default:
			out["session"] = check{OK: true}
		}
	}
	if s.kubeCheck != nil {
		if err := s.kube(ctx); err != nil {
			out["kubernetes"] = check{Message: err.Error()}
		} else {
			out["kubernetes"] = check{OK: true}
		}
	}
	ready := true
	for _, c := range out {
		ready = ready && c.OK
	}
	return ready, out
}

// kube probes the API server at most every 5 s, so frequent probes do not load it.
func (s *State) kube(ctx context.Context) error {
	s.mu.Lock()
	if s.now().Sub(s.kubeOK) < 5*time.Second {
		err := s.kubeErr
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := s.kubeCheck(ctx)
	s.mu.Lock()
	s.kubeOK, s.kubeErr = s.now(), err
	s.mu.Unlock()
	return err
}

// Handler serves /healthz (the process is up), /readyz and /metrics (the metrics registered on
// reg, which also gets the handler's own error counter).
func Handler(s *State, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, checks := s.Ready(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": ok, "checks": checks})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}
