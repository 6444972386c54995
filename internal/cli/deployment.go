package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

func (a *app) deploymentCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "deployment",
		Aliases: []string{"deployments", "dep"},
		Short:   "Inspect deployments: list, get, logs, outputs, events, cancel; review saved plans: plan, approve, discard, apply-plan",
		GroupID: "deploy",
		RunE:    groupRun,
	}
	cmd.AddCommand(a.deploymentListCommand(), a.deploymentGetCommand(), a.deploymentLogsCommand(),
		a.deploymentOutputsCommand(), a.deploymentEventsCommand(), a.deploymentCancelCommand(),
		a.deploymentPlanCommand(), a.deploymentApproveCommand(), a.deploymentDiscardCommand(), a.deploymentApplyPlanCommand())
	return cmd
}

// onDeployment finishes a command that acts on the deployment its first argument names: one
// argument unless the command says otherwise, completion of the id, and a not-found answer that
// says how to list deployments.
func (a *app) onDeployment(cmd *cobra.Command, run func(ctx context.Context, s *session, args []string) error) *cobra.Command {
	if cmd.Args == nil {
		cmd.Args = oneArg("a deployment id")
	}
	cmd.ValidArgsFunction = a.completeIDs(a.deploymentIDs)
	cmd.RunE = a.run(func(ctx context.Context, s *session, args []string) error {
		return notFound(run(ctx, s, args), "deployment", args[0], s.Org(), "outpost deployment list")
	})
	return cmd
}

func (a *app) deploymentIDs(ctx context.Context, s *session) ([]string, error) {
	list, err := s.ListDeployments(ctx, client.DeploymentFilter{})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, d := range list[:min(len(list), 50)] {
		ids = append(ids, fmt.Sprintf("%s\t%s %s on %s, %s", d.ID, d.Status, d.Operation, d.RunnerID, d.StateKey))
	}
	return ids, nil
}

func (a *app) deploymentListCommand() *cobra.Command {
	var runner, status string
	limit := 0
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List deployments, newest first",
		Example: `  outpost deployment list
  outpost deployment list --runner eu-1 --status failed
  outpost deployment list -o json | jq -r '.items[] | select(.status == "running") | .id'`,
		Args: noArgs,
		RunE: a.run(func(ctx context.Context, s *session, _ []string) error {
			if status != "" && !api.Status(status).Valid() {
				return &usageError{fmt.Errorf("--status %q is not a status; use one of %s", status, statusNames())}
			}
			list, err := s.ListDeployments(ctx, client.DeploymentFilter{RunnerID: runner, Status: api.Status(status)})
			if err != nil {
				return notFound(err, "runner", runner, s.Org(), "outpost runner list")
			}
			n := len(list)
			show := limit
			if show == 0 && !a.machine() {
				show = 20
			}
			if show > 0 && show < n {
				list = list[:show]
			}
			return a.print(api.List[api.Deployment]{Items: list}, func(w io.Writer) {
				if n == 0 {
					fmt.Fprintln(w, "No deployments match; queue one with `outpost deploy`.")
					return
				}
				table(w, deploymentRows(a.env.Now(), list))
				if len(list) < n {
					fmt.Fprintf(a.env.Stderr, "(the %d newest of %d; --limit N shows more)\n", len(list), n)
				}
			})
		}),
	}
	cmd.Flags().StringVar(&runner, "runner", "", "only this runner's deployments")
	cmd.Flags().StringVar(&status, "status", "", "only deployments in this status ("+statusNames()+")")
	cmd.Flags().IntVar(&limit, "limit", 0, "show at most N (default: 20 in the table, all with -o json)")
	_ = cmd.RegisterFlagCompletionFunc("runner", a.completeIDs(runnerResource().ids))
	_ = cmd.RegisterFlagCompletionFunc("status", fixedCompletion(strings.Split(statusNames(), ", ")...))
	return cmd
}

func statusNames() string {
	names := make([]string, len(api.Statuses))
	for i, s := range api.Statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// statusText is the status, with a cancel that is under way.
func statusText(d *api.Deployment) string {
	if d.CancelRequested && !d.Status.Terminal() {
		return string(d.Status) + " (canceling)"
	}
	return string(d.Status)
}

// waitingText is why a claimed deployment's attempt waits before its CLI starts (the latest
// waiting event's reason and message), or "".
func waitingText(d *api.Deployment) string {
	if d.Status != api.StatusClaimed || d.Reason == "" {
		return ""
	}
	return string(d.Reason) + ": " + oneLine(d.Message, 200)
}

// took is how long the deployment ran, or has been running.
func took(now time.Time, d *api.Deployment) string {
	start := d.StartedAt
	if start == nil {
		return "-"
	}
	end := now
	if d.FinishedAt != nil {
		end = *d.FinishedAt
	}
	return short(end.Sub(*start))
}

func deploymentRows(now time.Time, list []api.Deployment) [][]string {
	rows := [][]string{{"ID", "RUNNER", "OPERATION", "STATUS", "STATE KEY", "CREATED", "TOOK"}}
	for i := range list {
		d := &list[i]
		rows = append(rows, []string{d.ID, d.RunnerID, string(d.Operation), statusText(d), d.StateKey, ago(now, &d.CreatedAt), took(now, d)})
	}
	return rows
}

func (a *app) deploymentGetCommand() *cobra.Command {
	return a.onDeployment(&cobra.Command{
		Use:     "get ID",
		Short:   "Show a deployment",
		Example: "  outpost deployment get dep-4kq2x7mbh3z9p\n  outpost deployment get dep-4kq2x7mbh3z9p -o json | jq -r .status",
	}, func(ctx context.Context, s *session, args []string) error {
		d, err := s.GetDeployment(ctx, args[0])
		if err != nil {
			return err
		}
		return a.print(d, func(w io.Writer) { details(w, deploymentFields(a.env.Now(), d)) })
	})
}

func deploymentFields(now time.Time, d *api.Deployment) [][2]string {
	src := "git " + describeGit(d.Source.Git)
	if in := d.Source.Inline; in != nil {
		src = fmt.Sprintf("inline archive, %s", size(int64(len(in.ArchiveTarGz))))
	}
	names := slices.Sorted(maps.Keys(d.Variables))
	timeout := ""
	if d.TimeoutSeconds > 0 {
		timeout = short(time.Duration(d.TimeoutSeconds) * time.Second)
	}
	logs := size(d.LogSize)
	if d.LogTruncated {
		logs += " (truncated)"
	}
	result := outcome(d)
	if waitingText(d) != "" {
		result = ""
	}
	return [][2]string{
		{"ID", d.ID},
		{"Runner", d.RunnerID},
		{"Operation", string(d.Operation)},
		{"Drift check", driftCheckText(d)},
		{"Status", statusText(d)},
		{"Waiting", waitingText(d)},
		{"Result", result},
		{"Cluster said", oneLine(d.Detail, 200)},
		{"State key", d.StateKey},
		{"Saved plan", map[bool]string{true: "kept in the cluster for review: outpost deployment plan " + d.ID}[d.SavePlan]},
		{"Applies plan", map[bool]string{true: "the saved plan of " + d.PlanOf}[d.PlanOf != ""]},
		{"Source", src},
		{"Variables", strings.Join(names, ", ")},
		{"Attempt", strconv.Itoa(d.Attempt)},
		{"Timeout", timeout},
		{"Created", stamp(now, &d.CreatedAt)},
		{"Claimed", stamp(now, d.ClaimedAt)},
		{"Started", stamp(now, d.StartedAt)},
		{"Finished", stamp(now, d.FinishedAt)},
		{"Took", strings.TrimPrefix(took(now, d), "-")},
		{"Log", logs},
	}
}

func (a *app) deploymentLogsCommand() *cobra.Command {
	var follow bool
	cmd := a.onDeployment(&cobra.Command{
		Use:   "logs ID [--follow]",
		Short: "Print a deployment's log; --follow streams it until the deployment ends",
		Long: `Print a deployment's log as stored so far. With --follow, stream it live until the
deployment ends and exit with its result (0 succeeded, 3 failed, 4 canceled, 5 lost); Ctrl-C
asks whether to cancel the deployment or detach.`,
		Example: "  outpost deployment logs dep-4kq2x7mbh3z9p\n  outpost deployment logs dep-4kq2x7mbh3z9p --follow",
	}, func(ctx context.Context, s *session, args []string) error {
		d, err := s.GetDeployment(ctx, args[0])
		if err != nil {
			return err
		}
		if follow {
			return a.follow(ctx, s, d)
		}
		var offset int64
		for {
			chunk, err := s.GetLogs(ctx, d.ID, offset, 0)
			if err != nil {
				return err
			}
			if _, err := a.env.Stdout.Write(chunk.Data); err != nil {
				return err
			}
			offset = chunk.NextOffset
			if chunk.Complete || len(chunk.Data) == 0 {
				return nil
			}
		}
	})
	followFlag(cmd, &follow)
	return cmd
}

func (a *app) deploymentOutputsCommand() *cobra.Command {
	var showSensitive bool
	cmd := a.onDeployment(&cobra.Command{
		Use:   "outputs ID [NAME]",
		Short: "Show a deployment's Terraform outputs, or print one output's value",
		Long: `Show the Terraform outputs a deployment's run reported. The table hides sensitive values
unless --show-sensitive; -o json prints them all, as terraform output -json does. With a NAME,
print that output's value alone: a string as it is, anything else as JSON.`,
		Example: `  outpost deployment outputs dep-4kq2x7mbh3z9p
  outpost deployment outputs dep-4kq2x7mbh3z9p cluster_endpoint
  outpost deployment outputs dep-4kq2x7mbh3z9p -o json | jq -r .servers.Value[]`,
		Args: rangeArgs(1, 2, "a deployment id and optionally an output name"),
	}, func(ctx context.Context, s *session, args []string) error {
		outs, err := s.GetOutputs(ctx, args[0])
		if err != nil {
			return err
		}
		if dep, err := s.GetDeployment(ctx, args[0]); err == nil && dep.OutputsOmitted > 0 {
			fmt.Fprintf(a.env.Stderr, "Note: %s left out of the deployment's outputs (a deployment keeps at most %d outputs and %d MiB of them); its log names them.\n",
				plural(dep.OutputsOmitted, "output"), api.MaxOutputs, api.MaxOutputsBytes>>20)
		}
		if len(args) == 2 {
			return printOutput(a.env.Stdout, outs, args[0], args[1])
		}
		return a.print(outs, func(w io.Writer) {
			if len(outs) == 0 {
				fmt.Fprintln(w, "No outputs (yet): the run uploads them after it succeeds.")
				return
			}
			table(w, outputRows(outs, showSensitive))
		})
	})
	cmd.Flags().BoolVar(&showSensitive, "show-sensitive", false, "show the values of sensitive outputs in the table")
	return cmd
}

func outputRows(outs api.Outputs, showSensitive bool) [][]string {
	rows := [][]string{{"NAME", "VALUE"}}
	for _, n := range slices.Sorted(maps.Keys(outs)) {
		v := oneLine(string(outs[n].Value), 100)
		if outs[n].Sensitive && !showSensitive {
			v = "(sensitive)"
		}
		rows = append(rows, []string{n, v})
	}
	return rows
}

// printOutput prints one output's value: strings raw, for scripts; anything else as JSON.
func printOutput(w io.Writer, outs api.Outputs, id, name string) error {
	o, ok := outs[name]
	if !ok {
		return fmt.Errorf("deployment %s has no output %q (its outputs: %s)", id, name, listOrNone(slices.Sorted(maps.Keys(outs))))
	}
	if s, err := strconv.Unquote(string(o.Value)); err == nil && strings.HasPrefix(string(o.Value), `"`) {
		_, err := fmt.Fprintln(w, s)
		return err
	}
	_, err := fmt.Fprintln(w, string(o.Value))
	return err
}

func (a *app) deploymentEventsCommand() *cobra.Command {
	return a.onDeployment(&cobra.Command{
		Use:   "events ID",
		Short: "Show the timeline of a deployment's attempts: each step, and why it waited or failed",
		Long: `Show the timeline of a deployment's attempts, as the orchestrator and the agent recorded it:
claimed, Job created, pod scheduled (with its node), pod initialized, CLI started, finished, and
a waiting step for each reason the attempt waited for before its CLI started. REASON is the typed
reason (unschedulable, image_pull, quota_exceeded, oom_killed, deadline_exceeded, canceled, …);
DETAIL is what the cluster said in its own words (the scheduler's message, the registry's answer,
the memory limit of an OOM kill), or Outpost's message when the cluster said nothing.`,
		Example: "  outpost deployment events dep-4kq2x7mbh3z9p\n  outpost deployment events dep-4kq2x7mbh3z9p -o json | jq -r '.items[] | select(.reason) | .reason'",
	}, func(ctx context.Context, s *session, args []string) error {
		evs, err := s.ListEvents(ctx, args[0])
		if err != nil {
			return err
		}
		return a.print(api.List[api.Event]{Items: evs}, func(w io.Writer) {
			if len(evs) == 0 {
				fmt.Fprintln(w, "No events yet: no agent has started the deployment.")
				return
			}
			table(w, eventRows(evs))
		})
	})
}

// eventRows is the timeline table of events: the cluster's words where it said any, the node of
// a scheduled pod, Outpost's message otherwise.
func eventRows(evs []api.Event) [][]string {
	rows := [][]string{{"ATTEMPT", "TIME", "STEP", "RESULT", "EXIT", "REASON", "DETAIL"}}
	for _, e := range evs {
		exit := "-"
		if e.ExitCode != nil {
			exit = strconv.Itoa(*e.ExitCode)
		}
		detail := e.Detail
		switch {
		case e.By != "":
			// A review step: what happened, and who asked.
			detail = e.Message + " (by " + e.By + ")"
		case e.Node != "":
			detail = "node " + e.Node
		case detail == "":
			detail = e.Message
		}
		rows = append(rows, []string{strconv.Itoa(e.Attempt), e.Time.Local().Format(time.RFC3339), orDash(string(e.StepOf())), orDash(string(e.Result)),
			exit, orDash(string(e.Reason)), orDash(oneLine(detail, 100))})
	}
	return rows
}

func (a *app) deploymentCancelCommand() *cobra.Command {
	return a.onDeployment(&cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a deployment",
		Long: `Cancel a deployment. A queued one ends canceled at once; for a running one the agent stops the
run (terraform gets the time to save its state and release the lock) and the deployment ends
canceled. A deployment that already ended cannot be canceled (exit code 1).`,
		Example: "  outpost deployment cancel dep-4kq2x7mbh3z9p",
	}, func(ctx context.Context, s *session, args []string) error {
		d, err := s.CancelDeployment(ctx, args[0])
		if errors.Is(err, api.ErrConflict) {
			if cur, gerr := s.GetDeployment(ctx, args[0]); gerr == nil {
				return fmt.Errorf("deployment %s already ended (%s); there is nothing to cancel", args[0], cur.Status)
			}
		}
		if err != nil {
			return err
		}
		return a.print(d, func(w io.Writer) {
			if d.Status == api.StatusCanceled {
				fmt.Fprintf(w, "Deployment %s canceled.\n", d.ID)
				return
			}
			fmt.Fprintf(w, "Cancel of deployment %s requested; the agent stops it. Watch: outpost deployment logs %s --follow\n", d.ID, d.ID)
		})
	})
}

// driftCheckText names the schedule whose drift check a deployment is ("" for other deployments).
func driftCheckText(d *api.Deployment) string {
	if !d.DriftCheck {
		return ""
	}
	return "of schedule " + d.ScheduleID + " (plan -detailed-exitcode; see outpost schedule get " + d.ScheduleID + ")"
}
