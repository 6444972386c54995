package statebackend

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statetls"
)

func TestStandbyForwardsStateRequestsToLeader(t *testing.T) {
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "leader got "+r.Method+" "+r.URL.EscapedPath()+" from "+r.Header.Get("X-Outpost-Forwarded-By"))
	}))
	defer leader.Close()
	host, port, _ := net.SplitHostPort(leader.Listener.Addr().String())
	kube := fake.NewClientset(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "outpost-system", Name: "agent-a"},
		Status:     corev1.PodStatus{PodIP: host},
	})
	f := NewForwarder(kube, "outpost-system", "agent-b", ":"+port)

	serve := func() (*httptest.ResponseRecorder, bool) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(t.Context(), "LOCK", "/v1/states/team%2Fapp", nil)
		return rec, f.forward(rec, req)
	}

	// Mid-election: no leader known yet; the CLI is told to retry.
	if rec, handled := serve(); !handled || rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("no leader: handled=%v code=%d", handled, rec.Code)
	}
	// Standby: forwarded to the leader pod's IP.
	f.SetLeader("agent-a")
	rec, handled := serve()
	if !handled || rec.Code != http.StatusOK || rec.Body.String() != "leader got LOCK /v1/states/team%2Fapp from agent-b" {
		t.Fatalf("standby: handled=%v code=%d body=%q", handled, rec.Code, rec.Body.String())
	}
	// Leader: serves itself.
	f.SetLeading(true)
	if _, handled := serve(); handled {
		t.Fatal("the leader must serve state requests itself")
	}
	// Leader pod gone: a clear retryable answer, not a hang.
	f.SetLeading(false)
	f.SetLeader("agent-c")
	if rec, handled := serve(); !handled || rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("unknown leader pod: handled=%v code=%d", handled, rec.Code)
	}
}

// TestStandbyForwardsOverTLS: with the state backend's TLS, a standby reaches a leader whose pod
// declares the TLS port over TLS, verifying the certificate with the CA alone (a leader with a
// certificate of another CA gets no request), and a leader of the previous release (no TLS
// port) in plain HTTP on the plain port, so a rollout from that release keeps working.
func TestStandbyForwardsOverTLS(t *testing.T) {
	ca := testAuthority(t)
	hosts := []string{"outpost-agent.outpost-system.svc"}
	tlsLeader := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "TLS leader got "+r.Method+", TLS "+strconv.FormatBool(r.TLS != nil))
	}))
	cfg, err := ca.ServerConfig(hosts)
	if err != nil {
		t.Fatal(err)
	}
	tlsLeader.TLS = cfg
	tlsLeader.StartTLS()
	defer tlsLeader.Close()
	plainLeader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "plain leader got "+r.Method)
	}))
	defer plainLeader.Close()
	tlsHost, tlsPort, _ := net.SplitHostPort(tlsLeader.Listener.Addr().String())
	_, plainPort, _ := net.SplitHostPort(plainLeader.Listener.Addr().String())
	pod := func(name string, ports ...corev1.ContainerPort) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "outpost-system", Name: name},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Ports: ports}}},
			Status: corev1.PodStatus{PodIP: tlsHost}}
	}
	kube := fake.NewClientset(
		pod("new", corev1.ContainerPort{Name: "state", ContainerPort: 8080}, corev1.ContainerPort{Name: TLSPortName, ContainerPort: 8443}),
		pod("old", corev1.ContainerPort{Name: "state", ContainerPort: 8080}))
	forward := func(f *Forwarder, leader string) *httptest.ResponseRecorder {
		f.SetLeader(leader)
		rec := httptest.NewRecorder()
		if !f.forward(rec, httptest.NewRequestWithContext(t.Context(), "LOCK", "/v1/states/app", nil)) {
			t.Fatal("not forwarded")
		}
		return rec
	}

	f := NewForwarder(kube, "outpost-system", "standby", ":"+plainPort)
	f.UseTLS(ca.ClientConfig(hosts[0]), ":"+tlsPort)
	if rec := forward(f, "new"); rec.Code != http.StatusOK || rec.Body.String() != "TLS leader got LOCK, TLS true" {
		t.Fatalf("to a leader serving TLS: %d %q", rec.Code, rec.Body.String())
	}
	if rec := forward(f, "old"); rec.Code != http.StatusOK || rec.Body.String() != "plain leader got LOCK" {
		t.Fatalf("to a leader of the previous release: %d %q", rec.Code, rec.Body.String())
	}

	// A leader whose certificate another CA issued is not sent the request.
	other := NewForwarder(kube, "outpost-system", "standby", ":"+plainPort)
	other.UseTLS(testAuthority(t).ClientConfig(hosts[0]), ":"+tlsPort)
	if rec := forward(other, "new"); rec.Code != http.StatusBadGateway {
		t.Fatalf("a leader with a certificate of another CA: %d %q, want 502", rec.Code, rec.Body.String())
	}
}

// testAuthority is a new CA, kept in a Secret of a fake cluster.
func testAuthority(t *testing.T) *statetls.Authority {
	t.Helper()
	a, err := statetls.Load(t.Context(), fake.NewClientset().CoreV1().Secrets("outpost-system"), "state-tls")
	if err != nil {
		t.Fatal(err)
	}
	return a
}
