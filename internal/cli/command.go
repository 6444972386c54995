package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// run makes a command's RunE: it checks -o, connects, and calls fn with the command's context.
func (a *app) run(fn func(ctx context.Context, s *session, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := a.checkFormat(); err != nil {
			return err
		}
		s, err := a.connect()
		if err != nil {
			return err
		}
		return fn(cmd.Context(), s, args)
	}
}

// Argument checks that say what is expected, as usage errors (exit code 2).

// rangeArgs wants lo to hi arguments (hi < 0: no upper bound).
func rangeArgs(lo, hi int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch {
		case lo == 0 && hi == 0 && len(args) > 0:
			return &usageError{fmt.Errorf("unexpected argument %q", args[0])}
		case len(args) < lo || (hi >= 0 && len(args) > hi):
			return &usageError{fmt.Errorf("expected %s, got %d arguments", what, len(args))}
		}
		return nil
	}
}

var noArgs = rangeArgs(0, 0, "no arguments")

// oneArg wants exactly one argument.
func oneArg(what string) cobra.PositionalArgs { return rangeArgs(1, 1, what) }

// groupRun is the RunE of a command that only groups others: without arguments it shows the
// help; an argument is a mistyped command (cobra would show the help and exit 0 instead).
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return &usageError{errors.New(msg)}
}

// register adds -f and --set to a create or update command.
func (m *manifest) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&m.file, "file", "f", "", `YAML or JSON file in the API's shape ("-" reads stdin)`)
	cmd.Flags().StringArrayVar(&m.sets, "set", nil, "set a field: PATH=VALUE with a dotted PATH; VALUE @FILE reads a file (repeatable)")
	_ = cmd.MarkFlagFilename("file", "yaml", "yml", "json")
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "\n")
}

// Shell completion.

func fixedCompletion(values ...string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeIDs completes ids from the orchestrator, quietly giving up when it cannot be asked
// (no config, no connection): a completion must never print errors or hang.
func (a *app) completeIDs(ids func(context.Context, *session) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		s, err := a.connect()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
		defer cancel()
		out, err := ids(ctx, s)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

func (a *app) completeProfiles(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	_, cfg, err := a.config()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return cfg.profileNames(), cobra.ShellCompDirectiveNoFileComp
}
