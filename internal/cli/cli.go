// Package cli is the `outpost` command line: a client of the orchestrator's admin API for
// people and scripts. It registers runners and state storages from YAML or JSON files, deploys a
// local directory (packed as an inline source) or a git source, follows a deployment's log live
// and exits with its result, and reads deployments, their logs, outputs and events.
//
// Run is the whole command line; cmd/outpost only wires it to the process. Other programs (the
// demo, tests) call Run in-process with their own Env, or the package's Deploy and Follow.
package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

// Exit codes. A command that follows a deployment exits with the deployment's result.
const (
	// ExitOK: the command did what was asked; a followed deployment succeeded.
	ExitOK = 0
	// ExitError: the command failed (the orchestrator refused, bad input, no connection).
	ExitError = 1
	// ExitUsage: wrong flags or arguments.
	ExitUsage = 2
	// ExitFailed: the followed deployment failed (the CLI or its Job failed, or it timed out).
	ExitFailed = 3
	// ExitCanceled: the followed deployment was canceled.
	ExitCanceled = 4
	// ExitLost: the followed deployment was lost (its agent vanished while it applied).
	ExitLost = 5
	// ExitInterrupted: interrupted (Ctrl-C) before the work ended; a followed deployment was
	// left running (detached).
	ExitInterrupted = 130
)

// Env is what one run of the command line reads and writes: the process's standard streams and
// environment, or a test's.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads the environment (OUTPOST_*, HOME, XDG_CONFIG_HOME).
	Getenv func(string) string
	// Interrupts delivers Ctrl-C (and SIGTERM). While a deployment is followed they ask whether
	// to cancel it or detach; otherwise they stop the command. Nil: never interrupted.
	Interrupts <-chan os.Signal
	// Now is the clock of relative times ("3m ago"); nil is time.Now.
	Now func() time.Time
}

// exitError ends a command with a given exit code; a nil err prints nothing more.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageError marks a mistake in the flags or arguments.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// app is the state of one run that the commands share.
type app struct {
	env    Env
	global globalFlags
	intr   *interrupts
	// stdin is the one buffered reader of env.Stdin (answers to questions).
	stdin *bufio.Reader
	// settings are the connection settings once a command resolved them (for messages).
	settings *settings
	// warned are the files already warned about (warnIfShared).
	warned map[string]bool
}

type globalFlags struct {
	configFile, profile, apiURL, org, output string
	insecureAllowHTTP                        bool
}

// Run runs the command line with args (without the program name) and returns the exit code.
func Run(ctx context.Context, args []string, env Env) int {
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := &app{env: env, intr: newInterrupts(env.Interrupts, cancel)}
	defer a.intr.stop()

	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	// An error before a command's RunE is about the flags or arguments (exit code 2).
	ran := false
	markRunning(root, func() { ran = true })
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(env.Stderr, "Error: "+a.explain(ee.err))
		}
		return ee.code
	}
	var ue *usageError
	if !ran || errors.As(err, &ue) {
		fmt.Fprintf(env.Stderr, "Error: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return ExitUsage
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		fmt.Fprintln(env.Stderr, "Interrupted.")
		return ExitInterrupted
	}
	fmt.Fprintln(env.Stderr, "Error: "+a.explain(err))
	return ExitError
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "outpost",
		Short: "Drive an Outpost orchestrator: runners, state storages and deployments",
		Long: `outpost drives an Outpost orchestrator: it registers runners and state storages, deploys a
local directory or a git source on a runner, follows the deployment's log live and exits with its
result, and reads deployments, their logs, outputs and events.

Where to connect comes from, in this order: the flags --api-url and --org; the environment
(OUTPOST_API_URL, OUTPOST_ORG_ID, OUTPOST_TOKEN or OUTPOST_TOKEN_FILE); the profile chosen with
--profile or OUTPOST_PROFILE, else the current profile of the config file. See 'outpost config --help'.

Exit codes: 0 done (a followed deployment succeeded); 1 error; 2 wrong usage; 3 the deployment
failed; 4 it was canceled; 5 it was lost; 130 interrupted, or detached from a deployment that runs on.`,
		Example: `  outpost config set api_url https://outpost.example.com
  outpost config set org acme
  outpost config set token            # reads the token from stdin, never from argv
  outpost runner create -f runner.yaml
  outpost deploy ./infra --runner eu-1 --state-key apps/web --follow`,
		Version:       version.Version,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetVersionTemplate("outpost {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	f := root.PersistentFlags()
	f.StringVar(&a.global.configFile, "config", "", "config file (default $OUTPOST_CONFIG, else ~/.config/outpost/config.yaml)")
	f.StringVar(&a.global.profile, "profile", "", "profile of the config file to use (default $OUTPOST_PROFILE, else the current profile)")
	f.StringVar(&a.global.apiURL, "api-url", "", "orchestrator URL (overrides OUTPOST_API_URL and the profile)")
	f.StringVar(&a.global.org, "org", "", "organisation (overrides OUTPOST_ORG_ID and the profile)")
	f.StringVarP(&a.global.output, "output", "o", "table", "output format: table, json or yaml")
	f.BoolVar(&a.global.insecureAllowHTTP, "insecure-allow-http", false,
		"allow a plain http:// orchestrator URL that is not loopback: the token then crosses the network unencrypted (default $"+envInsecureAllowHTTP+")")
	_ = root.RegisterFlagCompletionFunc("output", fixedCompletion("table", "json", "yaml"))
	_ = root.RegisterFlagCompletionFunc("profile", a.completeProfiles)
	root.AddGroup(&cobra.Group{ID: "deploy", Title: "Deployments:"}, &cobra.Group{ID: "register", Title: "Runners and state storages:"},
		&cobra.Group{ID: "setup", Title: "Set-up:"})
	root.AddCommand(a.deployCommand(), a.deploymentCommand(), a.stateCommand(), a.scheduleCommand(), runnerResource().group(a), stateStorageResource().group(a), a.configCommand())
	root.SetHelpCommandGroupID("setup")
	root.SetCompletionCommandGroupID("setup")
	return root
}

// markRunning wraps the RunE of every command under c so that it calls mark first.
func markRunning(c *cobra.Command, mark func()) {
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			mark()
			return run(cmd, args)
		}
	}
	for _, sub := range c.Commands() {
		markRunning(sub, mark)
	}
}

// interrupts routes Ctrl-C: to the follower while a deployment is followed, else it stops the
// command by canceling its context.
type interrupts struct {
	mu      sync.Mutex
	handler chan os.Signal
	done    chan struct{}
}

func newInterrupts(in <-chan os.Signal, cancel context.CancelFunc) *interrupts {
	i := &interrupts{done: make(chan struct{})}
	if in == nil {
		return i
	}
	go func() {
		for {
			select {
			case <-i.done:
				return
			case sig := <-in:
				i.mu.Lock()
				h := i.handler
				i.mu.Unlock()
				if h == nil {
					cancel()
					continue
				}
				select {
				case h <- sig:
				default: // the handler is busy with an earlier one
				}
			}
		}
	}()
	return i
}

// take makes the interrupts come to the returned channel until release is called.
func (i *interrupts) take() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 1)
	i.mu.Lock()
	i.handler = ch
	i.mu.Unlock()
	return ch, func() {
		i.mu.Lock()
		i.handler = nil
		i.mu.Unlock()
	}
}

func (i *interrupts) stop() { close(i.done) }
