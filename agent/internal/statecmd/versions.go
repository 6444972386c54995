package statecmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

// show, diff and rollback of the versions a state keeps. They read the contents here, in the
// cluster, and print names only: resource instance addresses and output names, never an
// attribute or output value, so their output can go into a ticket or a chat.

// stateNames is what show prints of one version.
type stateNames struct {
	Generation int64        `json:"generation"`
	Serial     int64        `json:"serial"`
	Lineage    string       `json:"lineage,omitempty"`
	Resources  []string     `json:"resources"`
	Outputs    []outputName `json:"outputs"`
	// instances holds each resource instance's JSON, to tell changed ones apart in a diff.
	instances map[string]string
	outputs   map[string]string
}

type outputName struct {
	Name      string `json:"name"`
	Sensitive bool   `json:"sensitive,omitempty"`
}

// stateDoc is the part of a Terraform/OpenTofu state document show and diff read.
type stateDoc struct {
	Resources []struct {
		Module    string            `json:"module"`
		Mode      string            `json:"mode"`
		Type      string            `json:"type"`
		Name      string            `json:"name"`
		Instances []json.RawMessage `json:"instances"`
	} `json:"resources"`
	Outputs map[string]struct {
		Sensitive bool            `json:"sensitive"`
		Value     json.RawMessage `json:"value"`
	} `json:"outputs"`
}

// readNames reads one version (the current one when gen is 0) and names what it holds.
func (c *stateCmd) readNames(ctx context.Context, gen int64) (*stateNames, error) {
	var data []byte
	var g statestore.Generation
	var err error
	if gen > 0 {
		data, g, err = c.store.ReadGeneration(ctx, c.key, gen)
	} else {
		data, g, err = c.store.Read(ctx, c.key)
	}
	if err != nil {
		return nil, err
	}
	if g.ClientEncrypted {
		return nil, fmt.Errorf("state %q generation %d is encrypted by OpenTofu: its contents cannot be read here", c.key, g.Generation)
	}
	var doc stateDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("state %q generation %d: %w", c.key, g.Generation, err)
	}
	n := &stateNames{Generation: g.Generation, Serial: g.Serial, Lineage: g.Lineage, Resources: []string{}, Outputs: []outputName{},
		instances: map[string]string{}, outputs: map[string]string{}}
	for _, r := range doc.Resources {
		addr := r.Type + "." + r.Name
		if r.Mode == "data" {
			addr = "data." + addr
		}
		if r.Module != "" {
			addr = r.Module + "." + addr
		}
		for _, raw := range r.Instances {
			var inst struct {
				IndexKey json.RawMessage `json:"index_key"`
			}
			_ = json.Unmarshal(raw, &inst)
			a := addr
			if len(inst.IndexKey) > 0 && string(inst.IndexKey) != "null" {
				a += "[" + string(inst.IndexKey) + "]"
			}
			n.Resources = append(n.Resources, a)
			n.instances[a] = string(raw)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Outputs)) {
		o := doc.Outputs[name]
		n.Outputs = append(n.Outputs, outputName{Name: name, Sensitive: o.Sensitive})
		n.outputs[name] = string(o.Value)
	}
	slices.Sort(n.Resources)
	return n, nil
}

// show prints the resource instances and outputs of a version by name.
func (c *stateCmd) show(ctx context.Context) error {
	n, err := c.readNames(ctx, c.opts.generation)
	if err != nil {
		return err
	}
	if c.opts.json {
		return c.printJSON(n)
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

// versionDiff is what diff prints: names only.
type versionDiff struct {
	From, To                                     int64
	Added, Removed, Changed                      []string
	OutputsAdded, OutputsRemoved, OutputsChanged []string
}

// diff names the resource instances and outputs added, removed and changed from one version to
// another.
func (c *stateCmd) diff(ctx context.Context) error {
	a, err := c.readNames(ctx, c.opts.generation)
	if err != nil {
		return err
	}
	b, err := c.readNames(ctx, c.opts.to)
	if err != nil {
		return err
	}
	d := versionDiff{From: a.Generation, To: b.Generation}
	d.Added, d.Removed, d.Changed = compare(a.instances, b.instances)
	d.OutputsAdded, d.OutputsRemoved, d.OutputsChanged = compare(a.outputs, b.outputs)
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

// compare names the keys only in b (added), only in a (removed) and in both with other values.
func compare(a, b map[string]string) (added, removed, changed []string) {
	added, removed, changed = []string{}, []string{}, []string{}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		switch va, ok := a[k]; {
		case !ok:
			added = append(added, k)
		case va != b[k]:
			changed = append(changed, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if _, ok := b[k]; !ok {
			removed = append(removed, k)
		}
	}
	return added, removed, changed
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
