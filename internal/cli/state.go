package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// The states of kubernetes state storages, as their agents report them: each state's kept
// versions (metadata only) and its lock holder. The contents stay in the cluster: show, diff
// and rollback (state_ops.go) are run there by the agent.

func (a *app) stateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Inspect the states of a state storage: versions kept in the cluster, lock holders, drift",
		Long: `The agent that serves a kubernetes state storage reports, for each state, the versions it
keeps in the cluster (serial, lineage, size, resource count, the deployment and attempt that
wrote it, when) and who holds its lock (deployment, attempt, job pod). Never the contents: to
show, diff or roll back versions, run ` + "`outpost-agent state`" + ` in the cluster.

A state key whose last drift check (` + "`outpost schedule`" + `) found changes made outside
Terraform is listed as DRIFTED, in any state storage; a later check without changes clears it.`,
		GroupID: "deploy",
		RunE:    groupRun,
	}
	cmd.AddCommand(a.stateListCommand(), a.stateVersionsCommand(), a.stateLockCommand(),
		a.stateShowCommand(), a.stateDiffCommand(), a.stateRollbackCommand(), a.stateOperationCommand())
	return cmd
}

func (a *app) stateListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "list STORAGE",
		Short:   "List the states of a state storage with their current version, lock holder and drift",
		Example: "  outpost state list eu-1-states",
		Args:    oneArg("a state storage id"),
		RunE: a.run(func(ctx context.Context, s *session, args []string) error {
			list, err := s.ListStates(ctx, args[0])
			if err != nil {
				return notFound(err, "state storage", args[0], s.Org(), "outpost state-storage list")
			}
			now := a.env.Now()
			return a.print(api.List[api.State]{Items: list}, func(w io.Writer) {
				if len(list) == 0 {
					fmt.Fprintln(w, "No states reported yet: the agent reports a state when a deployment writes or locks it.")
					return
				}
				rows := [][]string{{"STATE KEY", "SERIAL", "VERSIONS", "RESOURCES", "SIZE", "WRITTEN", "LOCKED BY", "DRIFT"}}
				for _, st := range list {
					serial, res, sz, written := "-", "-", "-", "-"
					if len(st.Versions) > 0 {
						v := st.Versions[0]
						serial, res, sz, written = strconv.FormatInt(v.Serial, 10), strconv.FormatInt(v.Resources, 10), size(v.Size), ago(now, &v.WrittenAt)
					}
					rows = append(rows, []string{st.StateKey, serial, strconv.Itoa(len(st.Versions)), res, sz, written, lockHolder(now, st.Lock), checkText(now, st.Drift)})
				}
				table(w, rows)
			})
		}),
	}
}

func (a *app) stateVersionsCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "versions STORAGE KEY",
		Short:   "List the versions of a state kept in the cluster, newest first, and who rolled it back",
		Example: "  outpost state versions eu-1-states apps/web",
		Args:    rangeArgs(2, 2, "a state storage id and a state key"),
		RunE: a.run(func(ctx context.Context, s *session, args []string) error {
			st, err := s.GetState(ctx, args[0], args[1])
			if err != nil {
				return err
			}
			rollbacks, err := s.ListStateOperations(ctx, args[0], args[1], api.StateOperationRollback)
			if err != nil {
				return err
			}
			now := a.env.Now()
			return a.print(st, func(w io.Writer) {
				rows := [][]string{{"GENERATION", "SERIAL", "RESOURCES", "SIZE", "WRITTEN BY", "WRITTEN", "HOW"}}
				for _, v := range st.Versions {
					rows = append(rows, []string{strconv.FormatInt(v.Generation, 10), strconv.FormatInt(v.Serial, 10), strconv.FormatInt(v.Resources, 10),
						size(v.Size), writtenBy(v), ago(now, &v.WrittenAt), oneLine(orDash(v.Source), 60)})
				}
				table(w, rows)
				if st.Lock != nil {
					fmt.Fprintf(w, "\nLocked by %s.\n", lockHolder(now, st.Lock))
				}
				if len(rollbacks) > 0 {
					fmt.Fprintln(w, "\nRollbacks (outpost state operation ID shows one):")
					rows := [][]string{{"OPERATION", "TO GENERATION", "STATUS", "ASKED BY", "WHEN", "REASON"}}
					for _, op := range rollbacks {
						status := string(op.Status)
						if op.Rollback != nil {
							status += fmt.Sprintf(" (wrote generation %d)", op.Rollback.Generation)
						} else if op.Error != nil {
							status += " (" + string(op.Error.Code) + ")"
						}
						rows = append(rows, []string{op.ID, strconv.FormatInt(op.Generation, 10), status, op.RequestedBy, ago(now, &op.CreatedAt), oneLine(op.Reason, 60)})
					}
					table(w, rows)
				}
			})
		}),
	}
}

func (a *app) stateLockCommand() *cobra.Command {
	return a.onState(&cobra.Command{
		Use:     "lock STORAGE KEY",
		Short:   "Show who holds the lock of a state: deployment, attempt and job pod",
		Example: "  outpost state lock eu-1-states apps/web",
	}, func(st *api.State) any { return st.Lock }, func(w io.Writer, now time.Time, st *api.State) {
		l := st.Lock
		if b := st.LastLockBreak; b != nil {
			defer fmt.Fprintf(w, "\nLast broken %s by %s (%s), holder %s%s.\n", ago(now, &b.At), b.By, b.Reason, b.Holder, map[bool]string{true: ", while it was live"}[b.Live])
		}
		if l == nil {
			fmt.Fprintf(w, "State %s is not locked (as reported %s).\n", st.StateKey, ago(now, &st.ReportedAt))
			return
		}
		details(w, [][2]string{
			{"State key", st.StateKey},
			{"Deployment", l.DeploymentID},
			{"Attempt", attemptText(l.Attempt)},
			{"Pod", l.Pod},
			{"Holder", l.Holder},
			{"Operation", l.Operation},
			{"Acquired", stamp(now, &l.AcquiredAt)},
			{"Expires", stamp(now, &l.ExpiresAt) + " unless renewed (the agent renews it while the attempt runs)"},
			{"Reported", stamp(now, &st.ReportedAt)},
		})
	})
}

// onState finishes a command on one state (STORAGE KEY): it reads what the agent reported and
// prints machine shows of it as JSON or YAML, or human's table.
func (a *app) onState(cmd *cobra.Command, machine func(*api.State) any, human func(w io.Writer, now time.Time, st *api.State)) *cobra.Command {
	cmd.Args = rangeArgs(2, 2, "a state storage id and a state key")
	cmd.RunE = a.run(func(ctx context.Context, s *session, args []string) error {
		st, err := s.GetState(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		now := a.env.Now()
		return a.print(machine(st), func(w io.Writer) { human(w, now, st) })
	})
	return cmd
}

// lockHolder names a lock's holder in one cell: the attempt and its pod, or "-".
func lockHolder(now time.Time, l *api.StateLock) string {
	if l == nil {
		return "-"
	}
	who := l.Holder
	if l.DeploymentID != "" {
		who = l.DeploymentID + " attempt " + strconv.Itoa(l.Attempt)
	}
	if l.Pod != "" {
		who += " (pod " + l.Pod + ")"
	}
	if now.After(l.ExpiresAt) {
		who += ", expired " + ago(now, &l.ExpiresAt)
	}
	return who
}

func writtenBy(v api.StateVersion) string {
	if v.DeploymentID == "" {
		return "operator"
	}
	return v.DeploymentID + "/" + strconv.Itoa(v.Attempt)
}

func attemptText(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}
