package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/sourcearchive"
)

// Schedules of drift checks: at each cron time the orchestrator queues a plan with
// -detailed-exitcode of the schedule's source, variables and state key; a plan that finds
// changes marks the state key drifted (shown by `outpost state list` and `schedule get`).

const scheduleLong = `A schedule runs a drift check of one state key at its cron times, in UTC: a plan deployment
(marked drift_check) with -detailed-exitcode, of the schedule's source and variables. A plan that
finds changes (exit code 2; the check still succeeds) marks the state key drifted, with a summary
of what differs by name (resource addresses, actions, attribute names, never values); a later
check without changes clears the mark. ` + "`outpost state list`" + ` shows the mark, ` + "`outpost schedule get`" + `
the last check, and the orchestrator's metric outpost_orchestrator_drifted_states counts drifted
state keys per organisation.

Each period queues one check, however many orchestrator replicas run; a period whose previous
check has not ended queues none; periods missed while no orchestrator ran fire once.`

func (a *app) scheduleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "schedule",
		Aliases: []string{"schedules"},
		Short:   "Schedule drift checks of a state key (plans that find changes made outside Terraform)",
		Long:    scheduleLong,
		GroupID: "deploy",
		RunE:    groupRun,
	}
	cmd.AddCommand(a.scheduleCreateCommand(), a.scheduleListCommand(), a.scheduleGetCommand(), a.scheduleDeleteCommand())
	return cmd
}

type scheduleOptions struct {
	git, ref, path, runner, stateKey, cron, onDrift string
	vars, varFiles                                  []string
	disabled                                        bool
	timeout                                         time.Duration
}

func (a *app) scheduleCreateCommand() *cobra.Command {
	var o scheduleOptions
	cmd := &cobra.Command{
		Use:   "create ID [DIR] --runner R --state-key K --cron EXPR [--git URL] [--var NAME=VALUE ...]",
		Short: "Create a schedule of drift checks of a directory or a git source",
		Long: scheduleLong + `

DIR is packed as for ` + "`outpost deploy`" + ` and kept with the schedule: every check plans that
packed source (create the schedule again to change it). With --git each check fetches the source.

--cron takes five fields (minute hour day-of-month month day-of-week), six with seconds first,
or @hourly, @daily, @every 30m; all in UTC. --on-drift queue_apply makes each check a saved
plan (a runner with a kubernetes state storage): one that finds drift is kept for review and the
schedule's last message names it (outpost deployment approve, then apply-plan); one that finds
nothing is discarded.`,
		Example: `  outpost schedule create web-nightly ./infra --runner eu-1 --state-key apps/web --cron '0 3 * * *'
  outpost schedule create web-hourly --git https://github.com/acme/infra.git --path stacks/web \
      --runner eu-1 --state-key apps/web --cron @hourly --var-file prod.tfvars`,
		Args: rangeArgs(1, 2, "a schedule id and at most one directory"),
		RunE: a.run(func(ctx context.Context, s *session, args []string) error {
			in, err := o.input(args)
			if err != nil {
				return err
			}
			if in.RunnerID == "" {
				in.RunnerID = s.s.runner.Value
			}
			if in.RunnerID == "" {
				return &usageError{errors.New("no runner: pass --runner R (list them with `outpost runner list`), or set a default with `outpost config set runner R`")}
			}
			if err := in.Validate(); err != nil {
				return flagProblem(err)
			}
			if len(args) == 2 {
				pack, err := sourcearchive.Pack(args[1])
				if err != nil {
					return err
				}
				fmt.Fprintf(a.env.Stderr, "Packed %s: %s.\n", args[1], describeArchive(pack))
				if err := pack.Check(); err != nil {
					return err
				}
				in.Source.Inline = &api.InlineSource{ArchiveTarGz: pack.Data}
			}
			out, err := s.CreateSchedule(ctx, in)
			if err != nil {
				if errors.Is(err, api.ErrConflict) {
					return fmt.Errorf("schedule %s already exists in org %s; delete it first (`outpost schedule delete %s`) or choose another id", in.ID, s.Org(), in.ID)
				}
				return err
			}
			return a.print(out, func(w io.Writer) {
				fmt.Fprintf(w, "schedule %s created in org %s: drift checks of state key %s on runner %s, next at %s\n",
					out.ID, s.Org(), out.StateKey, out.RunnerID, out.NextFireAt.Format(time.RFC3339))
			})
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.git, "git", "", "check this git repository URL instead of a directory")
	f.StringVar(&o.ref, "ref", "", "with --git: branch, tag or commit")
	f.StringVar(&o.path, "path", "", "with --git: directory inside the repository")
	f.StringVar(&o.runner, "runner", "", "runner the checks run on (default: the profile's runner)")
	f.StringVar(&o.stateKey, "state-key", "", "the state to check (required)")
	f.StringVar(&o.cron, "cron", "", "when to check, in UTC: '0 3 * * *', '*/30 * * * * *' (seconds first), @hourly (required)")
	f.StringVar(&o.onDrift, "on-drift", string(api.OnDriftNone), "what drift does besides marking the state key: none, or queue_apply (each check a saved plan, kept for approval when it finds drift)")
	f.BoolVar(&o.disabled, "disabled", false, "create the schedule without firing it")
	f.StringArrayVar(&o.vars, "var", nil, "set a Terraform variable: NAME=VALUE (repeatable)")
	f.StringArrayVar(&o.varFiles, "var-file", nil, "read variables from a .tfvars, .json or .yaml file (repeatable; --var wins)")
	f.DurationVar(&o.timeout, "timeout", 0, "bound each check, e.g. 30m (default: the runner's job timeout)")
	_ = cmd.RegisterFlagCompletionFunc("on-drift", fixedCompletion(string(api.OnDriftNone), string(api.OnDriftQueueApply)))
	_ = cmd.RegisterFlagCompletionFunc("runner", a.completeIDs(runnerResource().ids))
	return cmd
}

// input turns the flags into a schedule, with a stand-in archive for a directory (packed once
// the rest is known to be valid).
func (o *scheduleOptions) input(args []string) (api.ScheduleInput, error) {
	enabled := !o.disabled
	in := api.ScheduleInput{ID: args[0], RunnerID: o.runner, StateKey: o.stateKey, Cron: o.cron, OnDrift: api.OnDrift(o.onDrift),
		Enabled: &enabled, TimeoutSeconds: int(o.timeout / time.Second)}
	switch {
	case len(args) == 2 && o.git != "":
		return in, &usageError{errors.New("give a directory or --git, not both")}
	case len(args) == 2:
		in.Source.Inline = &api.InlineSource{ArchiveTarGz: []byte{0x1f, 0x8b}}
	case o.git != "":
		in.Source.Git = &api.GitSource{URL: o.git, Ref: o.ref, Path: o.path}
	default:
		return in, &usageError{errors.New("nothing to check: give a directory or --git URL")}
	}
	if o.stateKey == "" || o.cron == "" {
		return in, &usageError{errors.New("--state-key and --cron are required: the state to check and when, e.g. --state-key apps/web --cron '0 3 * * *'")}
	}
	vars, err := variables(o.varFiles, o.vars)
	in.Variables = vars
	return in, err
}

func (a *app) scheduleListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the organisation's schedules with their next time and last check",
		Example: "  outpost schedule list",
		Args:    noArgs,
		RunE: a.run(func(ctx context.Context, s *session, _ []string) error {
			list, err := s.ListSchedules(ctx)
			if err != nil {
				return err
			}
			now := a.env.Now()
			return a.print(api.List[api.Schedule]{Items: list}, func(w io.Writer) {
				if len(list) == 0 {
					fmt.Fprintf(w, "No schedules in org %s yet; create one with `outpost schedule create`.\n", s.Org())
					return
				}
				rows := [][]string{{"ID", "RUNNER", "STATE KEY", "CRON", "NEXT", "LAST CHECK"}}
				for i := range list {
					sc := &list[i]
					next := stamp(now, &sc.NextFireAt)
					if !sc.IsEnabled() {
						next = "disabled"
					}
					rows = append(rows, []string{sc.ID, sc.RunnerID, sc.StateKey, sc.Cron, next, checkText(now, sc.LastCheck)})
				}
				table(w, rows)
			})
		}),
	}
}

func (a *app) scheduleGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Short:   "Show a schedule and what its last check found",
		Example: "  outpost schedule get web-nightly\n  outpost schedule get web-nightly -o json | jq .last_check.summary",
		Args:    oneArg("a schedule id"),
		RunE: a.run(func(ctx context.Context, s *session, args []string) error {
			sc, err := s.GetSchedule(ctx, args[0])
			if err != nil {
				return notFound(err, "schedule", args[0], s.Org(), "outpost schedule list")
			}
			now := a.env.Now()
			return a.print(sc, func(w io.Writer) {
				src := "inline archive"
				if sc.Source.Git != nil {
					src = "git " + describeGit(sc.Source.Git)
				}
				next := stamp(now, &sc.NextFireAt)
				if !sc.IsEnabled() {
					next = "disabled"
				}
				details(w, [][2]string{
					{"ID", sc.ID}, {"Runner", sc.RunnerID}, {"State", sc.StateStorageID + " " + sc.StateKey}, {"Source", src},
					{"Cron (UTC)", sc.Cron}, {"On drift", string(sc.OnDrift)}, {"Next", next},
					{"Last fired", stamp(now, sc.LastFiredAt)}, {"Last deployment", sc.LastDeploymentID},
					{"Last check", checkText(now, sc.LastCheck)}, {"Note", sc.LastMessage},
				})
				if c := sc.LastCheck; c != nil && c.Drifted && c.Summary != nil {
					fmt.Fprintln(w)
					driftSummary(w, c.Summary)
				}
			})
		}),
	}
}

func (a *app) scheduleDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "delete ID...",
		Aliases: []string{"rm"},
		Short:   "Delete schedules (checks already queued still run; drift marks stay until a check clears them)",
		Example: "  outpost schedule delete web-nightly",
		Args:    rangeArgs(1, -1, "the id of the schedule to delete"),
		RunE: a.run(func(ctx context.Context, s *session, args []string) error {
			for _, id := range args {
				if err := s.DeleteSchedule(ctx, id); err != nil {
					return notFound(err, "schedule", id, s.Org(), "outpost schedule list")
				}
				if !a.machine() {
					fmt.Fprintf(a.env.Stdout, "schedule %s deleted\n", id)
				}
			}
			return nil
		}),
	}
}

// checkText says in one cell what a drift check found.
func checkText(now time.Time, c *api.Drift) string {
	switch {
	case c == nil:
		return "-"
	case !c.Drifted:
		return "no drift (" + ago(now, &c.CheckedAt) + ")"
	case c.Summary == nil:
		return "DRIFTED (" + ago(now, &c.CheckedAt) + ")"
	}
	return fmt.Sprintf("DRIFTED: %d changed outside, %d to change (%s)", len(c.Summary.Drift), len(c.Summary.ResourceChanges), ago(now, &c.CheckedAt))
}

// driftSummary lists what a drift check found, by address.
func driftSummary(w io.Writer, s *api.PlanSummary) {
	rows := [][]string{{"CHANGED OUTSIDE", "ACTION", "ATTRIBUTES"}}
	for _, c := range s.Drift {
		rows = append(rows, []string{c.Address, string(c.Action), orDash(strings.Join(c.Attributes, ", "))})
	}
	if len(s.Drift) > 0 {
		table(w, rows)
		fmt.Fprintln(w)
	}
	rows = [][]string{{"AN APPLY WOULD", "ACTION", "ATTRIBUTES"}}
	for _, c := range s.ResourceChanges {
		rows = append(rows, []string{c.Address, string(c.Action), orDash(strings.Join(c.Attributes, ", "))})
	}
	for _, o := range s.OutputChanges {
		rows = append(rows, []string{"output." + o.Name, string(o.Action), "-"})
	}
	table(w, rows)
}
