package chart_test

import (
	"encoding/json"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
)

// TestValuesDocumented keeps values.yaml, values.schema.json and the README's values table in
// step: every value has a row, every row names a value the schema knows, and the schema knows
// every value (its additionalProperties: false would otherwise refuse the defaults).
func TestValuesDocumented(t *testing.T) {
	readme := readFile(t, "README.md")
	section := readme[strings.Index(readme, "## Values"):]
	if next := strings.Index(section[1:], "\n## "); next >= 0 {
		section = section[:next+1]
	}
	rowKey := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")
	var rows []string
	for _, m := range rowKey.FindAllStringSubmatch(section, -1) {
		rows = append(rows, m[1])
	}
	if len(rows) < 10 {
		t.Fatalf("found %d rows in the README's values table", len(rows))
	}

	var schema schemaNode
	if err := json.Unmarshal([]byte(readFile(t, "values.schema.json")), &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	var values map[string]any
	if err := yaml.Unmarshal([]byte(readFile(t, "values.yaml")), &values); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}

	// Every default value, and every required value (they have no default), has a row.
	paths := leafPaths("", values)
	for _, req := range schema.Required {
		if req == "privateKey" {
			paths = append(paths, "privateKey.existingSecret")
			continue
		}
		paths = append(paths, req)
	}
	for _, p := range paths {
		if !slices.ContainsFunc(rows, func(row string) bool { return p == row || strings.HasPrefix(p, row+".") }) {
			t.Errorf("value %s has no row in the README's values table", p)
		}
	}
	// Every row is a value of the schema.
	for _, row := range rows {
		if !schema.has(strings.Split(row, ".")) {
			t.Errorf("README documents %s, which values.schema.json does not define", row)
		}
	}
	// Every top-level value of values.yaml is in the schema.
	for k := range values {
		if _, ok := schema.Properties[k]; !ok {
			t.Errorf("values.yaml sets %s, which values.schema.json does not define", k)
		}
	}
}

// schemaNode is the part of a JSON schema the documentation check walks.
type schemaNode struct {
	Properties map[string]*schemaNode `json:"properties"`
	Required   []string               `json:"required"`
	Ref        string                 `json:"$ref"`
}

func (n *schemaNode) has(path []string) bool {
	if len(path) == 0 {
		return true
	}
	child, ok := n.Properties[path[0]]
	return ok && child.has(path[1:])
}

// leafPaths lists the dotted paths of values.yaml down to scalars, lists and empty maps.
func leafPaths(prefix string, m map[string]any) []string {
	var out []string
	for k, v := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			out = append(out, leafPaths(p, sub)...)
			continue
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := fs.ReadFile(agentchart.Files(), name)
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return string(data)
}
