package statestore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Contents and Diff read what a version of a state holds and name it: resource instance
// addresses and output names, never an attribute or output value. Both `outpost-agent state
// show|diff` and the state operations the orchestrator hands the agent use them, so what
// leaves the cluster is exactly what the admin command prints.

// Contents is what one version of a state holds, by name.
type Contents struct {
	api.StateContents
	// instances and outputs hold each resource instance's and output's JSON (compacted), only
	// to tell changed ones apart in a diff; they never leave this package.
	instances map[string]string
	outputs   map[string]string
}

// stateDoc is the part of a Terraform/OpenTofu state document Contents reads.
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

// Contents reads generation gen of the state (the current one when gen is 0) and names what it
// holds. An OpenTofu client-side encrypted state cannot be read here (ErrClientEncrypted).
func (s *Store) Contents(ctx context.Context, key string, gen int64) (*Contents, error) {
	var data []byte
	var g Generation
	var err error
	if gen > 0 {
		data, g, err = s.ReadGeneration(ctx, key, gen)
	} else {
		data, g, err = s.Read(ctx, key)
	}
	if err != nil {
		return nil, err
	}
	if g.ClientEncrypted {
		return nil, fmt.Errorf("state %q generation %d: %w: its contents cannot be read in the cluster", key, g.Generation, ErrClientEncrypted)
	}
	var doc stateDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("state %q generation %d: %w", key, g.Generation, err)
	}
	c := &Contents{StateContents: api.StateContents{Generation: g.Generation, Serial: g.Serial, Lineage: g.Lineage,
		Resources: []string{}, Outputs: []api.StateOutputName{}}, instances: map[string]string{}, outputs: map[string]string{}}
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
			c.Resources = append(c.Resources, a)
			c.instances[a] = compact(raw)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Outputs)) {
		o := doc.Outputs[name]
		c.Outputs = append(c.Outputs, api.StateOutputName{Name: name, Sensitive: o.Sensitive})
		c.outputs[name] = compact(o.Value)
	}
	slices.Sort(c.Resources)
	return c, nil
}

// compact is the JSON without insignificant whitespace: the CLIs indent a state, a rollback
// writes it compact, and neither is a change.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// Diff names the resource instances and outputs added, removed and changed from a to b.
func Diff(a, b *Contents) api.StateDiff {
	d := api.StateDiff{From: a.Generation, To: b.Generation, FromSerial: a.Serial, ToSerial: b.Serial}
	d.Added, d.Removed, d.Changed = compare(a.instances, b.instances)
	d.OutputsAdded, d.OutputsRemoved, d.OutputsChanged = compare(a.outputs, b.outputs)
	return d
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
