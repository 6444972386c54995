package connection

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

const (
	testNS    = "outpost"
	testLease = "outpost-agent"
)

// clock is a test's time.
type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock               { return &clock{t: time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC)} }
func refused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
}
func leaseOf(t *testing.T, kube kubernetes.Interface) *coordinationv1.Lease {
	t.Helper()
	l, err := kube.CoordinationV1().Leases(testNS).Get(context.Background(), testLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// step writes whatever is due now, as Run would, and says whether anything was.
func step(t *testing.T, r *Recorder) bool {
	t.Helper()
	st, _, due := r.next()
	if due {
		err := r.write(context.Background(), st)
		r.wrote(st, err)
		if err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	return due
}

// TestRecorderThrottles: the first outcome and every change between succeeding and failing are
// written at once; anything else at most once per Every; a single replica without leader
// election creates the Lease.
func TestRecorderThrottles(t *testing.T) {
	kube := fake.NewClientset()
	c := newClock()
	r := NewRecorder(RecorderOptions{Client: kube, Namespace: testNS, LeaseName: testLease, Identity: "agent-0",
		URL: "https://user:pw@orch.example/base?x=1", Every: 30 * time.Second})
	r.now = c.now
	if step(t, r) {
		t.Fatal("something was due before any poll")
	}
	r.PollOK("1.2.3")
	if !step(t, r) {
		t.Fatal("the first success was not written at once")
	}
	first := c.t
	ann := leaseOf(t, kube).Annotations
	if ann[AnnotationURL] != "https://orch.example/base" || ann[AnnotationVersion] != "1.2.3" || ann[AnnotationInstance] != "agent-0" ||
		ann[AnnotationLastOK] != first.Format(timeLayout) || ann[AnnotationLastError] != "" {
		t.Fatalf("annotations after the first success: %v", ann)
	}

	c.add(5 * time.Second)
	r.PollOK("1.2.3")
	if _, wait, due := r.next(); due || wait != 25*time.Second {
		t.Fatalf("a second success 5s later: due %v, wait %s; want a wait of 25s", due, wait)
	}
	c.add(26 * time.Second)
	if !step(t, r) {
		t.Fatal("a success was not written once Every had passed")
	}
	if got := leaseOf(t, kube).Annotations[AnnotationLastOK]; got != c.t.Add(-26*time.Second).Format(timeLayout) {
		t.Errorf("last success %s, want the time of the latest poll", got)
	}

	c.add(time.Second)
	r.PollFailed(fmt.Errorf("Post \"https://orch.example/base/api/v1/agent/poll\": %w", refused()))
	if !step(t, r) {
		t.Fatal("a change from succeeding to failing was not written at once")
	}
	failedAt := c.t
	l := leaseOf(t, kube)
	st, ok := StatusOf(l.Annotations)
	if !ok || !st.Failing() || st.Kind != KindNetwork || !strings.Contains(st.LastError, "connection refused") || !st.LastErrorAt.Equal(failedAt) {
		t.Fatalf("status after a failure: %+v", st)
	}
	if l.Spec.HolderIdentity != nil {
		t.Errorf("without leader election the record holds the Lease: %v", *l.Spec.HolderIdentity)
	}

	c.add(2 * time.Second)
	r.PollFailed(refused())
	if step(t, r) {
		t.Error("a second failure 2s later was written at once")
	}
	c.add(time.Second)
	r.PollOK("1.2.4")
	if !step(t, r) {
		t.Fatal("a change from failing to succeeding was not written at once")
	}
	st, _ = StatusOf(leaseOf(t, kube).Annotations)
	if st.Failing() || st.Version != "1.2.4" || !st.LastErrorAt.After(failedAt) || st.LastError == "" {
		t.Errorf("status after recovering: %+v (the last error stays, older than the success)", st)
	}
	if step(t, r) {
		t.Error("something was written with nothing new")
	}
}

// TestRecorderWritesOnlyAsHolder: with leader election the record goes on the leader Lease only
// while it names this replica, and keeps the election's spec and other annotations.
func TestRecorderWritesOnlyAsHolder(t *testing.T) {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: testLease, Namespace: testNS, Annotations: map[string]string{"team": "infra"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("agent-1"), LeaseDurationSeconds: ptr.To[int32](15)}}
	kube := fake.NewClientset(lease)
	r := NewRecorder(RecorderOptions{Client: kube, Namespace: testNS, LeaseName: testLease, Identity: "agent-0", Elected: true, URL: "https://orch.example"})
	r.PollOK("1.0.0")
	st, _, _ := r.next()
	if err := r.write(context.Background(), st); !errors.Is(err, errNotHolder) {
		t.Fatalf("writing on a Lease another replica holds: %v", err)
	}
	r.wrote(st, errNotHolder)
	if _, _, due := r.next(); due {
		t.Error("a replica that does not hold the Lease keeps trying to write")
	}
	if _, ok := StatusOf(leaseOf(t, kube).Annotations); ok {
		t.Fatal("the record was written on a Lease another replica holds")
	}

	lease.Spec.HolderIdentity = ptr.To("agent-0")
	if _, err := kube.CoordinationV1().Leases(testNS).Update(context.Background(), lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.Reset()
	r.PollOK("1.0.0")
	if !step(t, r) {
		t.Fatal("the first success of a new term was not due")
	}
	l := leaseOf(t, kube)
	if st, ok := StatusOf(l.Annotations); !ok || st.Version != "1.0.0" || l.Annotations["team"] != "infra" || *l.Spec.LeaseDurationSeconds != 15 {
		t.Errorf("lease after the write: %+v, %+v", l.Annotations, l.Spec)
	}
}

// TestRecorderRun: Run writes an outcome while it runs and stops with its context.
func TestRecorderRun(t *testing.T) {
	kube := fake.NewClientset()
	r := NewRecorder(RecorderOptions{Client: kube, Namespace: testNS, LeaseName: testLease, Identity: "agent-0", URL: "https://orch.example"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	r.PollFailed(&api.Error{StatusCode: 401, Code: api.CodeUnauthorized, Message: "unknown key"})
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := kube.CoordinationV1().Leases(testNS).Get(context.Background(), testLease, metav1.GetOptions{})
		if err == nil && l.Annotations[AnnotationErrorKind] == KindRefused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Run did not write the failure: %v, %v", l, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop with its context")
	}
}

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("poll: %w", refused()), KindNetwork},
		{fmt.Errorf("poll: %w", x509.UnknownAuthorityError{}), KindTLS},
		{&api.Error{StatusCode: 403, Code: api.CodeForbidden}, KindRefused},
		{&api.Error{StatusCode: 409, Code: api.CodeIncompatibleProtocol}, KindProtocol},
		{&api.Error{StatusCode: 404, Code: api.CodeNotFound}, KindAnswer},
	} {
		if got := KindOf(tc.err); got != tc.want {
			t.Errorf("KindOf(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

func TestShortError(t *testing.T) {
	// The client joins "orchestrator unavailable" and the cause: both stay, on one line.
	joined := fmt.Errorf("POST /api/v1/agent/poll: %w", errors.Join(api.ErrUnavailable, fmt.Errorf("Post \"http://127.0.0.1:1/api/v1/agent/poll\": %w", refused())))
	if got, want := shortError(joined), `POST /api/v1/agent/poll: orchestrator unavailable; Post "http://127.0.0.1:1/api/v1/agent/poll": dial tcp: connect: connection refused`; got != want {
		t.Errorf("shortError = %q, want %q", got, want)
	}
	long := errors.New(strings.Repeat("é", 400) + "\nsecond line")
	got := shortError(long)
	if len(got) > maxErrorBytes+len("…") || strings.Contains(got, "second line") || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "éé") {
		t.Errorf("shortError cut %d bytes to %d: %q", len(long.Error()), len(got), got)
	}
	for _, r := range strings.TrimSuffix(got, "…") {
		if r == '\uFFFD' {
			t.Fatal("cut inside a character")
		}
	}
}
