// Package statecmd is `outpost-agent state`, the operator's tool for the states the agent keeps
// in Secrets (package statestore). Those states are chunked, gzipped and checksummed across
// several Secrets, so `kubectl get secret` cannot show, recover or unlock them; this command can,
// with the same code the agent serves them with. It runs anywhere with a kubeconfig, and inside
// the agent's pod (`kubectl exec deploy/outpost-agent -- outpost-agent state list`), where
// in-cluster credentials and the agent's own configuration (Defaults) make it work without flags.
package statecmd

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/kubeclient"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

// Exit codes of Main.
const (
	exitOK          = 0
	exitRuntime     = 1 // the operation failed
	exitConfigError = 2 // bad usage
)

const stateUsage = `usage: outpost-agent state <command> [flags] [arguments]

Commands:
  list                         every state: key, generation, serial, lineage, size, updated, lock holder
  history KEY                  the kept generations of a state
  get KEY [--generation N]     write the state (or an older generation) to stdout, byte for byte
  restore KEY GENERATION       write that generation back as a new generation [--force: force-unlock first]
  show KEY [--generation N]    the resource instances and outputs of a state (or an older
                               generation) by name; no value is shown
  diff KEY FROM TO             resource instances and outputs added, removed and changed between
                               two generations, by name
  rollback KEY GENERATION --reason TEXT [--by NAME]
                               write that generation back as the newest, with the next serial,
                               under the state's lock; who and why are recorded with it
  lock-info KEY                show the lock of a state (its holder: attempt and job pod)
  force-unlock KEY [--reason TEXT] [--by NAME]
                               remove the lock of a state (its holder can no longer write); a lock
                               that has not expired (its holder may still run) needs --reason;
                               who, why and whose lock are recorded on the lock
  import --suffix SUFFIX [--workspace WS] [--key KEY] [--overwrite] [--ignore-lock]
                               copy a state from the stock kubernetes backend's Secrets in the namespace

Flags (before or after the command):
  --namespace NS               namespace of the states (default: the agent's state.namespace,
                               OUTPOST_STATE_NAMESPACE; required)
  --org-id ORG                 organisation the states belong to (default: the agent's orgId,
                               OUTPOST_ORG_ID; required): states are named per organisation
  --kubeconfig PATH            kubeconfig, or a list like $KUBECONFIG (default $KUBECONFIG, else
                               in-cluster credentials)
  --encryption-key-file PATH   the agent's state encryption key (raw or base64, 32 bytes; default:
                               the agent's state.encryptionKeyFile, OUTPOST_STATE_ENCRYPTION_KEY_FILE):
                               reads sealed states, seals what it writes
  --json                       list, history, show, diff, lock-info: JSON instead of a table
  --by NAME                    who asks, recorded with a rollback or a broken lock (default $USER)
`

// stateOpts are the flags of every state command.
type stateOpts struct {
	kubeconfig, namespace, keyFile, org string
	json, force, overwrite, ignore      bool
	generation, to                      int64
	reason, by                          string
	workspace, suffix, key              string
	keep                                int
	maxAge                              time.Duration
}

// flags registers the flags of cmd on a new FlagSet. Values already set (from flags before the
// command) are the defaults, so that global flags may come before or after the command.
func (o *stateOpts) flags(cmd string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("outpost-agent state "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, stateUsage) }
	fs.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "")
	fs.StringVar(&o.namespace, "namespace", o.namespace, "")
	fs.StringVar(&o.org, "org-id", o.org, "")
	fs.StringVar(&o.keyFile, "encryption-key-file", o.keyFile, "")
	fs.BoolVar(&o.json, "json", o.json, "")
	switch cmd {
	case "get":
		fs.Int64Var(&o.generation, "generation", 0, "")
	case "restore":
		fs.BoolVar(&o.force, "force", false, "")
	case "show":
		fs.Int64Var(&o.generation, "generation", 0, "")
	case "rollback", "force-unlock":
		fs.StringVar(&o.reason, "reason", "", "")
		fs.StringVar(&o.by, "by", o.by, "")
	case "import":
		fs.StringVar(&o.workspace, "workspace", "default", "")
		fs.StringVar(&o.suffix, "suffix", "", "")
		fs.StringVar(&o.key, "key", "", "")
		fs.BoolVar(&o.overwrite, "overwrite", false, "")
		fs.BoolVar(&o.ignore, "ignore-lock", false, "")
	}
	return fs
}

// stateCommands are the commands with the number of arguments they take.
var stateCommands = map[string]struct {
	args int
	run  func(*stateCmd, context.Context) error
}{
	"list": {0, (*stateCmd).list}, "history": {1, (*stateCmd).history}, "get": {1, (*stateCmd).get},
	"restore": {2, (*stateCmd).restore}, "lock-info": {1, (*stateCmd).lockInfo},
	"force-unlock": {1, (*stateCmd).forceUnlock}, "import": {0, (*stateCmd).importStock},
	"show": {1, (*stateCmd).show}, "diff": {3, (*stateCmd).diff}, "rollback": {2, (*stateCmd).rollback},
}

// Defaults are the settings the flags start from: the agent's own (its configuration file and
// environment, package config), so that inside the agent's pod no flag is needed.
type Defaults struct {
	Namespace, OrgID, EncryptionKeyFile string
	// KeepVersions and MaxVersionAge are the agent's state.versions: a restore prunes the
	// history as the agent's own writes do.
	KeepVersions  int
	MaxVersionAge time.Duration
}

// Main runs `outpost-agent state` with args (after "state"). Exit codes: 0 done, 1 the
// operation failed (one line on stderr that names the state and what to do), 2 bad usage (with
// the usage text).
func Main(args []string, defaults Defaults, stdout, stderr io.Writer) int {
	o := &stateOpts{kubeconfig: os.Getenv("KUBECONFIG"), namespace: defaults.Namespace, org: defaults.OrgID, keyFile: defaults.EncryptionKeyFile,
		keep: defaults.KeepVersions, maxAge: defaults.MaxVersionAge, by: cmp.Or(os.Getenv("USER"), "operator")}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "outpost-agent state: "+format+"\n", a...)
		fmt.Fprint(stderr, stateUsage)
		return exitConfigError
	}
	global := o.flags("", stderr)
	if err := global.Parse(args); err != nil {
		return helpOr(err)
	}
	if global.NArg() == 0 {
		return usage("no command given")
	}
	cmd := global.Arg(0)
	command, ok := stateCommands[cmd]
	if !ok {
		return usage("unknown command %q", cmd)
	}
	pos, err := parseInterleaved(o.flags(cmd, stderr), global.Args()[1:])
	if err != nil {
		return helpOr(err)
	}
	switch {
	case len(pos) != command.args:
		return usage("%s takes %d argument(s), got %d", cmd, command.args, len(pos))
	case o.namespace == "":
		return usage("--namespace (or the agent's state.namespace) is required: the namespace that holds the states")
	case o.generation < 0:
		return usage("--generation must be positive (without it, get reads the current generation)")
	case cmd == "import" && o.suffix == "":
		return usage("import needs --suffix: the secret_suffix of the kubernetes backend configuration")
	}
	switch cmd {
	case "restore", "rollback":
		if o.generation, err = positiveGeneration(pos[1]); err != nil {
			return usage("%s: %v", cmd, err)
		}
	case "diff":
		if o.generation, err = positiveGeneration(pos[1]); err == nil {
			o.to, err = positiveGeneration(pos[2])
		}
		if err != nil {
			return usage("diff: FROM and TO are generations: %v", err)
		}
	}
	if cmd == "rollback" && strings.TrimSpace(o.reason) == "" {
		return usage("rollback needs --reason: it is recorded with the new version, and the orchestrator shows it")
	}
	key, err := statestore.ReadKeyFile(o.keyFile)
	if err != nil {
		return usage("--encryption-key-file: %v", err)
	}
	if o.org == "" {
		return usage("--org-id (or the agent's orgId) is required: the organisation the agent serves (its orgId); states are named per organisation")
	}

	fail := func(err error) int {
		fmt.Fprintf(stderr, "outpost-agent state %s: %s\n", cmd, strings.ReplaceAll(explain(err, cmd, o.namespace), "\n", " "))
		return exitRuntime
	}
	// Client-go's default rate limits suit one operator's command; the timeout keeps a wedged
	// API server from hanging the shell.
	kube, err := kubeclient.New(kubeclient.Options{Kubeconfig: o.kubeconfig,
		UserAgent: "outpost-agent-state/" + version.Version, Timeout: 60 * time.Second})
	if err != nil {
		return fail(err)
	}
	// The store logs what it does for the agent's log; here the command reports in its own
	// words, so only list (which skips unreadable manifests) lets warnings through.
	log := slog.New(slog.DiscardHandler)
	if cmd == "list" {
		log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	store, err := statestore.New(kube, o.namespace, statestore.Options{EncryptionKey: key, Logger: log, Scope: o.org,
		KeepGenerations: o.keep, MaxGenerationAge: o.maxAge})
	if err != nil {
		return usage("--encryption-key-file: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &stateCmd{store: store, opts: o, out: stdout}
	if len(pos) > 0 {
		c.key = pos[0]
	}
	if err := command.run(c, ctx); err != nil {
		return fail(err)
	}
	return exitOK
}

func helpOr(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitConfigError // the flag package has printed the error and the usage
}

// parseInterleaved lets flags follow arguments (`get KEY --generation 2`), which is how
// operators type; the standard flag package stops at the first argument. After "--" everything
// is an argument, for keys that start with "-".
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if used := len(args) - fs.NArg(); used > 0 && args[used-1] == "--" {
			return append(pos, fs.Args()...), nil
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
}

// explain adds what to do to the store's errors, which already name the state and generation.
func explain(err error, cmd, namespace string) string {
	msg := err.Error()
	var gnf *statestore.GenerationNotFoundError
	switch {
	case errors.As(err, &gnf):
		return fmt.Sprintf("%s; `outpost-agent state history %s` lists them", msg, gnf.Key)
	case errors.Is(err, statestore.ErrNotFound) && cmd == "import":
		return msg + "; check --workspace and --suffix (the backend's Secret is tfstate-<workspace>-<suffix>) and --namespace"
	case errors.Is(err, statestore.ErrNotFound):
		return fmt.Sprintf("%s in namespace %s; `outpost-agent state list` lists the states there", msg, namespace)
	case errors.Is(err, statestore.ErrLocked) && cmd == "restore":
		return msg + "; wait for the run to finish, or if it is gone re-run with --force to force-unlock it first"
	case errors.Is(err, statestore.ErrLocked) && strings.HasPrefix(msg, "import kubernetes backend"):
		return msg + "; the kubernetes backend's locks never expire: if that run is over, re-run with --ignore-lock"
	case errors.Is(err, statestore.ErrLocked):
		return msg + "; wait for the run to finish, or if it is gone remove the lock with `outpost-agent state force-unlock`"
	case errors.Is(err, statestore.ErrCorrupt):
		return msg + "; `outpost-agent state history` shows the kept generations and `state restore KEY GENERATION` brings a good one back"
	case errors.Is(err, statestore.ErrEncryption):
		return msg + "; pass the key it was written with as --encryption-key-file"
	case errors.Is(err, statestore.ErrAlreadyExists):
		return msg + " (--overwrite; the current state stays in the history)"
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return fmt.Sprintf("%s; the state commands need get, list, create, update and delete on secrets and leases in namespace %s", msg, namespace)
	case errors.Is(err, statestore.ErrConflict):
		return msg + "; someone else wrote it meanwhile: check `outpost-agent state history` and retry"
	}
	return msg
}
