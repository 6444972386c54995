package cli

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	ctyjson "github.com/zclconf/go-cty/cty/json"
	"sigs.k8s.io/yaml"
)

// variables builds a deployment's Terraform variables the way terraform does: the --var-file
// files in order, then each --var NAME=VALUE (a string, as terraform's -var for primitive
// types; lists and objects go in a var file).
func variables(files, vars []string) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	for _, f := range files {
		vs, err := readVarFile(f)
		if err != nil {
			return nil, err
		}
		for k, v := range vs {
			out[k] = v
		}
	}
	for _, kv := range vars {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, &usageError{fmt.Errorf("--var %q: write it as NAME=VALUE", kv)}
		}
		b, _ := json.Marshal(value)
		out[name] = b
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// readVarFile reads a .tfvars (HCL), .tfvars.json / .json, or .yaml / .yml file of variables.
func readVarFile(path string) (map[string]json.RawMessage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--var-file: %w", err)
	}
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".json", ".yaml", ".yml":
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, fmt.Errorf("--var-file %s: %w", path, err)
		}
		var out map[string]json.RawMessage
		if err := json.Unmarshal(js, &out); err != nil || out == nil {
			return nil, fmt.Errorf("--var-file %s must hold one object of NAME: VALUE", path)
		}
		return out, nil
	}
	return readTFVars(path, data)
}

// readTFVars evaluates a .tfvars file: constant expressions only, as terraform allows there.
func readTFVars(path string, data []byte) (map[string]json.RawMessage, error) {
	f, diags := hclsyntax.ParseConfig(data, path, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("--var-file: %s", diags.Error())
	}
	attrs, diags := f.Body.JustAttributes()
	if diags.HasErrors() {
		return nil, fmt.Errorf("--var-file: %s", diags.Error())
	}
	out := map[string]json.RawMessage{}
	for _, n := range slices.Sorted(maps.Keys(attrs)) {
		v, diags := attrs[n].Expr.Value(nil)
		if diags.HasErrors() {
			return nil, fmt.Errorf("--var-file: %s", diags.Error())
		}
		b, err := ctyjson.Marshal(v, v.Type())
		if err != nil {
			return nil, fmt.Errorf("--var-file %s: %s: %w", path, n, err)
		}
		out[n] = b
	}
	return out, nil
}
