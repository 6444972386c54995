package connection

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func leaseWith(st Status) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: testLease, Namespace: testNS, Annotations: map[string]string{}}}
	st.annotate(l.Annotations)
	return l
}

// TestCheck: a recent success without a later failure passes; anything else fails with a
// message that names the orchestrator's URL, the last error and what to do about its kind.
func TestCheck(t *testing.T) {
	now := time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC)
	url := "https://orch.example"
	o := CheckOptions{Namespace: testNS, LeaseName: testLease, MaxAge: 2 * time.Minute}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		want  []string // nil: passes
	}{
		{name: "recent success", lease: leaseWith(Status{URL: url, Instance: "agent-0", LastOK: now.Add(-40 * time.Second)})},
		{name: "success after an error", lease: leaseWith(Status{URL: url, LastOK: now.Add(-5 * time.Second),
			LastError: "dial: refused", Kind: KindNetwork, LastErrorAt: now.Add(-30 * time.Second)})},
		{name: "no Lease", want: []string{"Lease outpost/outpost-agent does not exist", "kubectl -n outpost get pods"}},
		{name: "Lease without a record", lease: leaseWith(Status{}), want: []string{"has not recorded a poll"}},
		{name: "never reached", lease: leaseWith(Status{URL: "http://127.0.0.1:1", Instance: "agent-0",
			LastError: `Post "http://127.0.0.1:1/api/v1/agent/poll": dial tcp 127.0.0.1:1: connect: connection refused`, Kind: KindNetwork, LastErrorAt: now.Add(-3 * time.Second)}),
			want: []string{"never reached the orchestrator at http://127.0.0.1:1", "connection refused", "(3s ago)", "apiUrl (http://127.0.0.1:1)", "NetworkPolicy's egress",
				"kubectl -n outpost logs agent-0"}},
		{name: "failing now", lease: leaseWith(Status{URL: url, LastOK: now.Add(-20 * time.Second),
			LastError: "orchestrator: unknown key (HTTP 401, unauthorized)", Kind: KindRefused, LastErrorAt: now.Add(-2 * time.Second)}),
			want: []string{"reached the orchestrator at https://orch.example 20s ago, but its latest poll failed", "HTTP 401", "public_keys", "privateKey.existingSecret"}},
		{name: "untrusted certificate", lease: leaseWith(Status{URL: url, LastError: "x509: certificate signed by unknown authority", Kind: KindTLS, LastErrorAt: now}),
			want: []string{"caBundle.existingSecret"}},
		{name: "stale", lease: leaseWith(Status{URL: url, LastOK: now.Add(-10 * time.Minute)}),
			want: []string{"last reached the orchestrator at https://orch.example 10m0s ago, longer than 2m0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset()
			if tc.lease != nil {
				kube = fake.NewClientset(tc.lease)
			}
			_, err := Check(context.Background(), kube, o, now)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("failed: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("passed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestWait: the check waits for a success recorded while it waits, and gives up after --wait
// with the message and exit code 1.
func TestWait(t *testing.T) {
	o := CheckOptions{Namespace: testNS, LeaseName: testLease, MaxAge: time.Minute}
	kube := fake.NewClientset(leaseWith(Status{URL: "http://127.0.0.1:1", LastError: "connection refused", Kind: KindNetwork, LastErrorAt: time.Now()}))
	var stdout, stderr bytes.Buffer
	start := time.Now()
	if code := Wait(context.Background(), kube, o, 200*time.Millisecond, 50*time.Millisecond, &stdout, &stderr); code != exitFailed {
		t.Fatalf("exit %d, want %d", code, exitFailed)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("gave up after %s, want about the 200ms of --wait", took)
	}
	if !strings.Contains(stderr.String(), "FAIL: the agent has never reached the orchestrator at http://127.0.0.1:1") || !strings.Contains(stdout.String(), "waiting up to 200ms") {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}

	go func() {
		time.Sleep(100 * time.Millisecond)
		_, _ = kube.CoordinationV1().Leases(testNS).Update(context.Background(),
			leaseWith(Status{URL: "https://orch.example", Version: "1.2.3", Instance: "agent-0", LastOK: time.Now()}), metav1.UpdateOptions{})
	}()
	stdout.Reset()
	stderr.Reset()
	if code := Wait(context.Background(), kube, o, 10*time.Second, 20*time.Millisecond, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "ok: the agent reached the orchestrator at https://orch.example (release 1.2.3)") {
		t.Errorf("stdout %q", stdout.String())
	}
}

func TestMainUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--lease", "x"}, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "--namespace and --lease are required") {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
}
