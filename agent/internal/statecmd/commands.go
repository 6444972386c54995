package statecmd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

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
// typo in the generation never costs a running attempt its lock.
func (c *stateCmd) restore(ctx context.Context) error {
	if c.opts.force {
		if _, _, err := c.store.ReadGeneration(ctx, c.key, c.opts.generation); err != nil {
			return err
		}
		l, err := c.store.ForceUnlockFor(ctx, c.key, statestore.LockBreak{By: c.opts.by, Reason: fmt.Sprintf("restore --force of generation %d", c.opts.generation)})
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
// was released even if the holder changed meanwhile): the operator learns whose run to check. A
// lock that has not expired is its holder's while the agent renews it, so breaking it needs a
// reason; who broke which holder's lock and why is recorded on the lock (and reported to the
// orchestrator).
func (c *stateCmd) forceUnlock(ctx context.Context) error {
	if strings.TrimSpace(c.opts.reason) == "" {
		l, err := c.store.LockInfo(ctx, c.key)
		if err != nil {
			return err
		}
		if l != nil && !l.Expired(time.Now()) {
			c.printLock(l)
			return fmt.Errorf("state %q: %w: the lock of %s is live (renewed until %s): its run may still write; "+
				"break it only if you know that run is gone, with --reason", c.key, errLiveLock, holder(*l), l.Expires().UTC().Format(time.RFC3339))
		}
	}
	l, err := c.store.ForceUnlockFor(ctx, c.key, statestore.LockBreak{By: c.opts.by, Reason: c.opts.reason})
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

// errLiveLock refuses to break a live lock without a reason.
var errLiveLock = errors.New("refused")

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
	for _, row := range [][2]string{{"Holder", holder(*l)}, {"Pod", l.Info.Pod}, {"Lock ID", l.Info.ID}, {"Operation", l.Info.Operation},
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
