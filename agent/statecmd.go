package main

// `outpost-agent state` is the operator's tool for the states the agent keeps in Secrets (package
// statestore). Those states are chunked, gzipped and checksummed across several Secrets, so
// `kubectl get secret` cannot show, recover or unlock them; this command can, with the same code
// the agent serves them with. It runs anywhere with a kubeconfig, and inside the agent's pod
// (`kubectl exec deploy/outpost-agent -- outpost-agent state list`), where in-cluster credentials
// and OUTPOST_STATE_NAMESPACE from the chart make it work without flags.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/config"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

const stateUsage = `usage: outpost-agent state <command> [flags] [arguments]

Commands:
  list                         every state: key, generation, serial, lineage, size, updated, lock holder
  history KEY                  the kept generations of a state
  get KEY [--generation N]     write the state (or an older generation) to stdout, byte for byte
  restore KEY GENERATION       write that generation back as a new generation [--force: force-unlock first]
  lock-info KEY                show the lock of a state
  force-unlock KEY             remove the lock of a state (its holder can no longer write)
  import --suffix SUFFIX [--workspace WS] [--key KEY] [--overwrite] [--ignore-lock]
                               copy a state from the stock kubernetes backend's Secrets in the namespace

Flags (before or after the command):
  --namespace NS               namespace of the states (env OUTPOST_STATE_NAMESPACE; required)
  --kubeconfig PATH            kubeconfig (default $KUBECONFIG, else in-cluster credentials)
  --encryption-key-file PATH   the agent's state encryption key (raw or base64, 32 bytes; env
                               OUTPOST_STATE_ENCRYPTION_KEY_FILE): reads sealed states, seals what it writes
  --json                       list, history, lock-info: JSON instead of a table
`

// stateOpts are the flags of every state command.
type stateOpts struct {
	kubeconfig, namespace, keyFile string
	json, force, overwrite, ignore bool
	generation                     int64
	workspace, suffix, key         string
}

// flags registers the flags of cmd on a new FlagSet. Values already set (from flags before the
// command) are the defaults, so that global flags may come before or after the command.
func (o *stateOpts) flags(cmd string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("outpost-agent state "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, stateUsage) }
	fs.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "")
	fs.StringVar(&o.namespace, "namespace", o.namespace, "")
	fs.StringVar(&o.keyFile, "encryption-key-file", o.keyFile, "")
	fs.BoolVar(&o.json, "json", o.json, "")
	switch cmd {
	case "get":
		fs.Int64Var(&o.generation, "generation", 0, "")
	case "restore":
		fs.BoolVar(&o.force, "force", false, "")
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
}

// runState runs `outpost-agent state`. Exit codes: 0 done, 1 the operation failed (one line on
// stderr that names the state and what to do), 2 bad usage (with the usage text).
func runState(args []string, stdout, stderr io.Writer) int {
	o := &stateOpts{kubeconfig: os.Getenv("KUBECONFIG"), namespace: os.Getenv("OUTPOST_STATE_NAMESPACE"),
		keyFile: os.Getenv("OUTPOST_STATE_ENCRYPTION_KEY_FILE")}
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
		return usage("--namespace (or OUTPOST_STATE_NAMESPACE) is required: the namespace that holds the states")
	case o.generation < 0:
		return usage("--generation must be positive (without it, get reads the current generation)")
	case cmd == "import" && o.suffix == "":
		return usage("import needs --suffix: the secret_suffix of the kubernetes backend configuration")
	}
	if cmd == "restore" {
		if o.generation, err = strconv.ParseInt(pos[1], 10, 64); err != nil || o.generation <= 0 {
			return usage("restore: GENERATION must be a positive number, got %q", pos[1])
		}
	}
	key, err := (&config.Config{StateEncryptionKeyFile: o.keyFile}).LoadStateEncryptionKey()
	if err != nil {
		return usage("--encryption-key-file: %v", err)
	}

	fail := func(err error) int {
		fmt.Fprintf(stderr, "outpost-agent state %s: %s\n", cmd, strings.ReplaceAll(explain(err, cmd, o.namespace), "\n", " "))
		return exitRuntime
	}
	kube, err := stateKubeClient(o.kubeconfig)
	if err != nil {
		return fail(err)
	}
	// The store logs what it does for the agent's log; here the command reports in its own
	// words, so only list (which skips unreadable manifests) lets warnings through.
	log := slog.New(slog.DiscardHandler)
	if cmd == "list" {
		log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	store, err := statestore.NewChecked(kube, o.namespace, statestore.Options{EncryptionKey: key, Logger: log})
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

// stateKubeClient connects like kubectl would with the given kubeconfig (a path or a
// $KUBECONFIG-style list), or in-cluster when there is none.
func stateKubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	switch paths := filepath.SplitList(kubeconfig); {
	case len(paths) == 1:
		rc, err = clientcmd.BuildConfigFromFlags("", paths[0])
	case len(paths) > 1:
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: paths}
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	default:
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config (outside a cluster, set --kubeconfig or KUBECONFIG): %w", err)
	}
	rc.UserAgent = "outpost-agent-state/" + config.Version
	rc.Timeout = 60 * time.Second // a wedged API server must not hang an operator's shell
	return kubernetes.NewForConfig(rc)
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

// stateCmd runs one command against the store.
type stateCmd struct {
	store *statestore.Store
	opts  *stateOpts
	key   string
	out   io.Writer
}

// get writes the bytes the store verified against their SHA-256, unchanged (no newline added).
func (c *stateCmd) get(ctx context.Context) error {
	read := c.store.Read
	if c.opts.generation > 0 {
		read = func(ctx context.Context, key string) ([]byte, statestore.Generation, error) {
			return c.store.ReadGeneration(ctx, key, c.opts.generation)
		}
	}
	data, _, err := read(ctx, c.key)
	if err != nil {
		return err
	}
	_, err = c.out.Write(data)
	return err
}

// listEntry is one state in `list --json`.
type listEntry struct {
	Key         string     `json:"key"`
	Generation  int64      `json:"generation"`
	Serial      int64      `json:"serial"`
	Lineage     string     `json:"lineage,omitempty"`
	Size        int64      `json:"size"`
	SHA256      string     `json:"sha256"`
	UpdatedAt   time.Time  `json:"updated_at"`
	Generations int        `json:"generations"`
	LockedBy    string     `json:"locked_by,omitempty"`
	LockExpires *time.Time `json:"lock_expires,omitempty"`
}

func (c *stateCmd) list(ctx context.Context) error {
	states, err := c.store.List(ctx)
	if err != nil {
		return err
	}
	locks, err := c.store.ListLocks(ctx)
	if err != nil {
		return err
	}
	held := map[string]statestore.HeldLock{}
	for _, l := range locks {
		held[l.Key] = l.Lock
	}
	entries := make([]listEntry, 0, len(states))
	for _, s := range states {
		g := s.Current
		e := listEntry{Key: s.Key, Generation: g.Generation, Serial: g.Serial, Lineage: g.Lineage, Size: g.Size,
			SHA256: g.SHA256, UpdatedAt: g.UpdatedAt, Generations: s.Generations}
		if l, ok := held[s.Key]; ok {
			exp := l.Expires()
			e.LockedBy, e.LockExpires = holder(l), &exp
		}
		entries = append(entries, e)
	}
	if c.opts.json {
		return c.printJSON(entries)
	}
	if len(entries) == 0 {
		_, err := fmt.Fprintf(c.out, "no states in namespace %s\n", c.store.Namespace())
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tGENERATION\tSERIAL\tLINEAGE\tSIZE\tUPDATED\tLOCKED BY")
	for _, e := range entries {
		lockedBy := e.LockedBy
		if e.LockExpires != nil && time.Now().After(*e.LockExpires) {
			lockedBy += " (expired)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\t%s\n", e.Key, e.Generation, e.Serial, orDash(e.Lineage), e.Size,
			e.UpdatedAt.UTC().Format(time.RFC3339), orDash(lockedBy))
	}
	return tw.Flush()
}

func (c *stateCmd) history(ctx context.Context) error {
	gens, err := c.store.History(ctx, c.key)
	if err != nil || c.opts.json {
		return cmp.Or(err, c.printJSON(gens))
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GENERATION\tSERIAL\tSIZE\tSHA256\tUPDATED\tSOURCE")
	for _, g := range gens {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\n", g.Generation, g.Serial, g.Size, g.SHA256,
			g.UpdatedAt.UTC().Format(time.RFC3339), orDash(g.Source))
	}
	return tw.Flush()
}

// restore with --force breaks the lock only once the generation is known to be readable, so a
// typo in the generation never costs a running job its lock.
func (c *stateCmd) restore(ctx context.Context) error {
	if c.opts.force {
		if _, _, err := c.store.ReadGeneration(ctx, c.key, c.opts.generation); err != nil {
			return err
		}
		l, err := c.store.ForceUnlock(ctx, c.key)
		switch {
		case err == nil:
			fmt.Fprintf(c.out, "force-unlocked state %q, which was locked by:\n", c.key)
			c.printLock(l)
		case !errors.Is(err, statestore.ErrNotLocked):
			return err
		}
	}
	g, err := c.store.Restore(ctx, c.key, c.opts.generation)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "restored state %q generation %d as generation %d (serial %d, %d bytes, sha256 %s)\n",
		c.key, c.opts.generation, g.Generation, g.Serial, g.Size, g.SHA256)
	return nil
}

// lockInfo shows the lock; --json prints the Terraform lock info as the CLIs exchange it.
func (c *stateCmd) lockInfo(ctx context.Context) error {
	l, err := c.store.LockInfo(ctx, c.key)
	switch {
	case err != nil:
		return err
	case l == nil:
		return c.notLocked(ctx, "")
	case c.opts.json:
		return c.printJSON(l.Info)
	}
	c.printLock(l)
	return nil
}

// forceUnlock prints the lock it removed (returned by the store, so it is exactly the one that
// was released even if the holder changed meanwhile): the operator learns whose run to check.
func (c *stateCmd) forceUnlock(ctx context.Context) error {
	l, err := c.store.ForceUnlock(ctx, c.key)
	if errors.Is(err, statestore.ErrNotLocked) {
		return c.notLocked(ctx, "; nothing to do")
	}
	if err != nil {
		return err
	}
	c.printLock(l)
	fmt.Fprintf(c.out, "force-unlocked state %q; writes under lock ID %s are refused from now on\n", c.key, l.Info.ID)
	return nil
}

// notLocked reports an unlocked state, but a key that names neither a lock nor a state is a typo
// and is reported as not found. (A lock without a state is normal: a first run locks before it
// has written anything.)
func (c *stateCmd) notLocked(ctx context.Context, suffix string) error {
	if _, err := c.store.History(ctx, c.key); err != nil {
		return err
	}
	_, err := fmt.Fprintf(c.out, "state %q is not locked%s\n", c.key, suffix)
	return err
}

func (c *stateCmd) importStock(ctx context.Context) error {
	opts := []statestore.ImportOption{}
	if c.opts.key != "" {
		opts = append(opts, statestore.ImportKey(c.opts.key))
	}
	if c.opts.overwrite {
		opts = append(opts, statestore.ImportOverwrite())
	}
	if c.opts.ignore {
		opts = append(opts, statestore.ImportIgnoreLock())
	}
	res, err := c.store.ImportFromKubernetesBackend(ctx, c.opts.workspace, c.opts.suffix, opts...)
	if err != nil {
		return err
	}
	g := res.Generation
	if res.Unchanged {
		fmt.Fprintf(c.out, "state %q already holds this state (generation %d); nothing to do\n", res.Key, g.Generation)
		return nil
	}
	fmt.Fprintf(c.out, "imported %s into state %q generation %d (serial %d, lineage %s, %d bytes)\n",
		strings.Join(res.SourceSecrets, ", "), res.Key, g.Generation, g.Serial, orDash(g.Lineage), g.Size)
	if len(res.IgnoredSecrets) > 0 {
		fmt.Fprintf(c.out, "ignored stale parts beyond the end of the state: %s\n", strings.Join(res.IgnoredSecrets, ", "))
	}
	fmt.Fprintln(c.out, "the kubernetes backend's Secrets were left as they were; delete them once nothing uses that backend")
	return nil
}

func (c *stateCmd) printLock(l *statestore.HeldLock) {
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	at := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	expires := at(l.Expires())
	if l.Expired(time.Now()) {
		expires += " (expired: a new lock may take it over)"
	}
	for _, row := range [][2]string{{"Holder", holder(*l)}, {"Lock ID", l.Info.ID}, {"Operation", l.Info.Operation},
		{"Who", l.Info.Who}, {"Info", l.Info.Info}, {"Version", l.Info.Version}, {"Path", l.Info.Path},
		{"Created", at(l.Info.Created)}, {"Acquired", at(l.AcquireTime)}, {"Renewed", at(l.RenewTime)}, {"Expires", expires}} {
		fmt.Fprintf(tw, "%s:\t%s\n", row[0], orDash(row[1]))
	}
	_ = tw.Flush()
}

func (c *stateCmd) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func holder(l statestore.HeldLock) string {
	if l.Info.Holder != "" {
		return l.Info.Holder
	}
	return l.Info.ID
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
