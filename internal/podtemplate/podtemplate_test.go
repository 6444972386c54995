package podtemplate

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name, in, wantPath, wantMsg string
	}{
		{"empty is minimal", "", "", ""},
		{"valid", `{"metadata":{"labels":{"team":"a"}},"spec":{"containers":[{"name":"main","image":"x"},{"name":"sidecar"}]}}`, "", ""},
		{"not JSON", `{"spec": {`, "", "not valid JSON"},
		{"not JSON line", "{\n\"spec\": x}", "", "line 2"},
		{"array", `[1,2]`, "", "must be a JSON object"},
		{"unknown field", `{"spec":{"containerz":[]}}`, "", "unknown field \"containerz\""},
		{"no main", `{"spec":{"containers":[{"name":"tf"}]}}`, "spec.containers", `needs a container named "main"`},
		{"restart policy", `{"spec":{"restartPolicy":"Always","containers":[{"name":"main"}]}}`, "spec.restartPolicy", "Never"},
		{"service account", `{"spec":{"serviceAccountName":"x","containers":[{"name":"main"}]}}`, "spec.serviceAccountName", "job.service_account"},
		{"main command", `{"spec":{"containers":[{"name":"x"},{"name":"main","command":["sh"]}]}}`, "spec.containers[1].command", "set by the runner"},
		{"main args", `{"spec":{"containers":[{"name":"main","args":["-c"]}]}}`, "spec.containers[0].args", "set by the runner"},
		{"owned label", `{"metadata":{"labels":{"outpost.dev/deployment-id":"x"}},"spec":{"containers":[{"name":"main"}]}}`, "metadata.labels.outpost.dev/deployment-id", "set by the runner"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := Parse(tc.in)
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if tpl.Spec.Containers[0].Name == "" {
					t.Fatal("decoded template lost its containers")
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			var e *Error
			errors.As(err, &e)
			if e.Path != tc.wantPath {
				t.Errorf("path %q, want %q", e.Path, tc.wantPath)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("message %q does not contain %q", err, tc.wantMsg)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	a, err := Normalize("{ \"spec\": {\"containers\": [{\"name\":\"main\", \"image\":\"i\"}]},\n \"metadata\": {} }")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Normalize(`{"metadata":{},"spec":{"containers":[{"image":"i","name":"main"}]}}`)
	if a != b {
		t.Fatalf("normal forms differ:\n%s\n%s", a, b)
	}
	if _, err := Normalize("{"); err == nil {
		t.Fatal("invalid JSON must fail")
	}
}
