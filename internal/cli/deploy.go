package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/sourcearchive"
)

// DeployRequest is a deployment to queue: exactly one of Dir (a local directory, sent packed as
// the inline source) and Git.
type DeployRequest struct {
	Dir       string
	Git       *api.GitSource
	RunnerID  string
	StateKey  string
	Operation api.Operation
	Variables map[string]json.RawMessage
	// Timeout overrides the runner's job timeout (0: the runner's).
	Timeout time.Duration
	// SavePlan, PlanDestroy and PlanTTL make a plan a saved plan for review (api.DeploymentInput).
	SavePlan    bool
	PlanDestroy bool
	PlanTTL     time.Duration
}

// Deployer queues deployments and follows them to their end, telling a person what it does.
// The deploy command uses it, and so can other programs (the demo) in-process.
type Deployer struct {
	Admin *client.AdminClient
	// Notes receives what a person reads about the steps: the packed source, the queued
	// deployment, lost connections, the result. Nil discards them.
	Notes io.Writer
	// Now is the clock of relative times; nil is time.Now.
	Now func() time.Time
}

func (d *Deployer) notef(format string, args ...any) {
	if d.Notes != nil {
		fmt.Fprintf(d.Notes, format+"\n", args...)
	}
}

func (d *Deployer) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// Queue checks the request and the runner, packs the directory and queues the deployment. It
// fails before packing or uploading anything when the request or the runner is wrong.
func (d *Deployer) Queue(ctx context.Context, req DeployRequest) (*api.Deployment, error) {
	in := api.DeploymentInput{RunnerID: req.RunnerID, Operation: req.Operation, StateKey: req.StateKey,
		Variables: req.Variables, TimeoutSeconds: int(req.Timeout / time.Second),
		SavePlan: req.SavePlan, PlanDestroy: req.PlanDestroy, PlanTTLSeconds: int(req.PlanTTL / time.Second)}
	switch {
	case req.Dir != "" && req.Git != nil:
		return nil, &usageError{errors.New("give a directory or --git, not both")}
	case req.Dir != "":
		// Checked with a stand-in archive first, so a typo in the state key costs no upload.
		in.Source.Inline = &api.InlineSource{ArchiveTarGz: []byte{0x1f, 0x8b}}
	case req.Git != nil:
		in.Source.Git = req.Git
	default:
		return nil, &usageError{errors.New("nothing to deploy: give a directory (outpost deploy ./infra) or --git URL")}
	}
	if req.RunnerID != "" {
		if err := idProblem("--runner", req.RunnerID); err != nil {
			return nil, err
		}
	}
	if err := in.Validate(); err != nil {
		return nil, flagProblem(err)
	}
	r, err := d.Admin.GetRunner(ctx, req.RunnerID)
	if err != nil {
		return nil, notFound(err, "runner", req.RunnerID, d.Admin.Org(), "outpost runner list")
	}
	switch refused := r.Status.Refused(); {
	case r.Status.Connected:
	case refused != nil:
		d.notef("Note: the orchestrator refuses the agent of runner %s (%s: %s); the deployment waits in the queue until it is let in.",
			r.ID, ago(d.now(), &refused.At), refused.Message)
	case r.Status.LastSeenAt == nil:
		d.notef("Note: no agent has connected for runner %s yet; the deployment waits in the queue until one does.", r.ID)
	default:
		d.notef("Note: runner %s has no agent connected (last seen %s); the deployment waits in the queue until one connects.",
			r.ID, ago(d.now(), r.Status.LastSeenAt))
	}
	what := "git " + describeGit(req.Git)
	if req.Dir != "" {
		a, err := sourcearchive.Pack(req.Dir)
		if err != nil {
			return nil, err
		}
		d.notef("Packed %s: %s.", req.Dir, describeArchive(a))
		if err := a.Check(); err != nil {
			return nil, err
		}
		in.Source.Inline = &api.InlineSource{ArchiveTarGz: a.Data}
		what = req.Dir
	}
	dep, err := d.Admin.CreateDeployment(ctx, in)
	if err != nil {
		if errors.Is(err, api.ErrTooLarge) {
			return nil, fmt.Errorf("%w\nThe orchestrator takes less than this CLI allows; make the source smaller or deploy from git (--git)", err)
		}
		return nil, err
	}
	d.notef("Queued deployment %s: %s of %s on runner %s, state key %s.", dep.ID, dep.Operation, what, dep.RunnerID, dep.StateKey)
	return dep, nil
}

// Follow copies the deployment's log to log from offset until the deployment ends, resuming
// after lost connections, and returns the final deployment (see Result for its exit code).
func (d *Deployer) Follow(ctx context.Context, id string, offset int64, log io.Writer) (int64, *api.Deployment, error) {
	return d.Admin.FollowLogs(ctx, id, log, client.FollowOptions{
		Offset:    offset,
		MaxOutage: 10 * time.Minute,
		OnRetry: func(err error, wait time.Duration) {
			d.notef("Lost contact with the orchestrator (%v); trying again in %s, the log resumes where it stopped.", err, wait.Round(100*time.Millisecond))
		},
		OnWaiting: d.waiting,
	})
}

// waiting says, before the CLI's first line, where the deployment stands and why it waits, in
// the reason's word and the cluster's own (the same as the console's and the API's).
func (d *Deployer) waiting(dep *api.Deployment) {
	switch {
	case dep.Reason != "":
		d.notef("Waiting (%s): %s", dep.Reason, oneLine(dep.Message, 400))
	case dep.Status == api.StatusClaimed:
		d.notef("Claimed by the agent of runner %s (attempt %d); starting its job.", dep.RunnerID, dep.Attempt)
	}
}

// Result tells how the deployment ended and returns its exit code (ExitOK, ExitFailed,
// ExitCanceled, ExitLost).
func (d *Deployer) Result(dep *api.Deployment) int {
	took := ""
	if dep.FinishedAt != nil {
		start := dep.CreatedAt
		if dep.StartedAt != nil {
			start = *dep.StartedAt
		}
		took = " in " + short(dep.FinishedAt.Sub(start))
	}
	detail := outcome(dep)
	if detail != "" {
		detail = ": " + detail
	}
	d.notef("Deployment %s %s%s (attempt %d)%s.", dep.ID, dep.Status, took, dep.Attempt, detail)
	switch dep.Status {
	case api.StatusSucceeded:
		return ExitOK
	case api.StatusFailed:
		return ExitFailed
	case api.StatusCanceled:
		return ExitCanceled
	case api.StatusLost:
		d.notef("A lost apply or destroy may have changed resources before its agent vanished; check the state (key %s) before you deploy again.", dep.StateKey)
		return ExitLost
	}
	return ExitError
}

// outcome is the exit code, reason and message of an ended deployment, in a few words.
func outcome(dep *api.Deployment) string {
	var parts []string
	if dep.ExitCode != nil {
		parts = append(parts, fmt.Sprintf("exit code %d", *dep.ExitCode))
	}
	if dep.Reason != "" {
		parts = append(parts, "reason "+string(dep.Reason))
	}
	s := strings.Join(parts, ", ")
	if dep.Message != "" {
		if s != "" {
			s += "; "
		}
		s += oneLine(dep.Message, 200)
	}
	return s
}

func describeArchive(a *sourcearchive.Archive) string {
	s := plural(a.Files, "file") + ", " + plural(a.Dirs, "directory")
	if a.Symlinks > 0 {
		s += ", " + plural(a.Symlinks, "symlink")
	}
	s += fmt.Sprintf(", %s (%s compressed)", size(a.Bytes), size(int64(len(a.Data))))
	if len(a.Skipped) > 0 {
		s += "; left out " + sample(a.Skipped, skippedShown)
	}
	if a.IgnoreFile != "" {
		s += " (read " + a.IgnoreFile + ")"
	}
	return s
}

// skippedShown is how many left-out paths deploy names before it counts the rest.
const skippedShown = 20

// sample joins up to n items, then says how many more there are.
func sample(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

func plural(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "y"):
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func describeGit(g *api.GitSource) string {
	if g == nil {
		return ""
	}
	s := g.URL
	if g.Ref != "" {
		s += " at " + g.Ref
	}
	if g.Path != "" {
		s += ", path " + g.Path
	}
	return s
}

// deployFlags maps the API's field names onto the deploy command's flags, for messages.
var deployFlags = map[string]string{"runner_id": "--runner", "state_key": "--state-key", "timeout_seconds": "--timeout",
	"save_plan": "--save-plan", "plan_ttl_seconds": "--plan-ttl",
	"source.git.url": "--git", "source.git.path": "--path", "operation": "--plan/--destroy"}

// flagProblem words a validation error of the request in terms of the flags.
func flagProblem(err error) error {
	var fe *api.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	name := deployFlags[fe.Field]
	if v, ok := strings.CutPrefix(fe.Field, "variables."); ok {
		name = "--var " + v
	}
	if name == "" {
		return err
	}
	return &usageError{fmt.Errorf("%s: %s", name, fe.Message)}
}
