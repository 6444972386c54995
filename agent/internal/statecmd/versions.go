package statecmd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

// show, diff and rollback of the versions a state keeps. They read the contents here, in the
// cluster, and print names only: resource instance addresses and output names, never an
// attribute or output value, so their output can go into a ticket or a chat.

// show prints the resource instances and outputs of a version by name.
func (c *stateCmd) show(ctx context.Context) error {
	n, err := c.store.Contents(ctx, c.key, c.opts.generation)
	if err != nil {
		return err
	}
	if c.opts.json {
		return c.printJSON(n.StateContents)
	}
	fmt.Fprintf(c.out, "state %q generation %d (serial %d, lineage %s): %d resource instances, %d outputs\n",
		c.key, n.Generation, n.Serial, orDash(n.Lineage), len(n.Resources), len(n.Outputs))
	for _, r := range n.Resources {
		fmt.Fprintf(c.out, "  %s\n", r)
	}
	if len(n.Outputs) > 0 {
		fmt.Fprintln(c.out, "outputs (values not shown):")
	}
	for _, o := range n.Outputs {
		sens := ""
		if o.Sensitive {
			sens = " (sensitive)"
		}
		fmt.Fprintf(c.out, "  %s%s\n", o.Name, sens)
	}
	return nil
}

// diff names the resource instances and outputs added, removed and changed from one version to
// another.
func (c *stateCmd) diff(ctx context.Context) error {
	a, err := c.store.Contents(ctx, c.key, c.opts.generation)
	if err != nil {
		return err
	}
	b, err := c.store.Contents(ctx, c.key, c.opts.to)
	if err != nil {
		return err
	}
	d := statestore.Diff(a, b)
	if c.opts.json {
		return c.printJSON(d)
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "state %q from generation %d (serial %d) to generation %d (serial %d): %d added, %d removed, %d changed\n",
		c.key, a.Generation, a.Serial, b.Generation, b.Serial, len(d.Added), len(d.Removed), len(d.Changed))
	for _, line := range [][2][]string{{{"+"}, d.Added}, {{"-"}, d.Removed}, {{"~"}, d.Changed}} {
		for _, r := range line[1] {
			fmt.Fprintf(tw, "  %s %s\n", line[0][0], r)
		}
	}
	for _, line := range [][2][]string{{{"+"}, d.OutputsAdded}, {{"-"}, d.OutputsRemoved}, {{"~"}, d.OutputsChanged}} {
		for _, o := range line[1] {
			fmt.Fprintf(tw, "  %s output %s\n", line[0][0], o)
		}
	}
	return tw.Flush()
}

// rollback writes an old version back as the newest, under the lock, recording who and why.
func (c *stateCmd) rollback(ctx context.Context) error {
	if strings.TrimSpace(c.opts.reason) == "" {
		return errors.New("rollback needs --reason: it is recorded with the new version (and shown by the orchestrator)")
	}
	g, err := c.store.Rollback(ctx, c.key, c.opts.generation, statestore.RollbackOptions{By: c.opts.by, Reason: c.opts.reason})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "rolled state %q back to generation %d: written as generation %d, serial %d (%s)\n",
		c.key, c.opts.generation, g.Generation, g.Serial, g.Source)
	return nil
}

// positiveGeneration parses a GENERATION argument.
func positiveGeneration(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("GENERATION must be a positive number, got %q", s)
	}
	return n, nil
}
