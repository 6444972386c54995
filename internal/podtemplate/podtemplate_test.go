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
		{"unknown field", `{"spec":{"containerz":[]}}`, "", "unknown field \"spec.containerz\""},
		{"field name in another case", `{"Spec":{}}`, "", "unknown field \"Spec\""},
		{"key given twice", `{"spec":{"containers":[{"name":"main","command":["sh"]}]},"spec":{}}`, "", "duplicate field \"spec\""},
		{"restart policy", `{"spec":{"restartPolicy":"Always","containers":[{"name":"main"}]}}`, "spec.restartPolicy", "Never"},
		{"service account", `{"spec":{"serviceAccountName":"x","containers":[{"name":"main"}]}}`, "spec.serviceAccountName", "job.service_account"},
		{"main command", `{"spec":{"containers":[{"name":"x"},{"name":"main","command":["sh"]}]}}`, "spec.containers[1].command", "set by the runner"},
		{"main twice", `{"spec":{"containers":[{"name":"main"},{"name":"main","command":["sh"]}]}}`, "spec.containers[1].name", "must be unique"},
		{"main as init container", `{"spec":{"initContainers":[{"name":"main","command":["sh"]}]}}`, "spec.initContainers[0].name", "another name"},
		{"init and sidecar share a name", `{"spec":{"initContainers":[{"name":"x"}],"containers":[{"name":"x"}]}}`, "spec.containers[0].name", "spec.initContainers[0]"},
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

// TestParseAddsMain: templates that name no "main" container, as the closed agents' documentation
// writes them, are accepted and get one; a template that names it keeps its own.
func TestParseAddsMain(t *testing.T) {
	cases := []struct {
		name, in string
		want     []string // container names, in order
	}{
		{"empty", ``, []string{"main"}},
		{"empty object", `{}`, []string{"main"}},
		{"metadata only", `{"metadata":{"labels":{"app.kubernetes.io/name":"humanitec-runner"}}}`, []string{"main"}},
		{"spec without containers", `{"spec":{"nodeSelector":{"pool":"iac"},"imagePullSecrets":[{"name":"regcred"}]}}`, []string{"main"}},
		{"only a sidecar", `{"spec":{"containers":[{"name":"proxy","image":"envoy"}]}}`, []string{"main", "proxy"}},
		{"main named", `{"spec":{"containers":[{"name":"proxy"},{"name":"main","image":"tf"}]}}`, []string{"proxy", "main"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := Parse(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range tpl.Spec.Containers {
				got = append(got, c.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("containers %v, want %v", got, tc.want)
			}
			if m := Main(tpl); m.Name != MainContainer || len(tpl.Spec.Containers) != len(tc.want) {
				t.Fatalf("Main returned %q and changed the containers to %d", m.Name, len(tpl.Spec.Containers))
			}
		})
	}
	tpl, err := Parse(`{"metadata":{"labels":{"team":"a"}},"spec":{"nodeSelector":{"pool":"iac"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Labels["team"] != "a" || tpl.Spec.NodeSelector["pool"] != "iac" || tpl.Spec.Containers[0].Image != "" {
		t.Fatalf("the added main container or the rest of the template is not as written: %+v", tpl)
	}
	if err := Validate("job.pod_template", `{"metadata":{"labels":{"a":"b"}}}`); err != nil {
		t.Fatalf("Validate refuses a metadata-only template: %v", err)
	}
}

func TestNotes(t *testing.T) {
	for _, in := range []string{``, `{}`, `{"metadata":{"labels":{"a":"b"}}}`, `{"spec":{"containers":[{"name":"main"},{"name":"x"}]}}`, `{`} {
		if n := Notes(in); len(n) != 0 {
			t.Errorf("Notes(%s) = %v, want none", in, n)
		}
	}
	n := Notes(`{"spec":{"containers":[{"name":"terraform"}]}}`)
	if len(n) != 1 || !strings.Contains(n[0], `["terraform"] run beside it`) || !strings.Contains(n[0], `name it "main"`) {
		t.Fatalf("Notes = %v", n)
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
	// Numbers keep their text (FuzzParse found 2^53+1 rounded through float64).
	n, err := Normalize(`{"spec": {"terminationGracePeriodSeconds": 9007199254740993, "x": 1e2}}`)
	if err != nil || n != `{"spec":{"terminationGracePeriodSeconds":9007199254740993,"x":1e2}}` {
		t.Fatalf("Normalize changed numbers: %s (%v)", n, err)
	}
}
