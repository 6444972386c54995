package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// insecureHTTPEnv is the provider's opt-in to a plain-http orchestrator URL whose host is not
// loopback (the chart's is insecureAllowHttp).
const insecureHTTPEnv = "OUTPOST_INSECURE_ALLOW_HTTP"

// quickstartOutputs are the outputs of examples/quickstart the demo uses.
type quickstartOutputs struct {
	AgentNamespace   string
	PrivateKeySecret string
	StateNamespace   string
	Fingerprint      string
}

// applyQuickstart applies examples/quickstart; registry, when not nil, is where the agent pods
// and job pods pull the images from, with the login the provider writes into a pull Secret.
func applyQuickstart(ctx context.Context, c *Config, s *stepper, cli, kubeconfig, apiURL, token string, registry *testbed.Registry) (*quickstartOutputs, error) {
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
	)
	for k, v := range c.quickstartVars {
		env = append(env, "TF_VAR_"+k+"="+v)
	}
	if c.Executor == ExecutorKubernetes {
		// The agent pods reach the orchestrator at the test bed's host address, on a veth that
		// leads only into the node's network namespace: plain http that never leaves this
		// machine, which the provider, the agent and its job runner each refuse unless told.
		env = append(env, insecureHTTPEnv+"=true", "TF_VAR_agent_values=insecureAllowHttp: true")
	}
	if registry != nil {
		// The login goes through the environment, not argv, so `ps` does not show it.
		env = append(env, "TF_VAR_image_registry="+registry.Host, "TF_VAR_image_pull_secret_name="+pullSecretName,
			"TF_VAR_image_pull_secret_docker_config_json="+string(registry.DockerConfigJSON(registry.Username, registry.Password)))
	}
	if c.Executor == ExecutorProcess {
		// The chart is installed for real, but its pods are simulated (no real node); the demo
		// runs the agent as a local process instead and waits for it after the apply.
		env = append(env, "TF_VAR_wait_for_connection=false")
	}
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
