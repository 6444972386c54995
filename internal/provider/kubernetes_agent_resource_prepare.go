package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-log/tflog"
	"helm.sh/helm/v3/pkg/action"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/helm"
)

// checkRunner makes sure the runner exists and that the agent grants itself access to the
// namespaces the runner uses, so a mismatch fails here and not as a Job the agent may not create.
func (r *kubernetesAgentResource) checkRunner(ctx context.Context, admin *client.AdminClient, plan kubernetesAgentModel) diag.Diagnostics {
	var diags diag.Diagnostics
	id := plan.RunnerID.ValueString()
	if plan.OrgID.ValueString() != admin.Org() {
		tflog.Debug(ctx, "not checking the runner: it belongs to another organisation than the provider's", map[string]any{"runner_id": id})
		return nil
	}
	runner, err := admin.GetRunner(ctx, id)
	if errors.Is(err, api.ErrNotFound) {
		diags.AddAttributeError(path.Root("runner_id"), "Runner Not Found",
			fmt.Sprintf("Runner %q is not registered in organisation %q. Register it with an outpost_kubernetes_agent_runner "+
				"resource and set runner_id = outpost_kubernetes_agent_runner.<name>.id, so Terraform creates the runner first.", id, admin.Org()))
		return diags
	}
	if err != nil {
		addAPIError(&diags, "Unable to Read Runner", fmt.Sprintf("read runner %q", id), err, "")
		return diags
	}
	mismatch := func(attr, what, runnerValue, ours string) {
		diags.AddAttributeError(path.Root(attr), "Runner Mismatch",
			fmt.Sprintf("Runner %q uses %s %q, but this agent is configured for %q, so it would not be allowed to run the runner's Jobs. "+
				"Set %s = %q, or change the runner.", id, what, runnerValue, ours, attr, runnerValue))
	}
	if runner.Job.Namespace != plan.JobNamespace.ValueString() {
		mismatch("job_namespace", "job namespace", runner.Job.Namespace, plan.JobNamespace.ValueString())
	}
	if runner.Job.ServiceAccount != plan.JobServiceAccount.ValueString() {
		mismatch("job_service_account", "job service account", runner.Job.ServiceAccount, plan.JobServiceAccount.ValueString())
	}
	if plan.ServeState.ValueBool() {
		storage, err := admin.GetStateStorage(ctx, runner.StateStorageID)
		if err == nil && storage.Kubernetes != nil && storage.Kubernetes.Namespace != plan.StateNamespace.ValueString() {
			mismatch("state_namespace", "the kubernetes state storage in namespace", storage.Kubernetes.Namespace, plan.StateNamespace.ValueString())
		}
	}
	return diags
}

// prepareNamespaces creates the namespaces when asked to, labelled for the Pod Security level
// they need (the jobs namespace: what the job pod policy allows; the others: restricted), and
// otherwise checks they exist. A jobs namespace without a Pod Security label, or with one that
// would refuse pods the policy allows, gets a warning.
func (r *kubernetesAgentResource) prepareNamespaces(ctx context.Context, conn *kubeConn, plan kubernetesAgentModel, vals map[string]any) diag.Diagnostics {
	var diags diag.Diagnostics
	jobsNS, jobsLevel := plan.JobNamespace.ValueString(), jobsPodSecurityLevel(vals)
	names := []struct{ attr, ns string }{{"namespace", plan.Namespace.ValueString()}, {"job_namespace", jobsNS}}
	if plan.ServeState.ValueBool() {
		names = append(names, struct{ attr, ns string }{"state_namespace", plan.StateNamespace.ValueString()})
	}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n.ns] {
			continue
		}
		seen[n.ns] = true
		level := podSecurityRestricted
		if n.ns == jobsNS {
			level = jobsLevel
		}
		if plan.CreateNamespaces.ValueBool() {
			diags.Append(ensureNamespace(ctx, conn.clientset, n.ns, map[string]string{labelPodSecurity: level})...)
		}
		ns, err := conn.clientset.CoreV1().Namespaces().Get(ctx, n.ns, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			diags.AddAttributeError(path.Root(n.attr), "Namespace Not Found",
				fmt.Sprintf("Namespace %q does not exist. Set create_namespaces = true, or create it first.", n.ns))
		case err != nil:
			addKubeError(&diags, "Unable to Read Namespace", fmt.Sprintf("read namespace %q", n.ns),
				"Check the provider's kubernetes block and that its identity may read namespaces.", err)
		case n.ns == jobsNS:
			diags.Append(checkPodSecurityLabel(n.attr, n.ns, ns.Labels[labelPodSecurity], level)...)
		}
	}
	return diags
}

// checkPodSecurityLabel warns about a jobs namespace whose Pod Security label does not match what
// the job pod policy allows: without one, nothing but the agent stands between a pod template and
// the node; with a stricter one, the API server refuses pods the policy lets through.
func checkPodSecurityLabel(attr, ns, have, want string) diag.Diagnostics {
	var diags diag.Diagnostics
	order := map[string]int{podSecurityRestricted: 0, podSecurityBaseline: 1, podSecurityPrivileged: 2}
	switch cur, known := order[have]; {
	case !known:
		diags.AddAttributeWarning(path.Root(attr), "Jobs Namespace Without Pod Security",
			fmt.Sprintf("Namespace %q has no %s label, so only the agent's job pod policy guards what job pods may do. "+
				"Label it as a second line of defence: kubectl label namespace %s %s=%s", ns, labelPodSecurity, ns, labelPodSecurity, want))
	case cur < order[want]:
		diags.AddAttributeWarning(path.Root(attr), "Jobs Namespace Stricter Than The Job Pod Policy",
			fmt.Sprintf("Namespace %q enforces Pod Security %q, but job_pod_policy allows what needs %q: the API server will refuse "+
				"such pods and their deployments fail at startup. Relabel it (kubectl label --overwrite namespace %s %s=%s) or tighten job_pod_policy.",
				ns, have, want, ns, labelPodSecurity, want))
	}
	return diags
}

// helmConfig returns a Helm action configuration for namespace whose debug log goes to tflog.
func (r *kubernetesAgentResource) helmConfig(ctx context.Context, conn *kubeConn, ns string) (*action.Configuration, diag.Diagnostics) {
	var diags diag.Diagnostics
	cfg, err := helm.NewConfiguration(helm.NewRESTClientGetter(conn.restConfig, ns), ns, helmLogger(ctx))
	if err != nil {
		addKubeError(&diags, "Unable to Configure Helm", fmt.Sprintf("prepare Helm for namespace %q", ns),
			"Check the provider's kubernetes block.", err)
		return nil, diags
	}
	return cfg, nil
}

// helmLogger bridges Helm's debug output into the provider log (TF_LOG=DEBUG shows it).
func helmLogger(ctx context.Context) helm.Logger {
	return func(format string, v ...any) {
		tflog.Debug(ctx, "helm", map[string]any{"helm_message": fmt.Sprintf(format, v...)})
	}
}

// helmTimeout is Helm's own timeout: what is left of the operation, minus a margin so Helm
// records its failure before the operation's context ends.
func helmTimeout(ctx context.Context) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return 5 * time.Minute
	}
	return max(time.Until(deadline)-15*time.Second, 30*time.Second)
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
