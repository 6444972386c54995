// Command outpost-agent is Outpost's in-cluster agent. Without a subcommand it runs the agent:
// it connects out to the orchestrator, long-polls for work, runs each deployment as a Kubernetes
// Job (or a local process), reports the outcome, and serves the state backend and health.
//
//	outpost-agent [flags]      run the agent (a --config file, OUTPOST_* env and flags, see --help)
//	outpost-agent job          the entrypoint of a Job's main container (runs Terraform/OpenTofu)
//	outpost-agent inject DIR   copies this binary to DIR: the init container of every job pod
//	outpost-agent state        administer the states kept in Secrets: list, history, get, restore, unlock, import
//	outpost-agent check-connection
//	                           passes when the agent recorded a recent successful poll on its Lease (the chart's helm test)
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/config"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/connection"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/process"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/inject"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobrun"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statecmd"
)

// Exit codes of the agent itself.
const (
	exitOK          = 0
	exitRuntime     = 1
	exitConfigError = 2
)

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch picks the subcommand. Subcommands are words, flags start with '-', so a flag never
// shadows a subcommand.
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "job":
			// The job runner handles SIGTERM itself (it must pass it on to the CLI and keep
			// streaming logs), so it gets a context that signals do not cancel.
			return jobrun.Main(context.Background(), args[1:], stdout, stderr)
		case "inject":
			return inject.Main(args[1:], stdout, stderr)
		case process.WrapperCommand:
			return process.WrapperMain(args[1:])
		case "state":
			return statecmd.Main(args[1:], stateDefaults(), stdout, stderr)
		case "check-connection":
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return connection.Main(ctx, args[1:], stdout, stderr)
		case "version", "--version":
			fmt.Fprintln(stdout, version())
			return exitOK
		}
	}
	return runAgent(args, stderr)
}

// stateDefaults are the state settings of the agent's own configuration (its file and
// environment), so `outpost-agent state` inside the agent's pod needs no flags; none when the
// configuration does not parse (the command's flags still work).
func stateDefaults() statecmd.Defaults {
	cfg, err := config.Parse(nil, os.Getenv, io.Discard)
	if err != nil {
		return statecmd.Defaults{}
	}
	return statecmd.Defaults{Namespace: cfg.State.Namespace, OrgID: cfg.OrgID, EncryptionKeyFile: cfg.State.EncryptionKeyFile,
		KeepVersions: cfg.State.Versions.Keep, MaxVersionAge: cfg.State.Versions.MaxAge.Duration}
}
