// Package demo runs the whole product end to end on one machine: the local Kubernetes test bed
// with a real node, the Outpost images built and pushed into the test bed's registry, the
// reference orchestrator, `terraform apply` (or `tofu apply`) of examples/quickstart with the
// locally built provider, which writes the registry's pull Secret and installs the agent chart
// whose pods then pull and run the agent, and two deployments that
// run in real job pods, whose live log, job pod, outputs and state Secrets it prints. Where the
// node cannot run (no root, no cgroups), or with the process executor asked for, the agent runs as
// a local process and runs the deployments as local processes instead. `make demo` and `make
// demo-down` call it, and a test runs the same flow so CI keeps it working.
package demo

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/tools/image/recipe"
)

// Config says where the demo keeps its files and which ports it uses.
type Config struct {
	// Repo is the repository root (examples/quickstart is read from it).
	Repo string
	// Dir holds everything the demo creates: binaries, logs, pid files, data. Default <repo>/.demo.
	Dir string
	// CLI is "terraform" or "tofu": the CLI that applies the quickstart (and, with the process
	// executor, runs the deployments; job pods run the job image's OpenTofu).
	CLI string
	// Executor is how the agent runs deployments: ExecutorKubernetes (the default: the chart's
	// agent pods run them in job pods on the test bed's real node) or ExecutorProcess (a local
	// agent process runs them as local processes).
	Executor string
	// TofuPath is the OpenTofu binary used when CLI is "tofu".
	TofuPath string
	// OrchestratorAddr is the orchestrator's listen address.
	OrchestratorAddr string
	// StateAddr and HealthAddr are the agent's state-backend and health listen addresses.
	StateAddr, HealthAddr string
	// Org and RunnerID name what the quickstart registers.
	Org, RunnerID string
	// Out receives the progress and results a person reads.
	Out io.Writer
	// quickstartVars are further variables of the quickstart apply (TF_VAR_<name>), for tests
	// that apply it again with a change (the key rotation).
	quickstartVars map[string]string
}

// The executors the demo can run the agent with (the agent's --executor values).
const (
	ExecutorKubernetes = "kubernetes"
	ExecutorProcess    = "process"
)

// Defaults fills in unset fields.
func (c *Config) Defaults() {
	c.Dir = cmp.Or(c.Dir, filepath.Join(c.Repo, ".demo"))
	c.CLI = cmp.Or(c.CLI, "terraform")
	c.Executor = cmp.Or(c.Executor, ExecutorKubernetes)
	c.OrchestratorAddr = cmp.Or(c.OrchestratorAddr, "127.0.0.1:8700")
	c.StateAddr = cmp.Or(c.StateAddr, "127.0.0.1:8780")
	c.HealthAddr = cmp.Or(c.HealthAddr, "127.0.0.1:8790")
	c.Org = cmp.Or(c.Org, "demo")
	c.RunnerID = cmp.Or(c.RunnerID, "quickstart")
	if c.Out == nil {
		c.Out = os.Stdout
	}
}

func (c *Config) binDir() string { return filepath.Join(c.Dir, "bin") }

// cliPath resolves the CLI binary the demo drives.
func (c *Config) cliPath() (string, error) {
	switch c.CLI {
	case "terraform":
		p, err := exec.LookPath("terraform")
		if err != nil {
			return "", fmt.Errorf("%w: terraform is not on PATH; install Terraform 1.11 or newer (https://developer.hashicorp.com/terraform/install), or run `make demo TF=tofu`", errPrereq)
		}
		return p, nil
	case "tofu":
		if c.TofuPath == "" {
			return "", fmt.Errorf("%w: no OpenTofu path given; run `make demo TF=tofu`, which builds OpenTofu from source first", errPrereq)
		}
		if _, err := os.Stat(c.TofuPath); err != nil {
			return "", fmt.Errorf("%w: OpenTofu not found at %s; run `make tools` to build it", errPrereq, c.TofuPath)
		}
		return c.TofuPath, nil
	}
	return "", fmt.Errorf("%w: TF=%q is not supported; use TF=terraform or TF=tofu", errPrereq, c.CLI)
}

func (c *Config) checkExecutor() error {
	if c.Executor != ExecutorKubernetes && c.Executor != ExecutorProcess {
		return fmt.Errorf("%w: EXECUTOR=%q is not supported; use EXECUTOR=kubernetes (job pods on a real node, the default) or EXECUTOR=process (local processes)", errPrereq, c.Executor)
	}
	return nil
}

// step prints a numbered progress line.
type stepper struct {
	out   io.Writer
	n, of int
	start time.Time
}

func (s *stepper) step(format string, args ...any) {
	s.n++
	fmt.Fprintf(s.out, "\n==> [%d/%d] %s\n", s.n, s.of, fmt.Sprintf(format, args...))
}

func (s *stepper) info(format string, args ...any) {
	fmt.Fprintf(s.out, "    %s\n", fmt.Sprintf(format, args...))
}

// buildBinaries compiles what the demo runs. The Go build cache makes repeat runs take seconds.
func buildBinaries(ctx context.Context, c *Config, s *stepper) error {
	if err := os.MkdirAll(c.binDir(), 0o755); err != nil {
		return err
	}
	targets := []buildTarget{
		{out: "terraform-provider-outpost", pkg: "."},
		{out: "outpost-orchestrator", pkg: "./cmd/outpost-orchestrator", stamp: true},
	}
	if c.Executor == ExecutorProcess {
		// Otherwise the agent runs from its image, built with the images.
		targets = append(targets, agentTarget)
	}
	return build(ctx, c, s, targets...)
}

// buildTarget is a binary the demo builds into its bin directory. A stamped one reports the
// release of the agent image the demo builds (the chart's appVersion), so the orchestrator and
// the agent it talks to name the same release (the console shows no skew); the provider stays a
// development build, which installs the chart's own versions.
type buildTarget struct {
	out, pkg string
	stamp    bool
}

// agentTarget is the agent, for the process executor.
var agentTarget = buildTarget{out: "outpost-agent", pkg: "./agent", stamp: true}

func build(ctx context.Context, c *Config, s *stepper, targets ...buildTarget) error {
	if err := os.MkdirAll(c.binDir(), 0o755); err != nil {
		return err
	}
	for _, t := range targets {
		start := time.Now()
		args := []string{"build", "-trimpath"}
		if t.stamp {
			args = append(args, "-ldflags=-X "+recipe.VersionPackage+".Version="+agentchart.AppVersion)
		}
		cmd := exec.CommandContext(ctx, "go", append(args, "-o", filepath.Join(c.binDir(), t.out), t.pkg)...)
		cmd.Dir = c.Repo
		// Static, as the release and the images are built, so the demo reuses their compiled
		// dependencies from the build cache.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w\n%s", t.pkg, err, out)
		}
		s.info("built %-28s (%s)", t.out, time.Since(start).Round(100*time.Millisecond))
	}
	return nil
}
