package kubernetes

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
)

// Each kind of pull failure gets the hint that says what to set: a refused login names the pull
// secrets and their namespace (or says there are none), an untrusted certificate the nodes' CA,
// a missing tag the registry. The messages are containerd 1.6's, as the kubelet reports them.
func TestImagePullHint(t *testing.T) {
	t.Parallel()
	const image = "10.247.0.1:40123/outpost-dev/outpost-job:0.1.0"
	withSecret := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "acme-jobs"},
		Spec: corev1.PodSpec{ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry-login"}}}}
	without := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "acme-jobs"}}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		msg  string
		want []string
	}{{
		name: "wrong password", pod: withSecret,
		msg: `Back-off pulling image "` + image + `": ErrImagePull: failed to pull and unpack image "` + image + `": failed to resolve reference "` +
			image + `": pulling from host 10.247.0.1:40123 failed with status code [manifests 0.1.0]: 401 Unauthorized`,
		want: []string{"registry 10.247.0.1:40123 refused the login", "registry-login in namespace acme-jobs", "the jobs namespace, not only the agent's", "image_pull_secret"},
	}, {
		name: "no pull secret", pod: without,
		msg:  `failed to authorize: failed to fetch anonymous token: unexpected status: 401 Unauthorized`,
		want: []string{"refused the pull without a login", "no imagePullSecrets", "in namespace acme-jobs", "chart's imagePullSecrets"},
	}, {
		name: "Docker Hub", pod: without,
		msg:  `pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed`,
		want: []string{"registry docker.io refused"},
	}, {
		name: "untrusted CA", pod: withSecret,
		msg:  `failed to do request: Head "https://10.247.0.1:40123/v2/outpost-dev/outpost-job/manifests/0.1.0": x509: certificate signed by unknown authority`,
		want: []string{"does not trust the TLS certificate of registry 10.247.0.1:40123", "hosts.toml"},
	}, {
		name: "no such tag", pod: withSecret,
		msg:  `failed to resolve reference "` + image + `": ` + image + `: not found`,
		want: []string{"check that the image name and tag exist in registry 10.247.0.1:40123"},
	}, {
		name: "anything else", pod: withSecret,
		msg:  `dial tcp: lookup registry.outpost.invalid: no such host`,
		want: []string{imagePullFallbackHint},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			img := image
			if tc.name == "Docker Hub" {
				img = "hashicorp/terraform:1.11"
			}
			got := imagePullHint(tc.pod, img, tc.msg)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("hint %q lacks %q", got, w)
				}
			}
		})
	}
	if got := eventImage(`Failed to pull image "` + image + `": rpc error`); got != image {
		t.Errorf("eventImage = %q, want %q", got, image)
	}
}

// The kubelet's Warning events about getting an image are all taken as image pull failures,
// also the terse "Failed: Error: ErrImagePull" that comes before the detailed one; others not.
func TestImagePullEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reason, message string
		want            bool
	}{
		{"Failed", `Failed to pull image "x/y:1": rpc error: code = NotFound`, true},
		{"Failed", "Error: ErrImagePull", true},
		{"Failed", "Error: ImagePullBackOff", true},
		{"Failed", "Error: ErrImageNeverPull", true},
		{"InspectFailed", `Failed to apply default image tag "X//y": couldn't parse image name`, true},
		{"Failed", "Error: InvalidImageName", true},
		{"BackOff", `Back-off pulling image "x/y:1"`, true},
		{"ErrImageNeverPull", `Container image "x/y:1" is not present with pull policy of Never`, true},
		{"Failed", "Error: failed to create containerd task: OCI runtime create failed", false},
		{"FailedMount", `MountVolume.SetUp failed for volume "token": secret "t" not found`, false},
	} {
		if got := imagePullEvent(tc.reason, tc.message); got != tc.want {
			t.Errorf("imagePullEvent(%q, %q) = %v, want %v", tc.reason, tc.message, got, tc.want)
		}
	}
}

// The kubelet's terse "Failed: Error: ErrImagePull" comes a moment after the event that names the
// image and the registry's answer; the reason is taken from the latter, so the first (and kept)
// image_pull of an attempt says which image and why.
func TestEventReasonSkipsTheTerseFailure(t *testing.T) {
	t.Parallel()
	const image = "registry.outpost.invalid/acme/no-such-image:1"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "jobs"}}
	at := func(s int) metav1.Time { return metav1.NewTime(time.Date(2026, 11, 27, 17, 0, s, 0, time.UTC)) }
	ev := func(name, reason, msg string, s int) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "jobs"}, Type: corev1.EventTypeWarning,
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: "jobs"}, Reason: reason, Message: msg, LastTimestamp: at(s)}
	}
	client := fake.NewClientset(
		ev("a", "Failed", `Failed to pull image "`+image+`": failed to resolve reference: dial tcp: lookup registry.outpost.invalid: no such host`, 1),
		ev("b", "Failed", "Error: ErrImagePull", 2))
	e := New(Options{Client: client, PodOptions: opts, Logger: slog.New(slog.DiscardHandler)})
	w := e.eventReason(t.Context(), pod, "jobs", "Pod", "p")
	if w == nil || w.Reason != executor.ReasonImagePull || !strings.Contains(w.Message, image) || !strings.Contains(w.Detail, "no such host") {
		t.Fatalf("waiting %+v; want image_pull naming the image and the registry's answer", w)
	}
	// An event whose reason is the kubelet's code keeps the code in the cluster's words.
	client = fake.NewClientset(ev("c", "ErrImageNeverPull", `Container image "`+image+`" is not present with pull policy of Never`, 1),
		ev("d", "Failed", "Error: ErrImageNeverPull", 2))
	e = New(Options{Client: client, PodOptions: opts, Logger: slog.New(slog.DiscardHandler)})
	if w := e.eventReason(t.Context(), pod, "jobs", "Pod", "p"); w == nil || !strings.HasPrefix(w.Detail, "ErrImageNeverPull: Container image") {
		t.Fatalf("waiting %+v; want the detail to keep the kubelet's code", w)
	}
	for _, tc := range []struct {
		reason, msg string
		terse       bool
	}{
		{"Failed", "Error: ErrImagePull", true},
		{"Failed", "Error: ImagePullBackOff", true},
		{"Failed", "Error: failed to create containerd task: OCI runtime create failed", false},
		{"Failed", `Failed to pull image "x": not found`, false},
		{"BackOff", "Error: ErrImagePull", false},
	} {
		if got := terseFailure(corev1.Event{Reason: tc.reason, Message: tc.msg}); got != tc.terse {
			t.Errorf("terseFailure(%q, %q) = %v, want %v", tc.reason, tc.msg, got, tc.terse)
		}
	}
}
