package kubernetes

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
)

// TestBuildJobMinimalTemplates: templates that name no "main" container (the closed agents'
// documented examples set only metadata, or only a few spec fields) build exactly the Job that
// the same template with an empty "main" container builds, so the provider's plan, the
// orchestrator's registration and the agent's Job all agree on what runs.
func TestBuildJobMinimalTemplates(t *testing.T) {
	cases := []struct{ name, minimal, explicit string }{
		{"metadata only",
			`{"metadata":{"labels":{"app.kubernetes.io/name":"humanitec-runner"}}}`,
			`{"metadata":{"labels":{"app.kubernetes.io/name":"humanitec-runner"}},"spec":{"containers":[{"name":"main"}]}}`},
		{"spec without containers",
			`{"spec":{"nodeSelector":{"pool":"iac"},"imagePullSecrets":[{"name":"regcred"}]}}`,
			`{"spec":{"nodeSelector":{"pool":"iac"},"imagePullSecrets":[{"name":"regcred"}],"containers":[{"name":"main"}]}}`},
		{"sidecar only",
			`{"spec":{"containers":[{"name":"proxy","image":"envoy:1"}]}}`,
			`{"spec":{"containers":[{"name":"main"},{"name":"proxy","image":"envoy:1"}]}}`},
		{"empty", ``, `{"spec":{"containers":[{"name":"main"}]}}`},
	}
	now := time.Unix(1000, 0)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, gotSecret, err := BuildJob(claim(tc.minimal), "opst_test", opts, now)
			if err != nil {
				t.Fatalf("minimal template refused: %v", err)
			}
			want, wantSecret, err := BuildJob(claim(tc.explicit), "opst_test", opts, now)
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, want) || !equality.Semantic.DeepEqual(gotSecret, wantSecret) {
				t.Fatalf("Jobs differ:\nminimal:  %+v\nexplicit: %+v", got.Spec.Template, want.Spec.Template)
			}
			main := got.Spec.Template.Spec.Containers[0]
			if main.Name != "main" || main.Image != opts.Image || len(main.Command) == 0 {
				t.Fatalf("main container = %+v", main)
			}
		})
	}
}
