package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/cli"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// StateKey is the state the demo's deployments share.
const StateKey = "quickstart/hello"

type deploymentResult struct {
	dep       *api.Deployment
	log       string
	noChanges bool
}

// runDeployment submits examples/quickstart/deployment as an apply and follows its log, the way
// `outpost deploy --follow` does (package cli's Deployer).
// With jobNS set (the kubernetes executor), it also reports the job pod the deployment ran in.
func runDeployment(ctx context.Context, c *Config, s *stepper, admin *client.AdminClient, kc kubernetes.Interface, jobNS, greeting string) (*deploymentResult, error) {
	g, _ := json.Marshal(greeting)
	d := &cli.Deployer{Admin: admin}
	dep, err := d.Queue(ctx, cli.DeployRequest{
		Dir:       filepath.Join(c.Repo, "examples", "quickstart", "deployment"),
		RunnerID:  c.RunnerID,
		Operation: api.OperationApply,
		Variables: map[string]json.RawMessage{"greeting": g},
		StateKey:  StateKey,
	})
	if err != nil {
		return nil, fmt.Errorf("submit deployment: %w", err)
	}
	s.info("deployment %s queued (state key %q); live log:", dep.ID, StateKey)
	var watch *jobPodWatcher
	if jobNS != "" {
		watch = watchJobPods(ctx, kc, jobNS, dep.ID)
	}
	var log bytes.Buffer
	w := &prefixWriter{out: c.Out, prefix: "    | "}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	_, final, err := d.Follow(waitCtx, dep.ID, 0, io.MultiWriter(w, &log))
	w.Flush()
	if watch != nil {
		pods := watch.Stop()
		for _, p := range pods {
			s.info("ran in job pod %s/%s on node %s (main's image %s)", p.namespace, p.name, p.node, p.image)
		}
		if len(pods) == 0 && err == nil {
			return nil, fmt.Errorf("deployment %s finished, but no job pod of it was seen in namespace %s", dep.ID, jobNS)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("follow deployment %s: %w", dep.ID, err)
	}
	if final.Status != api.StatusSucceeded {
		return nil, fmt.Errorf("deployment %s ended %s (reason %q: %s); its log is above", final.ID, final.Status, final.Reason, final.Message)
	}
	text := log.String()
	return &deploymentResult{
		dep: final, log: text,
		noChanges: strings.Contains(text, "No changes.") || strings.Contains(text, "0 added, 0 changed, 0 destroyed"),
	}, nil
}

func printOutputs(ctx context.Context, s *stepper, admin *client.AdminClient, r *deploymentResult) error {
	outs, err := admin.GetOutputs(ctx, r.dep.ID)
	if err != nil {
		return fmt.Errorf("read outputs of %s: %w", r.dep.ID, err)
	}
	s.info("deployment %s %s (exit code %d); outputs reported by the CLI:", r.dep.ID, r.dep.Status, deref(r.dep.ExitCode))
	names := make([]string, 0, len(outs))
	for n := range outs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v := string(outs[n].Value)
		if outs[n].Sensitive {
			v = "(sensitive)"
		}
		s.info("  %s = %s", n, v)
	}
	if len(outs) == 0 {
		return fmt.Errorf("deployment %s reported no outputs", r.dep.ID)
	}
	return nil
}

func printStateSecrets(ctx context.Context, s *stepper, kc kubernetes.Interface, kubeconfig, ns string) error {
	list, err := kc.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=outpost-agent"})
	if err != nil {
		return fmt.Errorf("list state Secrets in %s: %w", ns, err)
	}
	if len(list.Items) == 0 {
		return fmt.Errorf("no state Secrets found in namespace %s", ns)
	}
	for _, sec := range list.Items {
		size := 0
		for _, v := range sec.Data {
			size += len(v)
		}
		note := sec.Annotations["outpost.dev/state-key"]
		if note != "" {
			note = "state key " + note
		}
		s.info("  secret/%-40s %7d bytes  %s", sec.Name, size, note)
	}
	s.info("read them with: kubectl --kubeconfig %s -n %s get secrets", kubeconfig, ns)
	return nil
}

func deref(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

// prefixWriter indents streamed log text line by line.
type prefixWriter struct {
	out     io.Writer
	prefix  string
	partial []byte
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	data := append(w.partial, p...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		fmt.Fprintf(w.out, "%s%s\n", w.prefix, data[:i])
		data = data[i+1:]
	}
	w.partial = append([]byte(nil), data...)
	return len(p), nil
}

// Flush writes a trailing partial line.
func (w *prefixWriter) Flush() {
	if len(w.partial) > 0 {
		fmt.Fprintf(w.out, "%s%s\n", w.prefix, w.partial)
		w.partial = nil
	}
}
