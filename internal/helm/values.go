package helm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// ParseValues parses a YAML or JSON document of chart values. An empty document is no values.
func ParseValues(doc string) (map[string]any, error) {
	if strings.TrimSpace(doc) == "" {
		return map[string]any{}, nil
	}
	var v any
	if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
		return nil, fmt.Errorf("parse values: %w", err)
	}
	if v == nil {
		return map[string]any{}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("parse values: the document must be a map of chart values (YAML or JSON object), not a list or a scalar")
	}
	return m, nil
}

// MergeValues returns base with override merged into it: maps merge key by key, any other
// value in override replaces the one in base, and a null in override removes the key (as in
// Helm). Neither argument is changed.
func MergeValues(base, override map[string]any) map[string]any {
	out := make(map[string]any, len(base))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range override {
		if v == nil {
			delete(out, k)
			continue
		}
		if om, ok := v.(map[string]any); ok {
			if bm, ok := out[k].(map[string]any); ok {
				out[k] = MergeValues(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// ValuesSHA256 returns the hex SHA-256 of the values' canonical JSON (object keys sorted). Values
// that went through a JSON round trip (as Helm stores them) hash the same as the originals.
func ValuesSHA256(vals map[string]any) (string, error) {
	if vals == nil {
		vals = map[string]any{}
	}
	b, err := json.Marshal(vals)
	if err != nil {
		return "", fmt.Errorf("encode values: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
