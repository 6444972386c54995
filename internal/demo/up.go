package demo

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// Up runs the demo. It is idempotent: parts already running are reused, the quickstart apply
// converges, and each run submits two fresh deployments.
func Up(ctx context.Context, c Config) error {
	c.Defaults()
	s := &stepper{out: c.Out, of: 8, start: time.Now()}
	cli, err := c.cliPath()
	if err != nil {
		return err
	}
	if err := checkPorts(ctx, c); err != nil {
		return err
	}

	s.step("Building the provider, orchestrator, agent and test-bed launcher (about 3 min on a cold 2-core machine, seconds when cached)")
	if err := buildBinaries(ctx, &c, s); err != nil {
		return err
	}

	s.step("Starting the local Kubernetes test bed (etcd, kube-apiserver, controller-manager, scheduler, kwok; about 10 s)")
	kubeconfig, err := startTestbed(ctx, &c, s)
	if err != nil {
		return err
	}

	s.step("Starting the reference orchestrator on http://%s", c.OrchestratorAddr)
	token, err := startOrchestrator(ctx, &c, s)
	if err != nil {
		return err
	}
	apiURL := "http://" + c.OrchestratorAddr
	admin, err := client.NewAdminClient(apiURL, c.Org, token)
	if err != nil {
		return err
	}

	s.step("Applying examples/quickstart with %s and the locally built provider (key pair, state storage, runner, agent chart)", c.CLI)
	outputs, err := applyQuickstart(ctx, &c, s, cli, kubeconfig, apiURL, token)
	if err != nil {
		return err
	}

	s.step("Running the agent as a local process (process executor; state in the cluster's Secrets)")
	if err := startAgent(ctx, &c, s, cli, kubeconfig, apiURL, outputs); err != nil {
		return err
	}
	if err := waitConnected(ctx, admin, c.RunnerID, 60*time.Second, c, s); err != nil {
		return err
	}

	s.step("Submitting a deployment (apply) to runner %q and following its live log", c.RunnerID)
	first, err := runDeployment(ctx, &c, s, admin, "hello from outpost")
	if err != nil {
		return err
	}
	if err := printOutputs(ctx, s, admin, first); err != nil {
		return err
	}

	s.step("The deployment's state, in Secrets of namespace %q", outputs.StateNamespace)
	if err := printStateSecrets(ctx, s, kubeconfig, outputs.StateNamespace); err != nil {
		return err
	}

	s.step("Submitting the same deployment again: the state is read back from the cluster, so nothing changes")
	second, err := runDeployment(ctx, &c, s, admin, "hello from outpost")
	if err != nil {
		return err
	}
	if !second.noChanges {
		return fmt.Errorf("the second deployment of the same state planned changes; its log is above")
	}
	s.info("second deployment %s: %s, no changes", second.dep.ID, second.dep.Status)

	printLookAround(&c, kubeconfig, apiURL)
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

func startTestbed(ctx context.Context, c *Config, s *stepper) (string, error) {
	dir := filepath.Join(c.Dir, "testbed")
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir(), "outpost-testbed"), "up", "--dir", dir)
	cmd.Dir = c.Repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("start the test bed (if binaries are missing, run `make testbed-build`): %w\n%s", err, out)
	}
	s.info("kubeconfig: %s", kubeconfig)
	return kubeconfig, nil
}

func startOrchestrator(ctx context.Context, c *Config, s *stepper) (string, error) {
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
			"--listen", c.OrchestratorAddr,
			"--data-dir", filepath.Join(c.Dir, "orchestrator"),
			"--external-url", "http://"+c.OrchestratorAddr)
		// The token goes through the environment, not argv, so `ps` does not show it.
		cmd.Env = append(os.Environ(), "OUTPOST_ORCHESTRATOR_ADMIN_TOKEN="+string(token))
		if err := d.start(cmd); err != nil {
			return "", err
		}
	}
	if err := waitHTTP(ctx, "http://"+c.OrchestratorAddr+"/healthz", 30*time.Second, d); err != nil {
		return "", err
	}
	s.info("admin token in %s; data in %s", tokenFile, filepath.Join(c.Dir, "orchestrator"))
	return string(token), nil
}

// quickstartOutputs are the outputs of examples/quickstart the demo uses.
type quickstartOutputs struct {
	AgentNamespace   string
	PrivateKeySecret string
	StateNamespace   string
	Fingerprint      string
}

func applyQuickstart(ctx context.Context, c *Config, s *stepper, cli, kubeconfig, apiURL, token string) (*quickstartOutputs, error) {
	work := filepath.Join(c.Dir, "quickstart-"+c.CLI)
	if err := copyTF(filepath.Join(c.Repo, "examples", "quickstart"), work); err != nil {
		return nil, err
	}
	rc, err := writeCLIConfig(c)
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"TF_CLI_CONFIG_FILE="+rc,
		"TF_IN_AUTOMATION=1",
		"OUTPOST_API_URL="+apiURL,
		"OUTPOST_ORG_ID="+c.Org,
		"OUTPOST_TOKEN="+token,
		"KUBE_CONFIG_PATH="+kubeconfig,
		"TF_VAR_runner_id="+c.RunnerID,
		// The chart is installed for real, but its Pods cannot run without a container runtime;
		// the demo runs the agent locally instead and waits for it below.
		"TF_VAR_wait_for_connection=false",
	)
	run := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, cli, args...)
		cmd.Dir, cmd.Env = work, env
		return cmd.Output()
	}
	cmd := exec.CommandContext(ctx, cli, "apply", "-auto-approve", "-input=false", "-no-color")
	cmd.Dir, cmd.Env = work, env
	if err := streamCommand(cmd, c.Out, "    | "); err != nil {
		return nil, fmt.Errorf("%s apply of examples/quickstart failed (output above): %w", c.CLI, err)
	}
	raw, err := run("output", "-json")
	if err != nil {
		return nil, fmt.Errorf("%s output: %w", c.CLI, err)
	}
	var outs map[string]struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &outs); err != nil {
		return nil, fmt.Errorf("parse %s output -json: %w", c.CLI, err)
	}
	str := func(name string) string {
		var v string
		_ = json.Unmarshal(outs[name].Value, &v)
		return v
	}
	o := &quickstartOutputs{
		AgentNamespace:   str("agent_namespace"),
		PrivateKeySecret: str("private_key_secret"),
		StateNamespace:   str("state_namespace"),
		Fingerprint:      str("key_fingerprint"),
	}
	if o.AgentNamespace == "" || o.PrivateKeySecret == "" || o.StateNamespace == "" {
		return nil, fmt.Errorf("examples/quickstart must output agent_namespace, private_key_secret and state_namespace; got %s", raw)
	}
	state, err := os.ReadFile(filepath.Join(work, "terraform.tfstate"))
	if err != nil {
		return nil, fmt.Errorf("read the quickstart's state: %w", err)
	}
	if strings.Contains(string(state), "PRIVATE KEY") {
		return nil, errors.New("the quickstart's Terraform state contains a private key; it must stay in the cluster Secret only")
	}
	s.info("runner key %s; the private key is only in Secret %s/%s (the Terraform state holds no private key: checked)", o.Fingerprint, o.AgentNamespace, o.PrivateKeySecret)
	return o, nil
}

// writeCLIConfig writes a CLI configuration whose dev overrides point both CLIs' registry
// addresses of the provider at the freshly built binary.
func writeCLIConfig(c *Config) (string, error) {
	rc := filepath.Join(c.Dir, "cli.tfrc")
	overrides := fmt.Sprintf(`provider_installation {
  dev_overrides {
    "registry.terraform.io/outpost-dev/outpost" = %q
    "registry.opentofu.org/outpost-dev/outpost" = %q
  }
  direct {}
}
`, c.binDir(), c.binDir())
	if err := os.WriteFile(rc, []byte(overrides), 0o644); err != nil {
		return "", err
	}
	return rc, nil
}

// copyTF copies the *.tf files of src into dst, leaving dst's state and .terraform alone.
func copyTF(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".tf") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// streamCommand runs cmd, copying its combined output line by line with a prefix.
func streamCommand(cmd *exec.Cmd, out io.Writer, prefix string) error {
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			fmt.Fprintln(out, prefix+sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Wait()
	pw.Close()
	<-done
	return err
}
