package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

type deployOptions struct {
	git, ref, path, runner, stateKey string
	plan, destroy, follow, savePlan  bool
	planTTL                          time.Duration
	vars, varFiles                   []string
	timeout                          time.Duration
}

func (a *app) deployCommand() *cobra.Command {
	var o deployOptions
	cmd := &cobra.Command{
		Use:   "deploy [DIR] --runner R --state-key K [--plan|--destroy] [--var NAME=VALUE ...] [--follow]",
		Short: "Deploy a local directory or a git source on a runner",
		Long: `Deploy a Terraform or OpenTofu configuration on a runner: apply by default, --plan to only
plan, --destroy to destroy.

DIR is packed as the deployment's inline source: a deterministic tar.gz of the directory without
.terraform/, .git/ and local state files (the state lives in the runner's state storage), and
without what the directory's .outpostignore names (.gitignore syntax; when there is none, a
.terraformignore is read, as HCP Terraform does). What was left out is printed. Symlinks must
stay inside the directory. The packed size is printed; the limit is 12 MiB compressed, and a
source over it is refused naming its largest files. With --git the runner's job fetches the
source itself.

Without --follow, deploy prints the new deployment's id (-o json: the deployment) and exits. With
--follow it streams the log live until the deployment ends, and exits with its result: 0
succeeded, 3 failed, 4 canceled, 5 lost. Ctrl-C asks whether to cancel the deployment or detach
from it (detached, it keeps running; without a terminal, Ctrl-C detaches) and exits 130 when
detached. Lost connections are retried for up to 10 minutes; the log resumes where it stopped.
With -o json the log goes to stderr and stdout gets the final deployment.`,
		Example: `  outpost deploy ./infra --runner eu-1 --state-key apps/web --follow
  outpost deploy ./infra --runner eu-1 --state-key apps/web --plan --var image_tag=v1.4.2 --follow
  outpost deploy --git https://github.com/acme/infra.git --ref main --path stacks/web \
      --runner eu-1 --state-key apps/web --var-file prod.tfvars
  outpost deploy ./infra --runner eu-1 --state-key apps/web --destroy --follow
  id=$(outpost deploy ./infra --runner eu-1 --state-key apps/web) && outpost deployment logs "$id" --follow`,
		GroupID: "deploy",
		Args:    rangeArgs(0, 1, "at most one directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkFormat(); err != nil {
				return err
			}
			req, err := o.request(args)
			if err != nil {
				return err
			}
			up := &uploadProgress{w: a.env.Stderr, tty: isTerminal(a.env.Stderr)}
			s, err := a.connect(client.WithUploadProgress(up.update))
			if err != nil {
				return err
			}
			if req.RunnerID == "" {
				req.RunnerID = s.s.runner.Value
			}
			if req.RunnerID == "" {
				return &usageError{fmt.Errorf("no runner: pass --runner R (list them with `outpost runner list`), or set a default with `outpost config set runner R`")}
			}
			d := a.deployer(s)
			dep, err := d.Queue(cmd.Context(), req)
			if err != nil {
				return err
			}
			if !o.follow {
				if !a.machine() {
					fmt.Fprintf(a.env.Stderr, "Follow it: outpost deployment logs %s --follow\n", dep.ID)
				}
				return a.print(dep, func(w io.Writer) { fmt.Fprintln(w, dep.ID) })
			}
			return a.follow(cmd.Context(), s, dep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.git, "git", "", "deploy from this git repository URL instead of a directory")
	f.StringVar(&o.ref, "ref", "", "with --git: branch, tag or commit")
	f.StringVar(&o.path, "path", "", "with --git: directory inside the repository")
	f.StringVar(&o.runner, "runner", "", "runner to deploy on (default: the profile's runner)")
	f.StringVar(&o.stateKey, "state-key", "", "name of the state this deployment reads and writes (required)")
	f.BoolVar(&o.plan, "plan", false, "only plan")
	f.BoolVar(&o.destroy, "destroy", false, "destroy what the state holds")
	f.BoolVar(&o.savePlan, "save-plan", false, "plan, and keep the plan in the cluster for review (outpost deployment plan, approve, apply-plan); with --destroy, a destroy plan")
	f.DurationVar(&o.planTTL, "plan-ttl", 0, "with --save-plan: how long the plan can be applied, e.g. 2h (default 24h)")
	f.StringArrayVar(&o.vars, "var", nil, "set a Terraform variable: NAME=VALUE (repeatable; a string, as terraform -var)")
	f.StringArrayVar(&o.varFiles, "var-file", nil, "read variables from a .tfvars, .json or .yaml file (repeatable; --var wins)")
	f.DurationVar(&o.timeout, "timeout", 0, "bound the run, e.g. 30m (default: the runner's job timeout)")
	followFlag(cmd, &o.follow)
	cmd.MarkFlagsMutuallyExclusive("plan", "destroy")
	_ = cmd.MarkFlagFilename("var-file", "tfvars", "json", "yaml", "yml")
	_ = cmd.RegisterFlagCompletionFunc("runner", a.completeIDs(runnerResource().ids))
	_ = cmd.RegisterFlagCompletionFunc("state-key", cobra.NoFileCompletions)
	return cmd
}

// followFlag adds --follow. Each short flag means one thing in every command, and -f is --file
// (create, update), so --follow has no short form; -f still follows here, with a note, until a
// later release.
func followFlag(cmd *cobra.Command, follow *bool) {
	cmd.Flags().BoolVarP(follow, "follow", "f", false, "stream the log until the deployment ends and exit with its result")
	_ = cmd.Flags().MarkShorthandDeprecated("follow", "use --follow: -f means --file (in create and update), and will stop meaning --follow in a later release")
}

// request turns the flags into a DeployRequest.
func (o *deployOptions) request(args []string) (DeployRequest, error) {
	req := DeployRequest{RunnerID: o.runner, StateKey: o.stateKey, Operation: api.OperationApply, Timeout: o.timeout}
	switch {
	case o.savePlan:
		req.Operation, req.SavePlan, req.PlanDestroy = api.OperationPlan, true, o.destroy
		req.PlanTTL = o.planTTL
	case o.plan:
		req.Operation = api.OperationPlan
	case o.destroy:
		req.Operation = api.OperationDestroy
	}
	if o.planTTL != 0 && (!o.savePlan || o.planTTL%time.Second != 0) {
		return req, &usageError{fmt.Errorf("--plan-ttl %s: give whole seconds, with --save-plan", o.planTTL)}
	}
	if len(args) == 1 {
		req.Dir = args[0]
	}
	if o.git != "" {
		req.Git = &api.GitSource{URL: o.git, Ref: o.ref, Path: o.path}
	} else if o.ref != "" || o.path != "" {
		return req, &usageError{fmt.Errorf("--ref and --path go with --git")}
	}
	if o.stateKey == "" {
		return req, &usageError{fmt.Errorf("--state-key is required: it names the state the deployment reads and writes, e.g. --state-key apps/web")}
	}
	if o.timeout != 0 && o.timeout%time.Second != 0 {
		return req, &usageError{fmt.Errorf("--timeout %s: give whole seconds", o.timeout)}
	}
	vars, err := variables(o.varFiles, o.vars)
	req.Variables = vars
	return req, err
}

// deployer is the Deployer of this run: notes on stderr.
func (a *app) deployer(s *session) *Deployer {
	return &Deployer{Admin: s.AdminClient, Notes: a.env.Stderr, Now: a.env.Now}
}

// uploadProgress shows how much of a large request body has been sent: a line that updates
// itself on a terminal, one line otherwise.
type uploadProgress struct {
	w     io.Writer
	tty   bool
	said  bool
	shown time.Time
}

// progressFrom is the body size from which uploads show progress.
const progressFrom = 1 << 20

func (p *uploadProgress) update(sent, total int64) {
	if total < progressFrom {
		return
	}
	if !p.tty {
		if !p.said {
			fmt.Fprintf(p.w, "Uploading %s…\n", size(total))
			p.said = true
		}
		return
	}
	if sent < total && time.Since(p.shown) < 100*time.Millisecond {
		return
	}
	p.shown = time.Now()
	fmt.Fprintf(p.w, "\rUploading %s of %s (%d%%)", size(sent), size(total), sent*100/total)
	if sent == total {
		fmt.Fprintln(p.w)
	}
}
