package provider

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-log/tflog"
	"helm.sh/helm/v3/pkg/release"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

// connectionPollInterval is how often the wait asks the orchestrator about the runner.
const connectionPollInterval = 2 * time.Second

// waitForConnection polls the orchestrator until the runner reports connected or ctx ends. On
// timeout it explains what to check, with what it can find out about the agent's pods.
func (r *kubernetesAgentResource) waitForConnection(ctx context.Context, admin *client.AdminClient, conn *kubeConn, plan kubernetesAgentModel, rel *release.Release, timeout time.Duration) diag.Diagnostics {
	var diags diag.Diagnostics
	id := plan.RunnerID.ValueString()
	fields := map[string]any{"runner_id": id, "namespace": rel.Namespace, "release": rel.Name}
	tflog.Info(ctx, "waiting for the agent to connect", fields)
	start := time.Now()
	ticker := time.NewTicker(connectionPollInterval)
	defer ticker.Stop()
	want := expectedAgentVersion(rel)
	var last *api.Runner
	for {
		runner, err := admin.GetRunner(ctx, id)
		switch {
		case err == nil:
			last = runner
			// A status from before this install (an earlier agent that has since stopped) does not
			// count: the orchestrator must have heard from an agent since the wait began. After an
			// upgrade, the agent of the version installed must be the one polling: the previous
			// one goes on polling until the rollout has replaced it.
			if want != "" && runner.Status.Connected && runner.Status.AgentVersion != want {
				tflog.Debug(ctx, "an agent of another version still polls; waiting for the rollout", map[string]any{
					"runner_id": id, "agent_version": runner.Status.AgentVersion, "installed_version": want})
				break
			}
			if runner.Status.Connected && seenSince(runner.Status.LastSeenAt, start) {
				fields["waited_ms"] = time.Since(start).Milliseconds()
				fields["agent_version"] = runner.Status.AgentVersion
				tflog.Info(ctx, "the agent connected", fields)
				if summary, detail, differs := agentVersionMismatch(runner.Status.AgentVersion); differs {
					diags.AddWarning(summary, detail)
				}
				return diags
			}
		case errors.Is(err, api.ErrNotFound):
			diags.AddError("Runner Not Found",
				fmt.Sprintf("Runner %q was deleted from the orchestrator while waiting for its agent to connect. Re-apply to register it again.\n\nOriginal error: %s", id, err))
			return diags
		case ctx.Err() == nil:
			tflog.Debug(ctx, "reading the runner's status failed; retrying", map[string]any{"runner_id": id, "error": err.Error()})
		}
		select {
		case <-ctx.Done():
			detail := r.notConnectedDetail(ctx, conn, plan, rel, last, timeout)
			if last != nil && last.Status.Connected && want != "" && last.Status.AgentVersion != want {
				detail = fmt.Sprintf("The agent that polls still reports version %q: the pods of the installed version %s have not taken over yet "+
					"(kubectl -n %s rollout status deployment/%s).\n\n%s", last.Status.AgentVersion, want, rel.Namespace, agentchart.Fullname(rel.Name, rel.Config), detail)
			}
			diags.AddError("Agent Did Not Connect", fmt.Sprintf("%s\n\nOriginal error: waiting for runner %q to connect: %v", detail, id, ctx.Err()))
			return diags
		case <-ticker.C:
		}
	}
}

// expectedAgentVersion is the version the agent installed by rel reports: the chart's appVersion,
// the tag of the image it deploys by default. Empty when the release pins another image
// (image.tag or image.digest in its values), or has no chart (tests), so any version counts.
func expectedAgentVersion(rel *release.Release) string {
	if rel == nil || rel.Chart == nil || rel.Chart.Metadata == nil {
		return ""
	}
	if img, ok := rel.Config["image"].(map[string]any); ok {
		for _, k := range []string{"tag", "digest"} {
			if v, _ := img[k].(string); v != "" {
				return ""
			}
		}
	}
	return rel.Chart.Metadata.AppVersion
}

// agentVersionMismatch says, when the connected agent's version is not the one this provider
// installs by default (its own, for a release), that they differ and what to do.
func agentVersionMismatch(agentVersion string) (summary, detail string, differs bool) {
	_, want := agentchart.InstallVersions()
	if agentVersion == want {
		return "", "", false
	}
	return "Agent Version Differs From Provider",
		fmt.Sprintf("The agent that connected reports version %q, but this provider (version %s) installs agent %s by default. "+
			"A provider and an agent of different releases work together only while they speak a common agent protocol, and only "+
			"the pair of one release is tested together.\n\nUnless you pinned the agent image on purpose (image.tag or image.digest), "+
			"remove the pin or upgrade the provider so the next apply installs the agent of the provider's release.",
			agentVersion, version.Version, want), true
}

// seenSince reports whether the agent was last seen at or after since, allowing for a few
// seconds of clock difference between this machine and the orchestrator.
func seenSince(lastSeen *time.Time, since time.Time) bool {
	return lastSeen != nil && !lastSeen.Before(since.Add(-5*time.Second))
}

// notConnectedDetail says what was installed, what the orchestrator last saw and what to check.
func (r *kubernetesAgentResource) notConnectedDetail(ctx context.Context, conn *kubeConn, plan kubernetesAgentModel, rel *release.Release, last *api.Runner, timeout time.Duration) string {
	interrupted := errors.Is(ctx.Err(), context.Canceled)
	// The operation's context is over; the diagnosis gets a short one of its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	ns, id := rel.Namespace, plan.RunnerID.ValueString()
	var b strings.Builder
	if interrupted {
		fmt.Fprintf(&b, "The agent chart was installed (release %s/%s, revision %d), but the run was interrupted before runner %q reported connected to the orchestrator.\n\n",
			ns, rel.Name, rel.Version, id)
	} else {
		fmt.Fprintf(&b, "The agent chart was installed (release %s/%s, revision %d), but runner %q did not report connected to the orchestrator within %s.\n\n",
			ns, rel.Name, rel.Version, id, timeout)
	}
	switch {
	case last == nil:
		b.WriteString("The orchestrator could not be asked about the runner's status.\n")
	case last.Status.LastSeenAt == nil:
		b.WriteString("The orchestrator has never seen an authenticated request from this runner's agent.\n")
	default:
		fmt.Fprintf(&b, "The orchestrator last saw the agent at %s (version %q, key %s).\n",
			last.Status.LastSeenAt.UTC().Format(time.RFC3339), last.Status.AgentVersion, last.Status.KeyFingerprint)
	}
	b.WriteString("\nCheck:\n")
	fmt.Fprintf(&b, "- the agent's logs: kubectl -n %s logs deployment/%s\n", ns, agentchart.Fullname(rel.Name, rel.Config))
	pods := podSummary(ctx, conn, ns, rel)
	for _, line := range pods {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	b.WriteString(imagePullAdvice(pods, plan))
	secret, key := plan.PrivateKeySecret.Name.ValueString(), plan.PrivateKeySecret.Key.ValueString()
	_, err := conn.clientset.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(&b, "- Secret %s/%s (private_key_secret) does NOT exist: the agent pods cannot start without it. Create it, e.g. with outpost_key_pair { kubernetes_secret { namespace = %q, name = %q } }.\n", ns, secret, ns, secret)
	default:
		fmt.Fprintf(&b, "- that Secret %s/%s holds, under %q, the private key whose public key is in the runner's public_keys "+
			"(compare outpost_key_pair.fingerprint_sha256 with the runner's agent_key_fingerprint)\n", ns, secret, key)
	}
	fmt.Fprintf(&b, "- that the agent pods can reach %s (network egress, NetworkPolicies; behind a proxy, set the proxy block)\n", plan.APIURL.ValueString())
	b.WriteString("\nSet wait_for_connection = false to install without waiting, or raise timeouts.create / timeouts.update.")
	return b.String()
}

// podSummary describes the agent's pods: phase and why containers are waiting.
func podSummary(ctx context.Context, conn *kubeConn, ns string, rel *release.Release) []string {
	pods, err := conn.clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + rel.Name + ",app.kubernetes.io/component=agent",
	})
	if err != nil {
		return []string{"(the agent pods could not be listed: " + err.Error() + ")"}
	}
	if len(pods.Items) == 0 {
		return []string{fmt.Sprintf("(no agent pods exist; see kubectl -n %s describe deployment/%s for why)", ns, agentchart.Fullname(rel.Name, rel.Config))}
	}
	var out []string
	for _, p := range pods.Items {
		line := fmt.Sprintf("pod %s: %s", p.Name, p.Status.Phase)
		var reasons []string
		for _, c := range p.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil {
				reasons = append(reasons, fmt.Sprintf("%s waiting: %s %s", c.Name, w.Reason, w.Message))
			}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Status != "True" && cond.Message != "" {
				reasons = append(reasons, fmt.Sprintf("%s: %s", cond.Type, cond.Message))
			}
		}
		if len(reasons) > 0 {
			line += " (" + strings.Join(reasons, "; ") + ")"
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out
}
