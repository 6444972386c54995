package provider

import (
	"context"
	"testing"
)

func TestFormatSeconds(t *testing.T) {
	for secs, want := range map[int]string{60: "1m", 90: "1m30s", 3600: "1h", 5400: "1h30m", 86400: "24h", 3661: "1h1m1s"} {
		if got := formatSeconds(secs); got != want {
			t.Errorf("formatSeconds(%d) = %q, want %q", secs, got, want)
		}
	}
}

func TestParseJobTimeout(t *testing.T) {
	for in, want := range map[string]int{"1m": 60, "90m": 5400, "1h30m": 5400, "24h": 86400} {
		if got, err := parseJobTimeout(in); err != nil || got != want {
			t.Errorf("parseJobTimeout(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"59s", "25h", "1.5s", "soon", ""} {
		if _, err := parseJobTimeout(in); err == nil {
			t.Errorf("parseJobTimeout(%q) succeeded", in)
		}
	}
}

func TestDurationSemanticEquality(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		a, b  string
		equal bool
	}{
		{"1h", "60m", true},
		{"1h30m", "90m", true},
		{"1h", "61m", false},
		{"soon", "soon", true},
		{"soon", "1h", false},
	} {
		got, diags := newDurationValue(tc.a).StringSemanticEquals(ctx, newDurationValue(tc.b))
		if diags.HasError() || got != tc.equal {
			t.Errorf("%q ~ %q: got %v (%v), want %v", tc.a, tc.b, got, diags, tc.equal)
		}
	}
}

func TestPodTemplateSemanticEquality(t *testing.T) {
	ctx := context.Background()
	a := `{"spec":{"containers":[{"name":"main"}]},"metadata":{"labels":{"a":"b"}}}`
	b := "{\n  \"metadata\": {\"labels\": {\"a\": \"b\"}},\n  \"spec\": {\"containers\": [{\"name\": \"main\"}]}\n}"
	c := `{"spec":{"containers":[{"name":"main","image":"x"}]}}`
	for _, tc := range []struct {
		x, y  string
		equal bool
	}{{a, b, true}, {a, c, false}, {"{", "{", true}, {"{", a, false}} {
		got, diags := newPodTemplateValue(tc.x).StringSemanticEquals(ctx, newPodTemplateValue(tc.y))
		if diags.HasError() || got != tc.equal {
			t.Errorf("%q ~ %q: got %v, want %v", tc.x, tc.y, got, tc.equal)
		}
	}
}
