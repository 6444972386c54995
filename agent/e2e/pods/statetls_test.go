package pods

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statetls"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// TestStateBackendServesTLS: with the chart's defaults and two agent replicas, the first replica
// makes the state backend's CA in the Secret <release>-state-tls, and job pods get an https://
// state URL and that CA: real `tofu` applies, plans and destroys through it, verifying the
// agent's certificate with the CA alone (the job runner hands it to the http backend), whichever
// replica the Service picks (a standby forwards to the leader over TLS). On the previous build
// the state URL was http:// and the state credential crossed the pod network in clear.
func TestStateBackendServesTLS(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{replicas: 2})
	ctx := t.Context()
	ca, err := e.c.Client().CoreV1().Secrets(e.agentNS).Get(ctx, releaseName+"-state-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the agent keeps no state CA: %v", err)
	}
	caPEM := string(ca.Data[statetls.CertKey])
	if !strings.HasPrefix(caPEM, "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("the state CA Secret holds %q", caPEM)
	}

	apply, pod := e.deployWatchingPod(api.OperationApply, greeting, "tls")
	if apply.d.Status != api.StatusSucceeded {
		t.Fatalf("apply through the TLS state backend: %s (%s: %s)\n%s", apply.d.Status, apply.d.Reason, apply.d.Message, apply.log)
	}
	main := jobMain(t, pod)
	env := map[string]string{}
	for _, v := range main.Env {
		env[v.Name] = v.Value
	}
	if url := env[jobenv.StateURL]; !strings.HasPrefix(url, "https://"+releaseName+"."+e.agentNS+".svc:8443") {
		t.Errorf("the job pod's state URL is %q, want the Service's TLS port", url)
	}
	if env[jobenv.StateCA] != caPEM {
		t.Errorf("the job pod trusts %q for the state backend, want the CA of the Secret", env[jobenv.StateCA])
	}
	for _, op := range []api.Operation{api.OperationPlan, api.OperationDestroy} {
		if r := e.deploy(op, greeting, "tls"); r.d.Status != api.StatusSucceeded {
			t.Fatalf("%s through the TLS state backend: %s (%s)\n%s", op, r.d.Status, r.d.Message, r.log)
		}
	}
	// Both replicas serve the TLS port: a restarted agent reads the same CA back.
	for _, p := range e.agentPods() {
		if err := e.c.Client().CoreV1().Pods(e.agentNS).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitConnected(imagesVersion)
	if r := e.deploy(api.OperationApply, greeting, "tls-after-restart"); r.d.Status != api.StatusSucceeded {
		t.Fatalf("apply after both agent pods were replaced: %s (%s)\n%s", r.d.Status, r.d.Message, r.log)
	}
	again, err := e.c.Client().CoreV1().Secrets(e.agentNS).Get(ctx, releaseName+"-state-tls", metav1.GetOptions{})
	if err != nil || string(again.Data[statetls.CertKey]) != caPEM {
		t.Errorf("the CA changed when the agent pods were replaced (%v)", err)
	}
}

// jobMain is the main container of a job pod.
func jobMain(t *testing.T, pod *corev1.Pod) corev1.Container {
	t.Helper()
	for _, c := range pod.Spec.Containers {
		if c.Name == podtemplate.MainContainer {
			return c
		}
	}
	t.Fatalf("pod %s has no container %s", pod.Name, podtemplate.MainContainer)
	return corev1.Container{}
}
