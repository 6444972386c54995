package health

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/metrics"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

func TestReadiness(t *testing.T) {
	now := time.Unix(1000, 0)
	kubeErr := errors.New("connection refused")
	var kubeCalls int
	s := NewState(30*time.Second, func(context.Context) error { kubeCalls++; return kubeErr })
	s.now = func() time.Time { return now }
	m := metrics.New("test")
	srv := httptest.NewServer(Handler(s, m.Registry))
	defer srv.Close()
	get := func(path string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("healthz %d", code)
	}
	// A standby that cannot reach Kubernetes is not ready; one that can is (it stands by and
	// forwards state requests), so rolling updates and node drains are not blocked by it.
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "another replica leads") || !strings.Contains(body, "connection refused") {
		t.Errorf("standby with Kubernetes down: readyz %d %s", code, body)
	}
	kubeErr = nil
	now = now.Add(6 * time.Second) // past the probe cache
	if code, body := get("/readyz"); code != 200 || !strings.Contains(body, "stands by") {
		t.Errorf("healthy standby: readyz %d %s", code, body)
	}
	s.SetLeader(true)
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "no successful poll") {
		t.Errorf("leader without a session: readyz %d %s", code, body)
	}
	s.PollOK()
	kubeErr = errors.New("connection refused")
	now = now.Add(6 * time.Second)
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "connection refused") {
		t.Errorf("kube down readyz %d %s", code, body)
	}
	kubeErr = nil
	now = now.Add(6 * time.Second) // past the probe cache
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("ready readyz %d %s", code, body)
	}
	calls := kubeCalls
	get("/readyz")
	if kubeCalls != calls {
		t.Errorf("kube probed again within 5 s (%d → %d calls)", calls, kubeCalls)
	}
	now = now.Add(61 * time.Second)
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "last successful poll 1m13s ago") {
		t.Errorf("stale session readyz %d %s", code, body)
	}
	m.RequestHook(t.Context(), client.RequestInfo{Path: "/api/v1/agent/deployments/dep-1/claim", Status: 409, Duration: time.Millisecond})
	if _, body := get("/metrics"); !strings.Contains(body, `outpost_agent_orchestrator_requests_total{code="409",endpoint="claim"} 1`) {
		t.Error("metrics lack the claim request")
	}
}
