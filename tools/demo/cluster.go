package demo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

func (c *Config) testbedDir() string { return filepath.Join(c.Dir, "testbed") }

// executorFile records the executor the running demo was started with: the two need test beds
// of different shapes and the orchestrator on different addresses, so a run with the other one
// must start from `make demo-down`.
func (c *Config) executorFile() string { return filepath.Join(c.Dir, "run", "executor") }

// checkSameExecutor refuses to switch executors over a running demo.
func checkSameExecutor(c *Config) error {
	b, err := os.ReadFile(c.executorFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if running := strings.TrimSpace(string(b)); running != c.Executor {
		st, _ := testbed.StatusDir(c.testbedDir())
		if st != nil && len(st.Running) > 0 {
			return fmt.Errorf("%w: a demo with EXECUTOR=%s is running; stop it with `make demo-down` first, then run `make demo EXECUTOR=%s`", errPrereq, running, c.Executor)
		}
	}
	return nil
}

func (c *Config) recordExecutor() error {
	if err := os.MkdirAll(filepath.Dir(c.executorFile()), 0o755); err != nil {
		return err
	}
	return os.WriteFile(c.executorFile(), []byte(c.Executor+"\n"), 0o644)
}

// startTestbed starts the test bed in the background, or reuses the one an earlier run started.
// With the kubernetes executor it runs a real node (and no fake one: every Pod really runs); where
// this machine cannot run one, it says why and switches c to the process executor, which needs
// only the control plane and kwok's fake node (the chart's pods are then simulated).
func startTestbed(ctx context.Context, c *Config, s *stepper) (*testbed.Cluster, error) {
	dir := c.testbedDir()
	st, err := testbed.StatusDir(dir)
	if err != nil {
		return nil, err
	}
	if st != nil && len(st.Stopped) == 0 {
		if tc, err := testbed.Reuse(ctx, st.Kubeconfig); err == nil && tc.Node == (c.Executor == ExecutorKubernetes) {
			s.info("already running (started %s); reusing it", st.Started.Local().Format(time.Stamp))
			s.info("kubeconfig: %s", tc.Kubeconfig)
			return tc, nil
		}
	}
	if st != nil {
		s.info("removing a test bed that is no longer healthy (stopped: %v)", st.Stopped)
		if err := testbed.StopDir(dir); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	tc, err := testbed.Start(ctx, testbed.Options{Node: c.Executor == ExecutorKubernetes, Jobs: c.Executor == ExecutorProcess, Dir: dir, Detach: true})
	if testbed.IsNodeUnavailable(err) {
		s.info("%v", err)
		s.info("falling back to EXECUTOR=process: the agent and the deployments run as local processes (the chart is installed all the same, its pods simulated)")
		c.Executor = ExecutorProcess
		if err := build(ctx, c, s, agentTarget); err != nil {
			return nil, err
		}
		tc, err = testbed.Start(ctx, testbed.Options{Jobs: true, Dir: dir, Detach: true})
	}
	if err != nil {
		return nil, fmt.Errorf("start the test bed (if binaries are missing, run `make testbed-build`): %w", err)
	}
	what := "etcd, kube-apiserver, controller-manager, scheduler, kwok's fake node"
	if tc.Node {
		what = "etcd, kube-apiserver, controller-manager, scheduler, and node " + testbed.RealNodeName +
			" (containerd, runc, kubelet, kube-proxy, CoreDNS)"
	}
	s.info("%s ready in %s", what, time.Since(start).Round(100*time.Millisecond))
	s.info("kubeconfig: %s", tc.Kubeconfig)
	return tc, nil
}
