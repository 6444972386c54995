// Package plansummary makes the redacted summary of a saved plan that is all of the plan to leave
// the cluster: which resources and outputs change and how, which attributes change, by name, and
// the state the plan was made against. It reads the CLI's `show -json` of the plan and the plan
// file itself; no attribute or output value is kept past the comparison that finds what changed.
package plansummary

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"reflect"
	"slices"
	"sort"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// ErrNotAPlan is returned when the input is not the `show -json` of a plan (the JSON of a state,
// say, or of another tool).
var ErrNotAPlan = errors.New("not the JSON of a plan")

// showPlan holds the parts of `show -json <planfile>` a summary reads. The values (before, after)
// stay raw and are only compared.
type showPlan struct {
	FormatVersion   string                  `json:"format_version"`
	ResourceChanges []resourceChange        `json:"resource_changes"`
	ResourceDrift   []resourceChange        `json:"resource_drift"`
	OutputChanges   map[string]outputChange `json:"output_changes"`
}

type resourceChange struct {
	Address         string `json:"address"`
	PreviousAddress string `json:"previous_address"`
	ActionReason    string `json:"action_reason"`
	Change          struct {
		Actions      []string          `json:"actions"`
		Before       json.RawMessage   `json:"before"`
		After        json.RawMessage   `json:"after"`
		AfterUnknown json.RawMessage   `json:"after_unknown"`
		ReplacePaths []json.RawMessage `json:"replace_paths"`
	} `json:"change"`
}

type outputChange struct {
	Actions         []string        `json:"actions"`
	BeforeSensitive json.RawMessage `json:"before_sensitive"`
	AfterSensitive  json.RawMessage `json:"after_sensitive"`
}

// FromPlan summarises a plan from its `show -json` (showJSON) and the plan file it was made from
// (planFile, for the lineage and serial of the state the plan was made against; "" leaves them
// unset).
func FromPlan(showJSON io.Reader, planFile string) (api.PlanSummary, error) {
	var p showPlan
	if err := json.NewDecoder(showJSON).Decode(&p); err != nil {
		return api.PlanSummary{}, fmt.Errorf("reading the plan's JSON: %w", err)
	}
	if p.FormatVersion == "" {
		return api.PlanSummary{}, ErrNotAPlan
	}
	var s api.PlanSummary
	for _, rc := range p.ResourceChanges {
		c, ok := summarise(rc)
		if !ok {
			continue
		}
		s.ResourceChanges = append(s.ResourceChanges, c)
		count(&s.Counts, c.Action)
	}
	for _, rc := range p.ResourceDrift {
		if c, ok := summarise(rc); ok {
			s.Drift = append(s.Drift, c)
		}
	}
	names := make([]string, 0, len(p.OutputChanges))
	for name := range p.OutputChanges {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		oc := p.OutputChanges[name]
		action, ok := actionOf(oc.Actions)
		if !ok {
			continue
		}
		s.OutputChanges = append(s.OutputChanges, api.OutputChange{
			Name:      name,
			Action:    action,
			Sensitive: marksSensitive(oc.BeforeSensitive) || marksSensitive(oc.AfterSensitive),
		})
	}
	if planFile != "" {
		lineage, serial, err := PriorState(planFile)
		if err != nil {
			return api.PlanSummary{}, err
		}
		s.Lineage, s.Serial = lineage, serial
	}
	return s, nil
}

// summarise turns one resource change into its summary; false for a change that changes nothing.
func summarise(rc resourceChange) (api.ResourceChange, bool) {
	action, ok := actionOf(rc.Change.Actions)
	if !ok {
		return api.ResourceChange{}, false
	}
	c := api.ResourceChange{
		Address:         rc.Address,
		PreviousAddress: rc.PreviousAddress,
		Action:          action,
		Reason:          rc.ActionReason,
		ReplaceBecause:  replaceBecause(rc.Change.ReplacePaths),
	}
	if action != api.PlanDelete {
		c.Attributes = changedAttributes(rc.Change.Before, rc.Change.After, rc.Change.AfterUnknown)
	}
	return c, true
}

// actionOf maps the CLI's list of actions to one; false for a no-op.
func actionOf(actions []string) (api.PlanAction, bool) {
	switch {
	case len(actions) == 2 && slices.Contains(actions, "create") && slices.Contains(actions, "delete"):
		return api.PlanReplace, true
	case len(actions) != 1:
		return "", false
	}
	switch actions[0] {
	case "create":
		return api.PlanCreate, true
	case "update":
		return api.PlanUpdate, true
	case "delete":
		return api.PlanDelete, true
	case "read":
		return api.PlanRead, true
	case "forget":
		return api.PlanForget, true
	}
	return "", false
}

func count(c *api.PlanCounts, a api.PlanAction) {
	switch a {
	case api.PlanCreate:
		c.Create++
	case api.PlanUpdate:
		c.Update++
	case api.PlanReplace:
		c.Replace++
	case api.PlanDelete:
		c.Delete++
	case api.PlanRead:
		c.Read++
	case api.PlanForget:
		c.Forget++
	}
}

// replaceBecause names the top-level attribute of each path that forces a replacement. Only the
// first step is kept: it is a schema name, while deeper steps can be map keys a user chose.
func replaceBecause(paths []json.RawMessage) []string {
	var out []string
	for _, raw := range paths {
		var steps []json.RawMessage
		if json.Unmarshal(raw, &steps) != nil || len(steps) == 0 {
			continue
		}
		var name string
		if json.Unmarshal(steps[0], &name) != nil || slices.Contains(out, name) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// changedAttributes names the top-level attributes whose value differs between before and after,
// or that become known only on apply, sorted. The values are compared and dropped.
func changedAttributes(before, after, afterUnknown json.RawMessage) []string {
	b, a, u := object(before), object(after), object(afterUnknown)
	seen := map[string]bool{}
	for name, av := range a {
		bv, had := b[name]
		if !had {
			if !isNull(av) {
				seen[name] = true
			}
			continue
		}
		if !sameJSON(av, bv) {
			seen[name] = true
		}
	}
	for name, bv := range b {
		if _, has := a[name]; !has && !isNull(bv) {
			seen[name] = true
		}
	}
	for name, uv := range u {
		if marksSensitive(uv) { // after_unknown marks like after_sensitive: true, or a structure holding true
			seen[name] = true
		}
	}
	out := make([]string, 0, len(seen))
	for name := range seen {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// object decodes a JSON object into its members; anything else (null, a bare value) has none.
func object(raw json.RawMessage) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// sameJSON compares two JSON values by meaning: the CLIs print them the same way, so equal bytes
// settle it cheaply; otherwise they are decoded and compared.
func sameJSON(x, y json.RawMessage) bool {
	if bytes.Equal(x, y) {
		return true
	}
	var vx, vy any
	if json.Unmarshal(x, &vx) != nil || json.Unmarshal(y, &vy) != nil {
		return false
	}
	return reflect.DeepEqual(vx, vy)
}

// marksSensitive reports whether a sensitivity (or unknown-ness) mark is true anywhere: the CLIs
// write `true` for the whole value, or a structure of the value's shape with `true` at the parts.
func marksSensitive(raw json.RawMessage) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch t := v.(type) {
		case bool:
			return t
		case []any:
			return slices.ContainsFunc(t, walk)
		case map[string]any:
			for _, e := range t {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

// PriorState reads the lineage and serial of the state a plan file was made against: the plan file
// is a zip archive whose `tfstate` entry is that state. Only the state's first members are read:
// both CLIs write version, terraform_version, serial and lineage before the resources. A plan made
// with no state yet has lineage "" and serial 0.
func PriorState(planFile string) (lineage string, serial int64, err error) {
	zr, err := zip.OpenReader(planFile)
	if err != nil {
		return "", 0, fmt.Errorf("opening the plan file %s: %w", planFile, err)
	}
	defer func() { _ = zr.Close() }()
	f, err := zr.Open("tfstate")
	if errors.Is(err, fs.ErrNotExist) { // planned against no state at all
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("reading the plan file %s: %w", planFile, err)
	}
	defer func() { _ = f.Close() }()
	dec := json.NewDecoder(f)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", 0, fmt.Errorf("reading the state in the plan file %s: not a JSON object", planFile)
	}
	var haveLineage, haveSerial bool
	for dec.More() && (!haveLineage || !haveSerial) {
		tok, err := dec.Token()
		if err != nil {
			return "", 0, fmt.Errorf("reading the state in the plan file %s: %w", planFile, err)
		}
		switch tok {
		case "lineage":
			err, haveLineage = dec.Decode(&lineage), true
		case "serial":
			err, haveSerial = dec.Decode(&serial), true
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return "", 0, fmt.Errorf("reading the state in the plan file %s: %w", planFile, err)
		}
	}
	return lineage, serial, nil
}
