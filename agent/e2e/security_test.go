package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// These tests attack the agent the way an orchestrator admin token, a deployment's code or another
// workload of the jobs namespace could, against the real agent binary, orchestrator and API
// server (its Pod Security admission enforces "restricted" on the jobs namespace), and check
// that each attack is refused with the error the user sees and that nothing stored changed.

// hostileTemplate asks for the node in every way the job pod policy refuses by default.
const hostileTemplate = `{
  "spec": {
    "hostPID": true, "hostNetwork": true, "hostIPC": true, "nodeName": "control-plane-1",
    "automountServiceAccountToken": true,
    "priorityClassName": "system-node-critical", "runtimeClassName": "unconfined",
    "tolerations": [{"operator": "Exists"}], "imagePullSecrets": [{"name": "prod-registry-admin"}],
    "securityContext": {"runAsUser": 0, "sysctls": [{"name": "kernel.msgmax", "value": "65536"}]},
    "initContainers": [{"name": "setup", "image": "busybox:1", "securityContext": {"allowPrivilegeEscalation": true}}],
    "containers": [{"name": "main", "ports": [{"containerPort": 22, "hostPort": 2222}],
      "securityContext": {"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]}},
      "envFrom": [{"secretRef": {"name": "db-credentials"}}],
      "readinessProbe": {"httpGet": {"host": "169.254.169.254", "port": 80, "path": "/latest/meta-data/"}},
      "volumeMounts": [{"name": "root", "mountPath": "/host"}]}],
    "volumes": [{"name": "root", "hostPath": {"path": "/"}},
      {"name": "key", "secret": {"secretName": "prod-eu-key"}},
      {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
      {"name": "db", "persistentVolumeClaim": {"claimName": "prod-db"}},
      {"name": "clone", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"],
        "dataSource": {"kind": "PersistentVolumeClaim", "name": "prod-db"}, "resources": {"requests": {"storage": "1Gi"}}}}}}]
  }
}`

// TestHostilePodTemplateIsRefused: a runner whose pod template asks for the node fails its
// deployment with reason pod_policy and a message naming every field and the chart value that
// would allow it; no Job and no Secret is created.
func TestHostilePodTemplateIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, hostileTemplate, 5)
	e.startAgent("agent-0", "--leader-elect=false")
	ids := e.deploy(1)
	d := e.waitTerminal(ids, 60*time.Second)[ids[0]]
	if d.Status != api.StatusFailed || d.Reason != "pod_policy" {
		t.Fatalf("deployment %s (%s): %s", d.Status, d.Reason, d.Message)
	}
	t.Logf("the user sees: %s", d.Message)
	for field, value := range map[string]string{
		"spec.hostPID": "jobs.policy.allowHostNamespaces", "spec.hostNetwork": "jobs.policy.allowHostNamespaces",
		"spec.hostIPC": "jobs.policy.allowHostNamespaces", "spec.containers[main].ports[0].hostPort": "jobs.policy.allowHostNamespaces",
		"spec.nodeName": "jobs.policy.allowNodeName", "spec.automountServiceAccountToken": "jobs.serviceAccount.automountToken",
		"spec.securityContext.runAsUser":                                      "jobs.policy.allowRunAsRoot",
		"spec.initContainers[setup].securityContext.allowPrivilegeEscalation": "jobs.policy.allowPrivilegeEscalation",
		"spec.containers[main].securityContext.privileged":                    "jobs.policy.allowPrivileged",
		"spec.containers[main].securityContext.capabilities.add":              "jobs.policy.allowedCapabilities",
		"spec.containers[main].envFrom[0].secretRef.name":                     "jobs.policy.allowedSecrets",
		"spec.volumes[root].hostPath":                                         "jobs.policy.allowedVolumeTypes",
		"spec.volumes[key].secret.secretName":                                 "jobs.policy.allowedSecrets",
		"spec.volumes[token].projected.sources[0].serviceAccountToken":        "jobs.serviceAccount.automountToken",
		"spec.containers[main].readinessProbe.httpGet.host":                   "jobs.policy.allowHostNamespaces",
		"spec.securityContext.sysctls[kernel.msgmax]":                         "jobs.policy.allowedSysctls",
		"spec.priorityClassName":                                              "jobs.policy.allowedPriorityClasses",
		"spec.runtimeClassName":                                               "jobs.policy.allowedRuntimeClasses",
		"spec.tolerations[0]":                                                 "jobs.policy.allowTolerateAll",
		"spec.imagePullSecrets[0].name":                                       "jobs.policy.allowedSecrets",
		"spec.volumes[db].persistentVolumeClaim.claimName":                    "jobs.policy.allowedClaims",
		"spec.volumes[clone].ephemeral.volumeClaimTemplate.spec.dataSource":   "jobs.policy.allowClaimSources",
	} {
		if !strings.Contains(d.Message, field+":") || !strings.Contains(d.Message, "chart value "+value) {
			t.Errorf("the message does not name %s and %s", field, value)
		}
	}
	if js := e.jobs(); len(js) != 0 {
		t.Errorf("%d Jobs created for a refused template", len(js))
	}
	secrets, err := e.cluster.Client().CoreV1().Secrets(e.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("%d Secrets created for a refused template, want none (the token Secret must not exist either)", len(secrets.Items))
	}
}

// forge writes a Job with the agent's labels and a token Secret for it, as another workload of
// the jobs namespace could: deployment depID claims state key stateKey with token.
func (e *env) forge(depID, stateKey, token string, seal string) {
	e.t.Helper()
	ctx := e.t.Context()
	name := kubeexec.JobName(depID, 1)
	sum := sha256.Sum256([]byte(token))
	digest := hex.EncodeToString(sum[:])
	labelID := strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '-' {
			return r
		}
		return '-'
	}, depID)
	labels := map[string]string{kubeexec.LabelManagedBy: kubeexec.ManagedByValue, kubeexec.LabelOrgID: testOrg,
		kubeexec.LabelRunnerID: e.runnerID, kubeexec.LabelDeploymentID: strings.Trim(labelID, "-"), kubeexec.LabelAttempt: "1"}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: labels, Annotations: map[string]string{
			kubeexec.AnnDeploymentID: depID, kubeexec.AnnFencing: "1", kubeexec.AnnStateKey: stateKey, kubeexec.AnnStateNS: e.ns,
			kubeexec.AnnOperation: "apply", kubeexec.AnnTokenSHA256: digest, kubeexec.AnnSeal: seal,
			kubeexec.AnnClaimedAt: time.Now().UTC().Format(time.RFC3339Nano)}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: "attacker:1",
				SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}}}}},
	}
	if _, err := e.cluster.Client().BatchV1().Jobs(e.ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: kubeexec.TokenSecretName(name, digest), Namespace: e.ns, Labels: labels,
		Annotations: map[string]string{kubeexec.AnnDeploymentID: depID}}, Data: map[string][]byte{"token": []byte(token)}}
	if _, err := e.cluster.Client().CoreV1().Secrets(e.ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// stateRequest sends one request to the agent's state backend as a job runner would.
func stateRequest(t *testing.T, addr, method, key, user, token string, body []byte) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, "http://"+addr+"/v1/states/"+key, bytes.NewReader(body))
	req.SetBasicAuth(user, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestForgedAndTamperedJobsAreNotTrusted: Jobs with the agent's labels that the agent did not
// create (forged, malformed, or its own with a changed state key or token) are neither adopted
// nor restated in polls, their tokens open no state, the agent deletes none of their objects,
// and it keeps polling and running deployments.
func TestForgedAndTamperedJobsAreNotTrusted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `{"metadata":{"annotations":{"testbed.outpost.dev/run-duration":"10m"}},"spec":{"containers":[{"name":"main"}]}}`, 5)
	ctx := t.Context()
	victim := mustStore(statestore.New(e.cluster.Client(), e.ns, statestore.Options{Scope: testOrg}))
	victimState := []byte(`{"version":4,"serial":7,"lineage":"victim","resources":[]}`)
	if _, err := victim.Write(ctx, "victim", victimState, statestore.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Before the agent starts: a forged Job (seal guessed), and a malformed one.
	e.forge("dep-forged", "victim", "opj_forged-token", "Zm9yZ2Vk")
	e.forge("Not A Deployment ID!", "victim", "opj_malformed-token", "")
	// A Job squatting the name the agent will give a queued deployment's Job, to get its token.
	squatted := e.deploy(1)[0]
	e.forge(squatted, "victim", "opj_squatter-token", "")

	stateAddr := porttest.Addr(t)
	flags := []string{"--leader-elect=false", "--state-listen", stateAddr, "--state-url", "http://" + stateAddr, "--state-namespace", e.ns}
	a := e.startAgent("agent-0", flags...)
	// The squatted deployment fails instead of running in the squatter's pod, and the real token
	// Secret the agent made for it is gone again.
	d := e.waitTerminal([]string{squatted}, 60*time.Second)[squatted]
	if d.Status != api.StatusFailed || !strings.Contains(d.Message, "this agent did not create it") {
		t.Errorf("squatted deployment: %s (%s) %s", d.Status, d.Reason, d.Message)
	}
	t.Logf("the squatted deployment fails with: %s", d.Message)
	if secrets, err := e.cluster.Client().CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, sec := range secrets.Items {
			if sec.Annotations[kubeexec.AnnDeploymentID] == squatted && string(sec.Data["token"]) != "opj_squatter-token" {
				t.Errorf("the squatted attempt's real token is still in Secret %s", sec.Name)
			}
		}
	}

	// A deployment of the agent's own, running; then tampered: its state key and its token.
	ids := e.deploy(1)
	var own batchv1.Job
	testbed.WaitFor(t, 60*time.Second, "the agent's Job to run", func() (bool, string) {
		d, err := e.admin.GetDeployment(ctx, ids[0])
		if err != nil || d.Status != api.StatusRunning {
			return false, fmt.Sprint(d, err)
		}
		j, err := e.cluster.Client().BatchV1().Jobs(e.ns).Get(ctx, kubeexec.JobName(ids[0], 1), metav1.GetOptions{})
		if err == nil {
			own = *j
		}
		return err == nil, fmt.Sprint(err)
	})
	a.kill()
	patch := []byte(`{"metadata":{"annotations":{"` + kubeexec.AnnStateKey + `":"victim"}}}`)
	if _, err := e.cluster.Client().BatchV1().Jobs(e.ns).Patch(ctx, own.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	a = e.startAgent("agent-1", flags...)

	// The agent still works: a new deployment runs to the end.
	more := e.deploy(1)
	testbed.WaitFor(t, 90*time.Second, "a new deployment to run despite the forged Jobs", func() (bool, string) {
		d, err := e.admin.GetDeployment(ctx, more[0])
		return err == nil && d.Status == api.StatusRunning, fmt.Sprint(d, err)
	})
	// No forged token opens the victim's state.
	for _, try := range []struct{ user, token string }{{"dep-forged", "opj_forged-token"}, {"Not A Deployment ID!", "opj_malformed-token"}} {
		if code := stateRequest(t, stateAddr, "POST", "victim", try.user, try.token, []byte(`{"version":4,"serial":8,"lineage":"victim","resources":["stolen"]}`)); code != http.StatusUnauthorized {
			t.Errorf("write with the token of forged Job %q: %d, want 401", try.user, code)
		}
	}
	// The tampered Job's own state credential does not open the victim's state either: the agent
	// did not adopt the Job, so it holds no grant for it.
	token, err := e.cluster.Client().CoreV1().Secrets(e.ns).Get(ctx, kubeexec.TokenSecretName(own.Name, own.Annotations[kubeexec.AnnTokenSHA256]), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code := stateRequest(t, stateAddr, "GET", "victim", ids[0], string(token.Data["state-token"]), nil); code != http.StatusUnauthorized {
		t.Errorf("read with the tampered Job's state credential: %d, want 401", code)
	}
	if got, g, err := victim.Read(ctx, "victim"); err != nil || !bytes.Equal(got, victimState) || g.Generation != 1 {
		t.Errorf("the victim's state changed: generation %d, %v", g.Generation, err)
	}
	if n := a.logCount("without a valid seal"); n < 3 {
		t.Errorf("the agent reported %d unsealed Jobs, want the forged, the malformed and the tampered one", n)
	}
	// Nothing of theirs was deleted.
	for _, depID := range []string{"dep-forged", "Not A Deployment ID!", squatted} {
		name := kubeexec.JobName(depID, 1)
		if _, err := e.cluster.Client().BatchV1().Jobs(e.ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("forged Job %s: %v", name, err)
		}
	}
}
