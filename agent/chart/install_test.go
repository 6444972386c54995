package chart_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// TestInstallOnTestBed installs the chart on a real API server with every feature on, so the API
// server's validation and admission see every object, then asks the RBAC authorizer
// (SubjectAccessReview) what the agent's and the jobs' ServiceAccounts may do, upgrades the release
// and uninstalls it. It starts its own test bed (API server only: no pod has to run) so the render
// tests of this package stay independent of it; OUTPOST_TESTBED_KUBECONFIG reuses a running one.
func TestInstallOnTestBed(t *testing.T) {
	tb := testbed.ForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cs := tb.Client()

	// Namespaces as the provider would create them.
	ns := map[string]string{
		releaseNamespace: testbed.NewNamespace(t, tb),
		"outpost-jobs":   testbed.NewNamespace(t, tb),
		"outpost-state":  testbed.NewNamespace(t, tb),
	}
	keySecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "prod-eu-key", Namespace: ns[releaseNamespace]},
		StringData: map[string]string{"private-key.pem": "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n"},
	}
	if _, err := cs.CoreV1().Secrets(keySecret.Namespace).Create(ctx, keySecret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	values := mergeValues(t, fmt.Sprintf(`
jobs:
  namespace: %[1]s
  podLabels: {azure.workload.identity/use: "true"}
  serviceAccount:
    annotations: {azure.workload.identity/client-id: "00000000-0000-0000-0000-000000000001"}
state: {namespace: %[2]s}
serviceAccount:
  annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::111122223333:role/outpost-agent"}
proxy: {httpsProxy: "http://proxy.corp:3128", noProxy: [git.corp]}
caBundle: {existingSecret: corp-ca}
imagePullSecrets: [ghcr-pull]
networkPolicy: {enabled: true}
podDisruptionBudget: {minAvailable: 1}
extraEnv: [{name: GOMEMLIMIT, valueFrom: {resourceFieldRef: {resource: limits.memory}}}]
`, ns["outpost-jobs"], ns["outpost-state"]))

	cfg := helmConfig(t, tb.Kubeconfig, ns[releaseNamespace])
	c, err := agentchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(cfg)
	install.ReleaseName = releaseName
	install.Namespace = ns[releaseNamespace]
	install.Timeout = time.Minute
	rel, err := install.RunWithContext(ctx, c, values)
	if err != nil {
		t.Fatalf("installing the chart: %v", err)
	}
	if rel.Info.Status != release.StatusDeployed {
		t.Fatalf("release status %s, want deployed", rel.Info.Status)
	}

	// What the agent may do, asked of the API server's RBAC authorizer.
	agent := fmt.Sprintf("system:serviceaccount:%s:outpost-agent", ns[releaseNamespace])
	for _, tc := range agentAccess {
		a := tc.access
		if actual, ok := ns[a.namespace]; ok {
			a.namespace = actual
		}
		if got := subjectCan(ctx, t, cs, agent, a); got != tc.want {
			t.Errorf("agent: %s allowed = %v, want %v", a, got, tc.want)
		}
	}
	// The jobs' ServiceAccount may do nothing.
	job := fmt.Sprintf("system:serviceaccount:%s:outpost-job", ns["outpost-jobs"])
	for _, a := range []access{
		{"get", "", "secrets", ns["outpost-jobs"], "deploy-1-token"},
		{"list", "", "secrets", ns["outpost-state"], ""},
		{"get", "", "secrets", "kube-system", "bootstrap-token-abcdef"},
		{"list", "", "pods", ns["outpost-jobs"], ""},
		{"create", "batch", "jobs", ns["outpost-jobs"], ""},
		{"get", "coordination.k8s.io", "leases", ns["outpost-state"], "lock-prod"},
	} {
		if subjectCan(ctx, t, cs, job, a) {
			t.Errorf("job ServiceAccount: %s allowed, want denied", a)
		}
	}
	jobSA, err := cs.CoreV1().ServiceAccounts(ns["outpost-jobs"]).Get(ctx, "outpost-job", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the jobs' ServiceAccount: %v", err)
	}
	if jobSA.AutomountServiceAccountToken == nil || *jobSA.AutomountServiceAccountToken {
		t.Errorf("jobs' ServiceAccount automountServiceAccountToken = %v, want false", jobSA.AutomountServiceAccountToken)
	}

	// An upgrade with changed values goes through (no immutable field changes).
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = ns[releaseNamespace]
	upgrade.Timeout = time.Minute
	values["replicaCount"] = 3
	rel, err = upgrade.RunWithContext(ctx, releaseName, c, values)
	if err != nil {
		t.Fatalf("upgrading the release: %v", err)
	}
	d, err := cs.AppsV1().Deployments(ns[releaseNamespace]).Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rel.Version != 2 || *d.Spec.Replicas != 3 {
		t.Errorf("after the upgrade: release version %d, replicas %d; want 2 and 3", rel.Version, *d.Spec.Replicas)
	}

	// Uninstalling removes the objects in the other namespaces too.
	uninstall := action.NewUninstall(cfg)
	uninstall.Timeout = time.Minute
	if _, err := uninstall.Run(releaseName); err != nil {
		t.Fatalf("uninstalling the release: %v", err)
	}
	jobsRole := ns[releaseNamespace] + "-outpost-agent-jobs"
	if _, err := cs.RbacV1().Roles(ns["outpost-jobs"]).Get(ctx, jobsRole, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Role %s/%s after uninstall: %v, want NotFound", ns["outpost-jobs"], jobsRole, err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns["outpost-jobs"]).Get(ctx, "outpost-job", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the jobs' ServiceAccount after uninstall: %v, want NotFound", err)
	}
}

// helmConfig returns a Helm action configuration for the kubeconfig, storing releases in Secrets of
// the release namespace as the provider does.
func helmConfig(t *testing.T, kubeconfig, namespace string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", t.Logf); err != nil {
		t.Fatalf("helm configuration: %v", err)
	}
	return cfg
}

// subjectCan asks the API server whether the user (a ServiceAccount) may make the request.
func subjectCan(ctx context.Context, t *testing.T, cs kubernetes.Interface, user string, a access) bool {
	t.Helper()
	resource, subresource, _ := strings.Cut(a.resource, "/")
	saNamespace := strings.Split(user, ":")[2]
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + saNamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace:   a.namespace,
			Verb:        a.verb,
			Group:       a.group,
			Resource:    resource,
			Subresource: subresource,
			Name:        a.name,
		},
	}}
	res, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview for %s: %v", a, err)
	}
	return res.Status.Allowed
}
