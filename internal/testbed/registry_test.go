package testbed

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
)

// The node pulls from the test bed's registry over TLS it verifies with the test bed's CA, with
// the login of the Pod's pull secret, and only with it: without a secret, or with a wrong
// password, the pull fails with the registry's 401.
func TestRegistryPullNeedsThePullSecret(t *testing.T) {
	t.Parallel()
	c := Shared(t)
	RequireNode(t, c)
	ctx := t.Context()
	ns := NewNamespace(t, c)
	cs := c.Client()
	for name, cfg := range map[string][]byte{
		"login": c.Registry.DockerConfigJSON(c.Registry.Username, c.Registry.Password),
		"wrong": c.Registry.DockerConfigJSON(c.Registry.Username, "not-the-password"),
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: cfg}}
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// One tag per Pod: the node must never have the image already, or no pull would happen.
	tag := rand.String(6)
	push := func(pod string) string {
		ref, err := c.PushToolbox(ctx, "testbed/pulled:"+tag+"-"+pod)
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	pod := func(name, image, secret string) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "main", Image: image, Args: []string{"echo", "pulled"}, ImagePullPolicy: corev1.PullIfNotPresent}},
			},
		}
		if secret != "" {
			p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: secret}}
		}
		OnRealNode(&p.Spec)
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	ok := push("ok")
	pod("ok", ok, "login")
	pod("anonymous", push("anonymous"), "")
	pod("wrong", push("wrong"), "wrong")

	WaitFor(t, 90*time.Second, "the Pod with the login to succeed", func() (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "ok", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("the Pod with the login failed: %s; events: %s", podSummary(p), podEvents(ctx, cs, p))
		}
		return p.Status.Phase == corev1.PodSucceeded, podSummary(p) + "; events: " + podEvents(ctx, cs, p)
	})
	if msg := pulledEvent(ctx, t, cs, ns, "ok"); !strings.Contains(msg, "Successfully pulled image \""+ok+"\"") {
		t.Errorf("the Pod's Pulled event says %q, want a pull of %s from the registry", msg, ok)
	}
	for _, name := range []string{"anonymous", "wrong"} {
		WaitFor(t, 90*time.Second, "the Pod "+name+" to fail its pull with the registry's 401", func() (bool, string) {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Status.Phase != corev1.PodPending {
				t.Fatalf("the Pod %s without a valid login got to %s: %s", name, p.Status.Phase, podSummary(p))
			}
			evs := podEvents(ctx, cs, p)
			return strings.Contains(evs, "401 Unauthorized"), podSummary(p) + "; events: " + evs
		})
	}
}

// pulledEvent returns the message of the kubelet's Pulled event of a Pod, or "".
func pulledEvent(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, pod string) string {
	t.Helper()
	evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=Pulled"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		return ev.Message
	}
	return ""
}

// The registry refuses a wrong password and answers the right one, over TLS verified with the
// test bed's CA.
func TestRegistryLogin(t *testing.T) {
	t.Parallel()
	c := Shared(t)
	RequireNode(t, c)
	tr, err := c.Registry.Transport()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for pw, want := range map[string]int{c.Registry.Password: http.StatusOK, "wrong": http.StatusUnauthorized, "": http.StatusUnauthorized} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+c.Registry.Host+"/v2/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if pw != "" {
			req.SetBasicAuth(c.Registry.Username, pw)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /v2/ with password %q: %d, want %d", pw, resp.StatusCode, want)
		}
	}
}
