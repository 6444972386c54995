package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// Down stops everything Up started and removes its data, keeping the compiled binaries, so the
// next `make demo` is fast, and the logs of failed runs (failed-*), which their error message
// points at. It is safe to run when nothing is running.
func Down(_ context.Context, c Config) error {
	c.Defaults()
	for _, name := range []string{"agent", "orchestrator"} {
		d := daemon{name: name, dir: c.Dir}
		if d.stop(15 * time.Second) {
			fmt.Fprintf(c.Out, "stopped %s\n", name)
		}
	}
	st, err := testbed.StatusDir(c.testbedDir())
	if err != nil {
		return err
	}
	// StopDir also removes what a real node leaves on this machine: its containers, mounts,
	// network namespaces, veth, cgroups and iptables rules.
	if err := testbed.StopDir(c.testbedDir()); err != nil {
		return fmt.Errorf("stop the test bed: %w", err)
	}
	if st != nil && len(st.Running) > 0 {
		fmt.Fprintln(c.Out, "stopped the test bed")
	}
	entries, _ := os.ReadDir(c.Dir)
	var kept []string
	for _, e := range entries {
		if e.Name() == "bin" {
			continue
		}
		if strings.HasPrefix(e.Name(), failedPrefix) {
			kept = append(kept, filepath.Join(c.Dir, e.Name()))
			continue
		}
		if err := os.RemoveAll(filepath.Join(c.Dir, e.Name())); err != nil {
			return fmt.Errorf("remove %s: %w", e.Name(), err)
		}
	}
	for _, k := range kept {
		fmt.Fprintf(c.Out, "kept the logs of a failed run: %s (remove it by hand when done)\n", k)
	}
	fmt.Fprintf(c.Out, "nothing is running; binaries kept in %s for the next run\n", c.binDir())
	return nil
}

func printLookAround(c *Config, kubeconfig, apiURL, agentNS string, took time.Duration) {
	w := c.Out
	fmt.Fprintf(w, "\n==> Done in %s. Everything is still running; look around:\n", took.Round(time.Second))
	fmt.Fprintf(w, "    export KUBECONFIG=%s\n", kubeconfig)
	if c.Executor == ExecutorKubernetes {
		fmt.Fprintf(w, "    kubectl get pods -A -o wide   # the agent's pods and CoreDNS on node %s\n", testbed.RealNodeName)
		fmt.Fprintf(w, "    kubectl -n %s logs -l %s --tail=20   # the agent's log\n", agentNS, agentPodSelector)
	}
	fmt.Fprintf(w, "    kubectl get secrets -A -l app.kubernetes.io/managed-by=outpost-agent   # state and key Secrets\n")
	fmt.Fprintf(w, "    orchestrator: %s   (admin token: cat %s)\n", apiURL, filepath.Join(c.Dir, "admin-token"))
	fmt.Fprintf(w, "    web console: %s/   sign in with the admin token (cat %s) and organisation %s\n", apiURL, filepath.Join(c.Dir, "admin-token"), c.Org)
	fmt.Fprintf(w, "    curl -s -H \"Authorization: Bearer $(cat %s)\" %s/api/v1/orgs/%s/deployments\n", filepath.Join(c.Dir, "admin-token"), apiURL, c.Org)
	fmt.Fprintf(w, "    logs: %s\n", filepath.Join(c.Dir, "logs"))
	fmt.Fprintf(w, "    tear everything down: make demo-down\n")
}
