package testbed

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
)

// waitNodeReady proves, step by step, that the real node runs Pods: it registers and becomes
// Ready, loses the not-ready taint, and a probe Pod from ToolboxImage runs to Succeeded (a
// sandbox from PauseImage, an address from the CNI bridge, a container started by runc). A broken
// part shows at start-up, named, with the log of the component to blame.
func (c *Cluster) waitNodeReady(ctx context.Context, rn *node, kubelet *process) error {
	ctx, cancel := context.WithTimeout(ctx, nodeReadyTimeout)
	defer cancel()
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	var lastNode *corev1.Node
	err = c.poll(ctx, func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, rn.name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // not registered yet; the deadline reports it
		}
		lastNode = n
		if !nodeReady(n) {
			return false, nil
		}
		for _, t := range n.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		what := "did not register the real node " + rn.name
		if lastNode != nil {
			what = fmt.Sprintf("did not make the real node %s Ready and untainted (conditions %v, taints %v)",
				rn.name, conditionSummary(lastNode), lastNode.Spec.Taints)
		}
		return c.jobsFailure(err, kubelet, what)
	}

	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "testbed-node-probe-" + rand.String(5), Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "probe", Image: ToolboxImage, Args: []string{"echo", "ok"},
				ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
	OnRealNode(&probe.Spec)
	probe.Spec.NodeSelector[corev1.LabelHostname] = rn.name
	if err := c.createProbe(ctx, cs, probe); err != nil {
		return err
	}
	defer deleteProbe(ctx, cs, probe)
	lastPod, err := c.waitPod(ctx, cs, probe, func(p *corev1.Pod) (bool, error) {
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("the probe Pod failed: %s", podSummary(p))
		}
		return p.Status.Phase == corev1.PodSucceeded, nil
	})
	if err != nil {
		what := "did not run a probe Pod on " + rn.name
		if lastPod != nil {
			what += ": " + podSummary(lastPod)
			if ev := podEvents(ctx, cs, lastPod); ev != "" {
				what += "; events: " + ev
			}
		}
		blame := kubelet
		if lastPod == nil || lastPod.Spec.NodeName == "" {
			blame = c.proc("kube-scheduler")
		}
		return c.jobsFailure(err, blame, what)
	}
	return nil
}

func conditionSummary(n *corev1.Node) []string {
	var out []string
	for _, cond := range n.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s (%s)", cond.Type, cond.Status, cond.Message))
	}
	return out
}

// podSummary says where a Pod is stuck: its phase, node and each container's state.
func podSummary(p *corev1.Pod) string {
	s := fmt.Sprintf("phase %s on node %q", p.Status.Phase, p.Spec.NodeName)
	for _, st := range p.Status.ContainerStatuses {
		switch {
		case st.State.Waiting != nil:
			s += fmt.Sprintf(", %s waiting: %s %s", st.Name, st.State.Waiting.Reason, st.State.Waiting.Message)
		case st.State.Terminated != nil:
			s += fmt.Sprintf(", %s terminated: exit code %d %s", st.Name, st.State.Terminated.ExitCode, st.State.Terminated.Message)
		case st.State.Running != nil:
			s += fmt.Sprintf(", %s running", st.Name)
		}
	}
	return s
}

// podEvents returns the Warning events of a Pod (a failed sandbox, a missing image), one line.
func podEvents(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) string {
	evs, err := cs.CoreV1().Events(p.Namespace).List(context.WithoutCancel(ctx), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + p.Name + ",type=Warning",
	})
	if err != nil {
		return ""
	}
	var s string
	for _, ev := range evs.Items {
		s += fmt.Sprintf("[%s] %s; ", ev.Reason, ev.Message)
	}
	return s
}
