package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// Up runs the demo. It is idempotent: parts already running are reused, the quickstart apply
// converges, and each run submits two fresh deployments. When it fails after its checks, the
// logs of the run are copied where the error says, which `make demo-down` leaves in place.
func Up(ctx context.Context, c Config) (err error) {
	c.Defaults()
	if err := c.checkExecutor(); err != nil {
		return err
	}
	cli, err := c.cliPath()
	if err != nil {
		return err
	}
	if err := checkSameExecutor(&c); err != nil {
		return err
	}
	if err := checkPorts(ctx, c); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = keepLogs(&c, err)
		}
	}()
	s := &stepper{out: c.Out, of: 9, start: time.Now()}

	s.step("Building the provider and the orchestrator (about 3 min on a cold 2-core machine, seconds when cached)")
	if err := buildBinaries(ctx, &c, s); err != nil {
		return err
	}

	s.step("Starting the local Kubernetes test bed with a real node (about 30 s)")
	tc, err := startTestbed(ctx, &c, s)
	if err != nil {
		return err
	}
	if err := c.recordExecutor(); err != nil {
		return err
	}
	pods := c.Executor == ExecutorKubernetes
	kubeconfig := tc.Kubeconfig

	var imgs []builtImage
	if pods {
		s.step("Building the outpost-agent and outpost-job images without a container daemon, and pushing them to the test bed's registry (about 1 min)")
		if imgs, err = buildImages(ctx, &c, s, tc); err != nil {
			return err
		}
	} else {
		s.step("No images needed: the agent runs as a local process (EXECUTOR=process)")
	}

	orchAddr := c.OrchestratorAddr
	if pods {
		// Pods reach this machine only at the test bed's host address.
		_, port, err := net.SplitHostPort(c.OrchestratorAddr)
		if err != nil {
			return fmt.Errorf("orchestrator address %q: %w", c.OrchestratorAddr, err)
		}
		orchAddr = net.JoinHostPort(tc.HostIP, port)
	}
	s.step("Starting the reference orchestrator on http://%s", orchAddr)
	token, err := startOrchestrator(ctx, &c, s, orchAddr)
	if err != nil {
		return err
	}
	apiURL := "http://" + orchAddr
	var opts []client.Option
	if pods {
		opts = append(opts, client.AllowInsecureHTTP()) // the test bed's host-only address; see applyQuickstart
	}
	admin, err := client.NewAdminClient(apiURL, c.Org, token, opts...)
	if err != nil {
		return err
	}

	if pods {
		s.step("Applying examples/quickstart with %s and the locally built provider (key pair, state storage, runner, and the agent chart, whose pods it waits for)", c.CLI)
	} else {
		s.step("Applying examples/quickstart with %s and the locally built provider (key pair, state storage, runner, agent chart)", c.CLI)
	}
	var registry *testbed.Registry
	if pods {
		registry = tc.Registry
	}
	outputs, err := applyQuickstart(ctx, &c, s, cli, kubeconfig, apiURL, token, registry)
	if err != nil {
		return err
	}
	kc, err := kubeClient(kubeconfig)
	if err != nil {
		return err
	}

	if pods {
		s.step("The agent runs in the chart's pods, from the image built above, pulled from the test bed's registry")
		if err := restartStaleAgentPods(ctx, kc, outputs.AgentNamespace, imgs, s); err != nil {
			return err
		}
		if err := waitConnected(ctx, admin, c.RunnerID, 2*time.Minute, c, s); err != nil {
			return err
		}
		if err := printAgentPods(ctx, kc, outputs.AgentNamespace, s); err != nil {
			return err
		}
	} else {
		s.step("Running the agent as a local process (process executor; state in the cluster's Secrets)")
		if err := startAgent(ctx, &c, s, cli, kubeconfig, apiURL, outputs); err != nil {
			return err
		}
		if err := waitConnected(ctx, admin, c.RunnerID, 60*time.Second, c, s); err != nil {
			return err
		}
	}
	runner, err := admin.GetRunner(ctx, c.RunnerID)
	if err != nil {
		return fmt.Errorf("read runner %q: %w", c.RunnerID, err)
	}
	jobNS := ""
	if pods {
		jobNS = runner.Job.Namespace
	}

	where := "a local process"
	if pods {
		where = "a job pod"
	}
	s.step("Submitting a deployment (apply) to runner %q; it runs in %s, its log follows live", c.RunnerID, where)
	first, err := runDeployment(ctx, &c, s, admin, kc, jobNS, "hello from outpost")
	if err != nil {
		return err
	}
	if err := printOutputs(ctx, s, admin, first); err != nil {
		return err
	}

	s.step("The deployment's state, in Secrets of namespace %q", outputs.StateNamespace)
	if err := printStateSecrets(ctx, s, kc, kubeconfig, outputs.StateNamespace); err != nil {
		return err
	}

	s.step("Submitting the same deployment again: the state is read back from the cluster, so nothing changes")
	second, err := runDeployment(ctx, &c, s, admin, kc, jobNS, "hello from outpost")
	if err != nil {
		return err
	}
	if !second.noChanges {
		return fmt.Errorf("the second deployment of the same state planned changes; its log is above")
	}
	s.info("second deployment %s: %s, no changes", second.dep.ID, second.dep.Status)

	printLookAround(&c, kubeconfig, apiURL, outputs.AgentNamespace, time.Since(s.start))
	return nil
}

func checkPorts(ctx context.Context, c Config) error {
	// A port held by a daemon of an earlier run is fine: that run is reused or restarted.
	for _, p := range []struct{ addr, who, daemon, flag string }{
		{c.OrchestratorAddr, "orchestrator", "orchestrator", "OUTPOST_DEMO_ORCHESTRATOR_ADDR"},
		{c.StateAddr, "agent's state backend", "agent", "OUTPOST_DEMO_STATE_ADDR"},
		{c.HealthAddr, "agent's health endpoint", "agent", "OUTPOST_DEMO_HEALTH_ADDR"},
	} {
		d := daemon{name: p.daemon, dir: c.Dir}
		if _, ours := d.running(); ours {
			continue
		}
		if err := portFree(ctx, p.addr); err != nil {
			return fmt.Errorf("%w: port %s (for the %s) is in use by another program; stop it, or pick another address with %s=127.0.0.1:<port> make demo", errPrereq, p.addr, p.who, p.flag)
		}
	}
	return nil
}

func startOrchestrator(ctx context.Context, c *Config, s *stepper, addr string) (string, error) {
	d := daemon{name: "orchestrator", dir: c.Dir}
	tokenFile := filepath.Join(c.Dir, "admin-token")
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		token = []byte(hex.EncodeToString(b))
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(tokenFile, token, 0o600); err != nil {
			return "", err
		}
	}
	if _, ok := d.running(); ok {
		s.info("already running (pid file %s); reusing it", d.pidFile())
	} else {
		//nolint:noctx // the orchestrator must outlive this command; `make demo-down` stops it
		cmd := exec.Command(filepath.Join(c.binDir(), "outpost-orchestrator"),
			"--listen", addr,
			"--data-dir", filepath.Join(c.Dir, "orchestrator"),
			"--external-url", "http://"+addr)
		// The token goes through the environment, not argv, so `ps` does not show it.
		cmd.Env = append(os.Environ(), "OUTPOST_ORCHESTRATOR_ADMIN_TOKEN="+string(token))
		if err := d.start(cmd); err != nil {
			return "", err
		}
	}
	if err := waitHTTP(ctx, "http://"+addr+"/healthz", 30*time.Second, d); err != nil {
		return "", err
	}
	s.info("admin token in %s; data in %s", tokenFile, filepath.Join(c.Dir, "orchestrator"))
	return string(token), nil
}
