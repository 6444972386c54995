package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// State operations from the command line: show, diff and rollback of the versions a state
// keeps. The orchestrator hands each to the agent that serves the state storage with its next
// poll; the agent reads the contents in the cluster and sends back names only. These commands
// wait for that result, saying where the operation stands, and exit 0 when it was done, 3 when
// it failed (the state is locked, the version is gone, no agent took it) and 1 when --timeout
// passed first.

// stateOpPoll is how often a waiting command reads the operation.
const stateOpPoll = 300 * time.Millisecond

// defaultStateOpTimeout covers the orchestrator's own expiry of an operation nobody takes.
const defaultStateOpTimeout = 150 * time.Second

func (a *app) stateShowCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "show STORAGE KEY [GENERATION]",
		Short: "Name the resources and outputs of a version of a state (the current one by default); never a value",
		Long: `Asks the agent that serves the state storage to read a version of the state in the cluster
and name what it holds: resource instance addresses and output names (sensitive ones marked).
No value leaves the cluster.`,
		Example: "  outpost state show eu-1-states apps/web\n  outpost state show eu-1-states apps/web 12",
		Args:    rangeArgs(2, 3, "a state storage id, a state key and optionally a generation"),
		RunE: a.run(func(ctx context.Context, s *session, args []string) error {
			in := api.StateOperationRequest{StateKey: args[1], StateOperationInput: api.StateOperationInput{Kind: api.StateOperationShow}}
			if len(args) == 3 {
				g, err := generationArg(args[2])
				if err != nil {
					return err
				}
				in.Generation = g
			}
			return a.stateOperation(ctx, s, args[0], in, timeout, func(w io.Writer, op *api.StateOperation) {
				c := op.Show
				fmt.Fprintf(w, "State %s generation %d (serial %d, lineage %s): %d resource instances, %d outputs\n",
					op.StateKey, c.Generation, c.Serial, orDash(c.Lineage), len(c.Resources), len(c.Outputs))
				for _, r := range c.Resources {
					fmt.Fprintf(w, "  %s\n", r)
				}
				if len(c.Outputs) > 0 {
					fmt.Fprintln(w, "Outputs (values not shown):")
				}
				for _, o := range c.Outputs {
					fmt.Fprintf(w, "  %s%s\n", o.Name, map[bool]string{true: " (sensitive)"}[o.Sensitive])
				}
			})
		}),
	}
	cmd.Flags().DurationVar(&timeout, "timeout", defaultStateOpTimeout, "how long to wait for the agent's answer")
	return cmd
}

func (a *app) stateDiffCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "diff STORAGE KEY FROM TO",
		Short: "Name the resources and outputs added, removed and changed between two versions of a state",
		Long: `Asks the agent that serves the state storage to compare two versions of the state in the
cluster (generations, as ` + "`outpost state versions`" + ` lists them) and name what differs. No value
leaves the cluster.`,
		Example: "  outpost state diff eu-1-states apps/web 11 12",
		Args:    rangeArgs(4, 4, "a state storage id, a state key and two generations"),
		RunE: a.run(func(ctx context.Context, s *session, args []string) error {
			from, err := generationArg(args[2])
			if err != nil {
				return err
			}
			to, err := generationArg(args[3])
			if err != nil {
				return err
			}
			in := api.StateOperationRequest{StateKey: args[1], StateOperationInput: api.StateOperationInput{Kind: api.StateOperationDiff, Generation: from, ToGeneration: to}}
			return a.stateOperation(ctx, s, args[0], in, timeout, func(w io.Writer, op *api.StateOperation) {
				d := op.Diff
				fmt.Fprintf(w, "State %s from generation %d (serial %d) to generation %d (serial %d): %d added, %d removed, %d changed\n",
					op.StateKey, d.From, d.FromSerial, d.To, d.ToSerial, len(d.Added), len(d.Removed), len(d.Changed))
				for _, part := range []struct {
					mark, what string
					names      []string
				}{{"+", "", d.Added}, {"-", "", d.Removed}, {"~", "", d.Changed},
					{"+", "output ", d.OutputsAdded}, {"-", "output ", d.OutputsRemoved}, {"~", "output ", d.OutputsChanged}} {
					for _, n := range part.names {
						fmt.Fprintf(w, "  %s %s%s\n", part.mark, part.what, n)
					}
				}
			})
		}),
	}
	cmd.Flags().DurationVar(&timeout, "timeout", defaultStateOpTimeout, "how long to wait for the agent's answer")
	return cmd
}

func (a *app) stateRollbackCommand() *cobra.Command {
	var timeout time.Duration
	var reason string
	cmd := &cobra.Command{
		Use:   "rollback STORAGE KEY GENERATION --reason TEXT",
		Short: "Make an old version of a state the current one again (a new serial, under the state's lock)",
		Long: `Asks the agent that serves the state storage to write an old version of the state back as the
newest: the next serial, written under the state's lock, so the next plan or apply starts from
it. A locked state is refused, naming the lock's holder. Who asked (the token's name and id)
and the reason are recorded with the operation and shown by ` + "`outpost state versions`" + `.`,
		Example: `  outpost state rollback eu-1-states apps/web 11 --reason "apply of dep-x broke the load balancer"`,
		Args:    rangeArgs(3, 3, "a state storage id, a state key and a generation"),
		RunE: a.run(func(ctx context.Context, s *session, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return &usageError{errors.New("--reason is required: it is recorded with the rollback")}
			}
			gen, err := generationArg(args[2])
			if err != nil {
				return err
			}
			in := api.StateOperationRequest{StateKey: args[1], StateOperationInput: api.StateOperationInput{Kind: api.StateOperationRollback, Generation: gen, Reason: reason}}
			return a.stateOperation(ctx, s, args[0], in, timeout, func(w io.Writer, op *api.StateOperation) {
				fmt.Fprintf(w, "Rolled state %s back to generation %d: written as generation %d, serial %d.\n",
					op.StateKey, op.Generation, op.Rollback.Generation, op.Rollback.Serial)
			})
		}),
	}
	cmd.Flags().DurationVar(&timeout, "timeout", defaultStateOpTimeout, "how long to wait for the agent's answer")
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; recorded with the rollback)")
	return cmd
}

func (a *app) stateOperationCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "operation ID",
		Short:   "Show a state operation: where it stands, who asked, and its result",
		Example: "  outpost state operation sop-abc123",
		Args:    idArgs(1, 1, "a state operation id", "state operation id"),
		RunE: a.run(func(ctx context.Context, s *session, args []string) error {
			op, err := s.GetStateOperation(ctx, args[0])
			if err != nil {
				return err
			}
			return a.print(op, func(w io.Writer) { a.describeStateOperation(w, op) })
		}),
	}
}

// stateOperation asks for an operation, waits for its end (saying on stderr where it stands),
// then prints it with human (or as JSON/YAML with -o).
func (a *app) stateOperation(ctx context.Context, s *session, storage string, in api.StateOperationRequest, timeout time.Duration, human func(io.Writer, *api.StateOperation)) error {
	if err := in.Validate(); err != nil {
		return &usageError{err}
	}
	op, err := s.CreateStateOperation(ctx, storage, in)
	if err != nil {
		return notFound(err, "state storage", storage, s.Org(), "outpost state-storage list")
	}
	fmt.Fprintf(a.env.Stderr, "State operation %s (%s of %s) queued; waiting for the agent that serves state storage %s.\n", op.ID, op.Kind, op.StateKey, storage)
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(stateOpPoll)
	defer t.Stop()
	status := op.Status
	for !op.Status.Terminal() {
		select {
		case <-wctx.Done():
			return fmt.Errorf("state operation %s is still %s after %s; see where it stands with `outpost state operation %s`", op.ID, op.Status, timeout, op.ID)
		case <-t.C:
		}
		next, err := s.GetStateOperation(wctx, op.ID)
		switch {
		case err != nil && wctx.Err() != nil:
			continue // the timeout says it
		case err != nil:
			return err
		}
		op = next
		if op.Status != status && op.Status == api.StateOperationRunning {
			fmt.Fprintf(a.env.Stderr, "Running on the agent of runner %s.\n", op.RunnerID)
		}
		status = op.Status
	}
	if op.Status == api.StateOperationFailed {
		if a.machine() {
			if err := a.print(op, nil); err != nil {
				return err
			}
		}
		return &exitError{code: ExitFailed, err: fmt.Errorf("state operation %s failed (%s): %s", op.ID, op.Error.Code, op.Error.Message)}
	}
	return a.print(op, func(w io.Writer) { human(w, op) })
}

// describeStateOperation prints an operation's record.
func (a *app) describeStateOperation(w io.Writer, op *api.StateOperation) {
	now := a.env.Now()
	rows := [][2]string{
		{"ID", op.ID}, {"Kind", string(op.Kind)}, {"State", op.StateStorageID + " " + op.StateKey},
		{"Generation", genText(op.Generation)}, {"To generation", genText(op.ToGeneration)},
		{"Requested by", op.RequestedBy}, {"Reason", op.Reason}, {"Status", string(op.Status)},
		{"Runner", op.RunnerID}, {"Created", stamp(now, &op.CreatedAt)}, {"Ended", stamp(now, op.EndedAt)},
	}
	if op.Error != nil {
		rows = append(rows, [2]string{"Error", string(op.Error.Code) + ": " + op.Error.Message})
	}
	if op.Rollback != nil {
		rows = append(rows, [2]string{"Wrote", fmt.Sprintf("generation %d, serial %d", op.Rollback.Generation, op.Rollback.Serial)})
	}
	details(w, rows)
}

func genText(g int64) string {
	if g == 0 {
		return ""
	}
	return strconv.FormatInt(g, 10)
}

// generationArg parses a GENERATION argument.
func generationArg(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, &usageError{fmt.Errorf("a generation is a positive number (outpost state versions lists them), got %q", s)}
	}
	return n, nil
}
