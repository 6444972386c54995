package pods

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
	"github.com/outpost-dev/terraform-provider-outpost/tools/ocitest"
)

// netcheckImage is the job image (OpenTofu) with the test bed's toolbox program added as
// /testbed-pod, which the deployments of TestNetworkPolicyOnRealPods run through local-exec to
// send packets from a real job pod.
const netcheckImage = "outpost-test/netcheck:1"

// TestNetworkPolicyOnRealPods sends packets on the real node, where kube-network-policies
// enforces the chart's NetworkPolicies (networkPolicy.enabled, the default), from a real job pod
// of a running deployment and from other pods:
//
//   - the job pod cannot reach the metadata stand-in on 169.254.169.254, another deployment's
//     job pod, or the agent's metrics port;
//   - it reaches the agent's state ports, TLS and plain (its deployment's state goes through the
//     TLS one), and the orchestrator;
//   - a pod of another namespace, and a pod of the jobs namespace that is not this runner's job
//     pod, cannot reach either state port.
//
// With networkPolicy.enabled=false every one of the "cannot" lines reads "ok" and the test fails
// (checked once when it was written, before the TLS port existed: all seven refusals failed, the
// metadata stand-in answered, and so did the other job's listener and the metrics and state
// ports).
func TestNetworkPolicyOnRealPods(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		podTemplate: `{"spec": {"containers": [{"name": "main", "image": "` + registryVar + "/" + netcheckImage + `"}]}}`,
		before:      func(e *env) { e.pushNetcheck() },
	})
	// The agent has connected; the kubelet may not have reported its pod's IP yet.
	var agentIP string
	testbed.WaitFor(t, time.Minute, "the agent pod's IP", func() (bool, string) {
		agentIP = e.agentPods()[0].Status.PodIP
		return agentIP != "", "no IP yet"
	})
	stateSvc := fmt.Sprintf("http://%s.%s.svc:8080/", releaseName, e.agentNS)
	stateTLSSvc := fmt.Sprintf("%s.%s.svc:8443", releaseName, e.agentNS)
	orch, err := url.Parse(e.orch.URL)
	if err != nil {
		t.Fatal(err)
	}

	// A deployment that listens on 8081 in its job pod until it is canceled.
	word := "listener-" + rand.String(6)
	listener := e.enqueue(api.OperationApply, map[string]string{"main.tf": `
resource "terraform_data" "listen" {
  provisioner "local-exec" {
    command = "echo listening; exec /testbed-pod serve :8081 ` + word + `"
  }
}
`}, "listener")
	t.Cleanup(func() { _, _ = e.admin.CancelDeployment(context.Background(), listener.ID) })
	e.waitLog(listener.ID, "listening", 4*time.Minute)
	listenerIP := e.jobPodIP(listener.ID)

	metadata := "http://" + testbed.MetadataIP + "/latest/meta-data/iam/security-credentials/"
	otherJob := "http://" + net.JoinHostPort(listenerIP, "8081") + "/"
	metrics := "http://" + net.JoinHostPort(agentIP, "9090") + "/metrics"
	statePort := net.JoinHostPort(agentIP, "8080")
	stateTLSPort := net.JoinHostPort(agentIP, "8443")
	refused := []string{metadata, otherJob, metrics}
	reached := []string{statePort, stateTLSPort, stateSvc, stateTLSSvc, orch.Host}

	probe := e.deploy(api.OperationApply, map[string]string{"main.tf": `
resource "terraform_data" "probe" {
  provisioner "local-exec" {
    command = "/testbed-pod reach ` + strings.Join(append(append([]string{}, refused...), reached...), " ") + `"
  }
}
`}, "probe")
	if probe.d.Status != api.StatusSucceeded {
		t.Fatalf("the probing deployment %s (%s: %s); its state goes through the agent's state port:\n%s", probe.d.Status, probe.d.Reason, probe.d.Message, probe.log)
	}
	t.Logf("from a job pod:\n%s", reachLines(probe.log))
	for _, target := range refused {
		expectReach(t, "a job pod", probe.log, target, false)
	}
	for _, target := range reached {
		expectReach(t, "a job pod", probe.log, target, true)
	}

	// Pods that are not this runner's job pods, running the toolbox image with the env's pull
	// secret: one in a namespace of its own, one in the jobs namespace without the job labels.
	other := testbed.NewNamespace(t, e.c)
	e.createPullSecret(other, pullSecret, e.c.Registry.DockerConfigJSON(e.c.Registry.Username, e.c.Registry.Password))
	for _, ns := range []string{other, e.jobsNS} {
		out := e.runToolbox(ns, "reach", "-after", "3s", statePort, stateTLSPort, stateSvc, stateTLSSvc)
		where := "a pod of namespace " + ns
		if ns == e.jobsNS {
			where = "a pod of the jobs namespace that is not a job pod"
		}
		t.Logf("from %s:\n%s", where, reachLines(out))
		for _, target := range []string{statePort, stateTLSPort, stateSvc, stateTLSSvc} {
			expectReach(t, where, out, target, false)
		}
	}
}

// expectReach checks the line `reach TARGET: …` that testbed-pod printed into out.
func expectReach(t *testing.T, who, out, target string, want bool) {
	t.Helper()
	prefix := "reach " + target + ": "
	for line := range strings.SplitSeq(out, "\n") {
		if _, rest, ok := strings.Cut(line, prefix); ok {
			if got := strings.HasPrefix(rest, "ok"); got != want {
				verb := "must not reach"
				if want {
					verb = "must reach"
				}
				t.Errorf("%s %s %s, but: %s", who, verb, target, strings.TrimSpace(rest))
			}
			return
		}
	}
	t.Errorf("%s printed no line for %s:\n%s", who, target, out)
}

// reachLines are the lines testbed-pod reach printed into out.
func reachLines(out string) string {
	var lines []string
	for line := range strings.SplitSeq(out, "\n") {
		if i := strings.Index(line, "reach "); i >= 0 && !strings.Contains(line, "Executing") {
			lines = append(lines, line[i:])
		}
	}
	return strings.Join(lines, "\n")
}

// pushNetcheck pushes netcheckImage into the env's path of the registry: the job image's platform
// image with the toolbox program added.
func (e *env) pushNetcheck() {
	e.t.Helper()
	opts, err := ocitest.RemoteOptions(e.t.Context(), e.c.Registry)
	if err != nil {
		e.t.Fatal(err)
	}
	from, err := name.NewTag(e.jobImage)
	if err != nil {
		e.t.Fatal(err)
	}
	idx, err := remote.Index(from, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, d := range m.Manifests {
		if d.Platform == nil || d.Platform.Architecture != runtime.GOARCH {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			e.t.Fatal(err)
		}
		layer, err := ocitest.ToolboxLayer()
		if err != nil {
			e.t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			e.t.Fatal(err)
		}
		to, err := name.NewTag(e.registry + "/" + netcheckImage)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := remote.Write(to, img, opts...); err != nil {
			e.t.Fatalf("pushing %s: %v", to, err)
		}
		return
	}
	e.t.Fatalf("the job image %s has no %s image", e.jobImage, runtime.GOARCH)
}

// jobPodIP waits until the job pod of a deployment runs and returns its IP.
func (e *env) jobPodIP(deploymentID string) string {
	e.t.Helper()
	var ip string
	testbed.WaitFor(e.t, time.Minute, "the job pod of "+deploymentID+" to run", func() (bool, string) {
		pods, err := e.c.Client().CoreV1().Pods(e.jobsNS).List(context.Background(), metav1.ListOptions{LabelSelector: kubeexec.LabelDeploymentID + "=" + deploymentID})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				ip = p.Status.PodIP
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods", len(pods.Items))
	})
	return ip
}

// runToolbox runs the toolbox image (with the env's pull secret, under Pod Security restricted)
// with args in a pod of namespace ns until it ends, and returns its log.
func (e *env) runToolbox(ns string, args ...string) string {
	e.t.Helper()
	cs := e.c.Client()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "toolbox-" + rand.String(5), Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			ImagePullSecrets:              []corev1.LocalObjectReference{{Name: pullSecret}},
			AutomountServiceAccountToken:  ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](kubeexec.RestrictedUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "main", Image: e.toolboxImage, Args: args,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	testbed.OnRealNode(&pod.Spec)
	if _, err := cs.CoreV1().Pods(ns).Create(e.t.Context(), pod, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	testbed.WaitFor(e.t, 2*time.Minute, "pod "+pod.Name+" to end", func() (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, string(p.Status.Phase)
	})
	b, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "main"}).DoRaw(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}
