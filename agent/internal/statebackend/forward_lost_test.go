//go:build linux

package statebackend

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/outpost-dev/terraform-provider-outpost/internal/netnstest"
)

// TestForwardToLostLeaderEnds: a standby forwards a state write to a leader whose node is then
// lost (every packet to and from it dropped, in the test's own network namespace: nothing
// answers and nothing resets) on the connection it kept alive from the request before. The
// write ends with 502, which the CLI retries, within 20 s; with the transport's defaults it
// waited on the connection until the job's side gave up (the test's 60 s here).
func TestForwardToLostLeaderEnds(t *testing.T) {
	if !netnstest.Enter(t) {
		return
	}
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer leader.Close()
	host, port, _ := net.SplitHostPort(leader.Listener.Addr().String())
	kube := fake.NewClientset(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "outpost-system", Name: "agent-a"},
		Status:     corev1.PodStatus{PodIP: host},
	})
	f := NewForwarder(kube, "outpost-system", "agent-b", ":"+port)
	f.SetLeader("agent-a")
	forward := func(method string, wait time.Duration) (int, time.Duration) {
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(ctx, method, "/v1/states/app?ID=lock-1", strings.NewReader(`{"serial":2}`))
		start := time.Now()
		if !f.forward(rec, req) {
			t.Fatal("the standby did not forward")
		}
		return rec.Code, time.Since(start)
	}
	if code, _ := forward("LOCK", 10*time.Second); code != http.StatusOK {
		t.Fatalf("forwarded LOCK: %d", code)
	}
	netnstest.Lose(t, port)
	code, took := forward(http.MethodPost, 60*time.Second)
	t.Logf("the write forwarded to the lost leader ended %s later with %d", took.Round(100*time.Millisecond), code)
	if code != http.StatusBadGateway || took > 20*time.Second {
		t.Errorf("the write forwarded to the lost leader: %d after %s; want 502 within 20 s", code, took.Round(100*time.Millisecond))
	}
}
