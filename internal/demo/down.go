package demo

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Down stops everything Up started and removes its data, keeping only the compiled binaries so
// the next `make demo` is fast. It is safe to run when nothing is running.
func Down(ctx context.Context, c Config) error {
	c.Defaults()
	for _, name := range []string{"agent", "orchestrator"} {
		d := daemon{name: name, dir: c.Dir}
		if d.stop(15 * time.Second) {
			fmt.Fprintf(c.Out, "stopped %s\n", name)
		}
	}
	tb := filepath.Join(c.binDir(), "outpost-testbed")
	if _, err := os.Stat(tb); err == nil {
		cmd := exec.CommandContext(ctx, tb, "down", "--dir", filepath.Join(c.Dir, "testbed"))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("stop the test bed: %w\n%s", err, out)
		}
		fmt.Fprintln(c.Out, "stopped the test bed")
	}
	entries, _ := os.ReadDir(c.Dir)
	for _, e := range entries {
		if e.Name() == "bin" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(c.Dir, e.Name())); err != nil {
			return fmt.Errorf("remove %s: %w", e.Name(), err)
		}
	}
	fmt.Fprintf(c.Out, "nothing is running; binaries kept in %s for the next run\n", c.binDir())
	return nil
}

func printLookAround(c *Config, kubeconfig, apiURL string) {
	w := c.Out
	fmt.Fprintf(w, "\n==> Done. Everything is still running; look around:\n")
	fmt.Fprintf(w, "    export KUBECONFIG=%s\n", kubeconfig)
	fmt.Fprintf(w, "    kubectl get secrets -A -l app.kubernetes.io/managed-by=outpost-agent   # state and key Secrets\n")
	fmt.Fprintf(w, "    orchestrator: %s   (admin token: cat %s)\n", apiURL, filepath.Join(c.Dir, "admin-token"))
	fmt.Fprintf(w, "    curl -s -H \"Authorization: Bearer $(cat %s)\" %s/api/v1/orgs/%s/deployments\n", filepath.Join(c.Dir, "admin-token"), apiURL, c.Org)
	fmt.Fprintf(w, "    logs: %s\n", filepath.Join(c.Dir, "logs"))
	fmt.Fprintf(w, "    tear everything down: make demo-down\n")
}
