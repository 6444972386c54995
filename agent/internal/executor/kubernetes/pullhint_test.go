package kubernetes

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
