package testbed_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

func TestMain(m *testing.M) {
	testbed.Main(m, testbed.Options{Jobs: true, Node: true})
}

func TestSecretRoundTrip(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	ns := testbed.NewNamespace(t, c)
	ctx := t.Context()
	cs := c.Client()

	got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading back namespace: %v", err)
	}
	if got.Status.Phase != corev1.NamespaceActive {
		t.Fatalf("namespace phase = %q, want Active", got.Status.Phase)
	}

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "state", Namespace: ns},
		Data:       map[string][]byte{"k": []byte("v")},
	}
	created, err := cs.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Secret: %v", err)
	}
	read, err := cs.CoreV1().Secrets(ns).Get(ctx, "state", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading Secret: %v", err)
	}
	if string(read.Data["k"]) != "v" || read.ResourceVersion != created.ResourceVersion {
		t.Fatalf("read back %q rv %s, want %q rv %s", read.Data["k"], read.ResourceVersion, "v", created.ResourceVersion)
	}

	// A stale resourceVersion must conflict: the state store's compare-and-swap relies on it.
	read.Data["k"] = []byte("w")
	if _, err := cs.CoreV1().Secrets(ns).Update(ctx, read, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update: %v", err)
	}
	created.Data["k"] = []byte("x")
	if _, err := cs.CoreV1().Secrets(ns).Update(ctx, created, metav1.UpdateOptions{}); err == nil {
		t.Fatal("update with a stale resourceVersion succeeded; want a conflict")
	}
}

func TestServerVersionAndKubeconfig(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	v, err := c.Client().Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != testbed.KubernetesVersion {
		t.Errorf("server version %q, want %q (Helm's kubeVersion checks need the real version)", v.GitVersion, testbed.KubernetesVersion)
	}

	// The kubeconfig file works on its own, with TLS verified against the generated CA.
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Insecure || len(cfg.CAData) == 0 {
		t.Errorf("kubeconfig should verify TLS with the test bed CA (insecure=%v, CA %d bytes)", cfg.Insecure, len(cfg.CAData))
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "kube-system", metav1.GetOptions{}); err != nil {
		t.Fatalf("using the kubeconfig file: %v", err)
	}

	// The client certificate authenticates too (for tests of client_certificate/client_key).
	if len(c.ClientCertData) > 0 {
		certCfg := &rest.Config{Host: c.Host, TLSClientConfig: rest.TLSClientConfig{
			CAData: c.CAData, CertData: c.ClientCertData, KeyData: c.ClientKeyData,
		}}
		if _, err := kubernetes.NewForConfigOrDie(certCfg).CoreV1().Secrets("kube-system").List(t.Context(), metav1.ListOptions{}); err != nil {
			t.Fatalf("client certificate auth: %v", err)
		}
	}
}

func TestJobCompletes(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	ns := testbed.NewNamespace(t, c)
	start := time.Now()
	job := newJob(ns, "ok", nil)
	if _, err := c.Client().BatchV1().Jobs(ns).Create(t.Context(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, c, ns, "ok")
	if !hasCondition(got, batchv1.JobComplete) {
		t.Fatalf("job finished without Complete: %+v", got.Status.Conditions)
	}
	if got.Status.Succeeded != 1 {
		t.Errorf("succeeded = %d, want 1", got.Status.Succeeded)
	}
	t.Logf("Job complete %s after create", time.Since(start).Round(time.Millisecond))
}

func TestJobFailsWithExitCode(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	ns := testbed.NewNamespace(t, c)
	job := newJob(ns, "fail", map[string]string{testbed.ExitCodeAnnotation: "3"})
	// Exit code 3 fails the Job at once through the pod failure policy, as the agent's Jobs do.
	job.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action: batchv1.PodFailurePolicyActionFailJob,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			ContainerName: new("main"),
			Operator:      batchv1.PodFailurePolicyOnExitCodesOpIn,
			Values:        []int32{3},
		},
	}}}
	if _, err := c.Client().BatchV1().Jobs(ns).Create(t.Context(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, c, ns, "fail")
	failed := condition(got, batchv1.JobFailed)
	if failed == nil {
		t.Fatalf("job finished without Failed: %+v", got.Status.Conditions)
	}
	if failed.Reason != batchv1.JobReasonPodFailurePolicy {
		t.Errorf("Failed reason = %q, want %q (the pod failure policy should have matched exit code 3)", failed.Reason, batchv1.JobReasonPodFailurePolicy)
	}

	pods, err := c.Client().CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=fail"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("got %d pods, want 1", len(pods.Items))
	}
	pod := pods.Items[0]
	if pod.Status.Phase != corev1.PodFailed {
		t.Errorf("pod phase = %q, want Failed", pod.Status.Phase)
	}
	if len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("container statuses %+v, want one terminated", pod.Status.ContainerStatuses)
	}
	if code := pod.Status.ContainerStatuses[0].State.Terminated.ExitCode; code != 3 {
		t.Errorf("exit code = %d, want 3", code)
	}
}

func TestUnschedulablePodStaysPending(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	ns := testbed.NewNamespace(t, c)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "nowhere", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  map[string]string{"outpost.dev/no-such-node": "true"},
			Containers:    []corev1.Container{{Name: "main", Image: "example.invalid/x"}},
		},
	}
	if _, err := c.Client().CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		evs, err := c.Client().CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=nowhere"})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Items {
			if ev.Reason == "FailedScheduling" {
				got, err := c.Client().CoreV1().Pods(ns).Get(t.Context(), "nowhere", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got.Status.Phase != corev1.PodPending || got.Spec.NodeName != "" {
					t.Fatalf("pod phase %q node %q, want Pending and unscheduled", got.Status.Phase, got.Spec.NodeName)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no FailedScheduling event for a pod no node fits")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestWaitingPodStaysPending(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	ns := testbed.NewNamespace(t, c)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: ns, Annotations: map[string]string{
			testbed.WaitingReasonAnnotation: "ImagePullBackOff",
		}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: "example.invalid/missing:1"}},
		},
	}
	cs := c.Client()
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := cs.CoreV1().Pods(ns).Get(t.Context(), "pull", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st := got.Status.ContainerStatuses; len(st) == 1 && st[0].State.Waiting != nil {
			if st[0].State.Waiting.Reason != "ImagePullBackOff" || got.Status.Phase != corev1.PodPending {
				t.Fatalf("phase %q, waiting %+v; want Pending, ImagePullBackOff", got.Status.Phase, st[0].State.Waiting)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container never showed as waiting: %+v", got.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	evs, err := cs.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=pull,reason=Failed"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) == 0 {
		t.Error("no Failed event for the waiting Pod")
	}
	// It stays that way: nothing moves it to Running.
	time.Sleep(2 * time.Second)
	got, err := cs.CoreV1().Pods(ns).Get(t.Context(), "pull", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodPending {
		t.Errorf("phase %q after 2s, want Pending", got.Status.Phase)
	}
}

func TestDeletedRunningPodTerminates(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	ns := testbed.NewNamespace(t, c)
	job := newJob(ns, "long", map[string]string{testbed.RunDurationAnnotation: "10m"})
	cs := c.Client()
	if _, err := cs.BatchV1().Jobs(ns).Create(t.Context(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait until the pod runs, then delete the Job with its pods, as a cancel does.
	deadline := time.Now().Add(60 * time.Second)
	for {
		j, err := cs.BatchV1().Jobs(ns).Get(t.Context(), "long", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if j.Status.Ready != nil && *j.Status.Ready == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Job's pod did not become ready: %+v", j.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fg := metav1.DeletePropagationForeground
	if err := cs.BatchV1().Jobs(ns).Delete(t.Context(), "long", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, jobErr := cs.BatchV1().Jobs(ns).Get(t.Context(), "long", metav1.GetOptions{})
		if len(pods.Items) == 0 && jobErr != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after deleting the Job: %d pods left, job err %v", len(pods.Items), jobErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Many Jobs at once must finish in seconds, not minutes: the agent's load tests depend on the
// controller manager's and kwok's raised client rate limits.
func TestManyJobsComplete(t *testing.T) {
	t.Parallel()
	c := testbed.Shared(t)
	ns := testbed.NewNamespace(t, c)
	const n = 50
	start := time.Now()
	var g errgroup.Group
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error {
			_, err := c.Client().BatchV1().Jobs(ns).Create(t.Context(), newJob(ns, fmt.Sprintf("j%d", i), nil), metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for {
		jobs, err := c.Client().BatchV1().Jobs(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for i := range jobs.Items {
			if hasCondition(&jobs.Items[i], batchv1.JobComplete) {
				done++
			}
		}
		if done == n {
			break
		}
		if time.Since(start) > 90*time.Second {
			t.Fatalf("%d of %d Jobs complete after %s", done, n, time.Since(start))
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("%d Jobs complete %s after the first create", n, time.Since(start).Round(time.Millisecond))
}

// TestVersions keeps versions.go (generated) and the components module in step with
// scripts/versions.env, the file scripts/testbed-build.sh builds from; a mismatch would make every
// test run ask for a rebuild, or build other versions than the cache key says.
func TestVersions(t *testing.T) {
	t.Parallel()
	env, err := os.ReadFile(filepath.Join("..", "..", "scripts", "versions.env"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"K8S_VERSION": testbed.KubernetesVersion, "ETCD_VERSION": testbed.EtcdVersion, "KWOK_VERSION": testbed.KwokVersion,
		"COREDNS_VERSION": testbed.CoreDNSVersion, "REGISTRY_VERSION": testbed.RegistryVersion,
	} {
		m := regexp.MustCompile(`(?m)^` + name + `=(\S+)$`).FindSubmatch(env)
		if m == nil {
			t.Errorf("scripts/versions.env does not define %s", name)
		} else if string(m[1]) != want {
			t.Errorf("scripts/versions.env: %s=%s, but versions.go says %s: run `make generate`", name, m[1], want)
		}
	}
	gomod, err := os.ReadFile(filepath.Join("components", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{"k8s.io/kubernetes " + testbed.KubernetesVersion, "go.etcd.io/etcd/server/v3 " + testbed.EtcdVersion} {
		if !strings.Contains(string(gomod), req) {
			t.Errorf("components/go.mod does not require %s", req)
		}
	}
	dnsmod, err := os.ReadFile(filepath.Join("coredns", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if req := "github.com/coredns/coredns " + testbed.CoreDNSVersion; !strings.Contains(string(dnsmod), req) {
		t.Errorf("coredns/go.mod does not require %s", req)
	}
	regmod, err := os.ReadFile(filepath.Join("registry", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if req := "github.com/distribution/distribution/v3 " + testbed.RegistryVersion; !strings.Contains(string(regmod), req) {
		t.Errorf("registry/go.mod does not require %s", req)
	}
}

func newJob(ns, name string, podAnnotations map[string]string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: podAnnotations},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "main", Image: "example.invalid/outpost-agent:test"}},
				},
			},
		},
	}
}

// waitJob waits until the Job has a Complete or Failed condition.
func waitJob(t *testing.T, c *testbed.Cluster, ns, name string) *batchv1.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for {
		j, err := c.Client().BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("waiting for Job %s: %v", name, err)
		}
		if hasCondition(j, batchv1.JobComplete) || hasCondition(j, batchv1.JobFailed) {
			return j
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Job %s did not finish within 60s: %+v", name, j.Status)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func condition(j *batchv1.Job, typ batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		if j.Status.Conditions[i].Type == typ && j.Status.Conditions[i].Status == corev1.ConditionTrue {
			return &j.Status.Conditions[i]
		}
	}
	return nil
}

func hasCondition(j *batchv1.Job, typ batchv1.JobConditionType) bool { return condition(j, typ) != nil }

// TestShortSkipsOnlyTestBedTests runs this package's tests the way `make check` does (-short)
// in a child `go test`: a test that needs the test bed skips with SkipReason while a plain unit
// test of the same package passes; with CI=true the child refuses -short and fails.
func TestShortSkipsOnlyTestBedTests(t *testing.T) {
	t.Parallel()
	run := func(ci string) (string, error) {
		cmd := exec.CommandContext(t.Context(), "go", "test", "-short", "-count=1", "-v", "-run", "^(TestVersions|TestSecretRoundTrip)$", ".")
		cmd.Env = append(os.Environ(), "CI="+ci)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("")
	t.Logf("go test -short:\n%s", out)
	if err != nil {
		t.Fatalf("go test -short failed: %v", err)
	}
	for _, want := range []string{"--- PASS: TestVersions", "--- SKIP: TestSecretRoundTrip", testbed.SkipReason} {
		if !strings.Contains(out, want) {
			t.Errorf("go test -short output lacks %q", want)
		}
	}
	out, err = run("true")
	t.Logf("CI=true go test -short:\n%s", out)
	if err == nil {
		t.Fatal("go test -short passed with CI=true; it must refuse to skip the test bed")
	}
	if !strings.Contains(out, "CI=true is set: CI runs the full suite") {
		t.Error("the failure under CI=true does not say why")
	}
}
