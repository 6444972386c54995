package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// privateKeyDataKey is the Secret data key the key pair resource writes and the agent reads.
const privateKeyDataKey = keys.SecretKeyPrivate

func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	return kubernetes.NewForConfig(cfg)
}

// startAgent runs the agent as a local process. Like the chart's pods it reads the runner's key
// from its Secret through the Kubernetes API (and follows a rotation), so the key is never
// copied onto this machine's disk.
func startAgent(ctx context.Context, c *Config, s *stepper, cli, kubeconfig, apiURL string, o *quickstartOutputs) error {
	kc, err := kubeClient(kubeconfig)
	if err != nil {
		return err
	}
	sec, err := kc.CoreV1().Secrets(o.AgentNamespace).Get(ctx, o.PrivateKeySecret, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read the agent's key Secret %s/%s: %w", o.AgentNamespace, o.PrivateKeySecret, err)
	}
	if len(sec.Data[privateKeyDataKey]) == 0 {
		return fmt.Errorf("the key Secret %s/%s has no %q key", o.AgentNamespace, o.PrivateKeySecret, privateKeyDataKey)
	}
	agentDir := filepath.Join(c.Dir, "agent")
	if err := os.MkdirAll(filepath.Join(agentDir, "jobs"), 0o700); err != nil {
		return err
	}
	d := daemon{name: "agent", dir: c.Dir}
	if _, ok := d.running(); ok {
		s.info("restarting the agent started by an earlier run")
		d.stop(15 * time.Second)
	}
	//nolint:noctx // the agent must outlive this command; `make demo-down` stops it
	cmd := exec.Command(filepath.Join(c.binDir(), "outpost-agent"),
		"--api-url", apiURL,
		"--org-id", c.Org,
		"--runner-id", c.RunnerID,
		"--private-key-secret", o.PrivateKeySecret,
		"--namespace", o.AgentNamespace,
		"--executor", "process",
		"--leader-elect=false",
		"--kubeconfig", kubeconfig,
		"--cli", cli,
		"--work-dir", filepath.Join(agentDir, "jobs"),
		"--state-listen", c.StateAddr,
		"--state-url", "http://"+c.StateAddr,
		"--health-listen", c.HealthAddr,
		"--agent-binary", filepath.Join(c.binDir(), "outpost-agent"),
	)
	// The job runners get a CLI configuration of their own: the one of the person running the demo may
	// hold dev overrides (or name a file that does not exist, which the CLI warns about).
	rc := filepath.Join(agentDir, "job-cli.tfrc")
	if err := os.WriteFile(rc, []byte("# CLI configuration of the demo's job runners\n"), 0o644); err != nil {
		return err
	}
	cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc)
	if err := d.start(cmd); err != nil {
		return err
	}
	if err := waitHTTP(ctx, "http://"+c.HealthAddr+"/healthz", 30*time.Second, d); err != nil {
		return err
	}
	s.info("agent log: %s", d.LogFile())
	return nil
}

// waitConnected waits until the orchestrator reports the runner's agent connected.
func waitConnected(ctx context.Context, admin *client.AdminClient, runnerID string, timeout time.Duration, c Config, s *stepper) error {
	deadline := time.Now().Add(timeout)
	for {
		r, err := admin.GetRunner(ctx, runnerID)
		if err != nil && !errors.Is(err, api.ErrNotFound) {
			return fmt.Errorf("read runner %q: %w", runnerID, err)
		}
		if r != nil && r.Status.Connected {
			s.info("runner %q connected: agent %s, key %s", runnerID, r.Status.AgentVersion, r.Status.KeyFingerprint)
			return nil
		}
		if time.Now().After(deadline) {
			d := daemon{name: "agent", dir: c.Dir}
			return fmt.Errorf("the agent did not connect within %s; last lines of %s:\n%s", timeout, d.LogFile(), tail(d.LogFile(), 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
