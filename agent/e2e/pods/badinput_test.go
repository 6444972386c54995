package pods

import (
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// TestBadImages: each image a user can get wrong fails the deployment with a reason that names
// the image and says what to do, within the startup timeout, and leaves no Job, pod or Secret.
func TestBadImages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, image, pullPolicy string
		reason                  string
		want                    []string
		// within bounds the time from the enqueue to the failure.
		within time.Duration
	}{{
		// Nothing answers for .invalid: the pull fails and backs off until the startup timeout.
		name: "image that does not exist", image: "registry.outpost.invalid/acme/no-such-image:1",
		reason: executor.ReasonImagePull, within: startupTimeout + 20*time.Second,
		want: []string{"did not start within 30s", "cannot get image registry.outpost.invalid/acme/no-such-image:1", "check that the image name and tag exist"},
	}, {
		// An air-gapped node without the image: no wait helps, so it fails at once.
		name: "node that cannot pull", image: "registry.outpost.invalid/acme/not-loaded:1", pullPolicy: "Never",
		reason: executor.ReasonImagePull, within: startupTimeout,
		want: []string{"cannot start", "ErrImageNeverPull", "registry.outpost.invalid/acme/not-loaded:1", "load the image there"},
	}, {
		// An image that runs, but has neither CLI: the job runner says so and exits.
		name: "image without terraform or tofu", image: testbed.ToolboxImage,
		reason: executor.ReasonExitCode, within: startupTimeout,
		want: []string{"main exited with code 2", "neither tofu nor terraform", "image " + testbed.ToolboxImage, "jobs.image"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			main := `{"name": "main", "image": "` + tc.image + `"`
			if tc.pullPolicy != "" {
				main += `, "imagePullPolicy": "` + tc.pullPolicy + `"`
			}
			e := newEnv(t, envOptions{podTemplate: `{"spec": {"containers": [` + main + `}]}}`})
			r := e.deploy(api.OperationApply, greeting, "bad")
			if r.d.Status != api.StatusFailed || r.d.Reason != tc.reason {
				t.Fatalf("deployment %s (reason %q: %s), want failed with reason %s", r.d.Status, r.d.Reason, r.d.Message, tc.reason)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.d.Message, w) {
					t.Errorf("message lacks %q: %s", w, r.d.Message)
				}
			}
			if r.took > tc.within {
				t.Errorf("failed %s after the enqueue, want within %s", r.took.Round(time.Second), tc.within)
			}
			t.Logf("failed after %s: %s", r.took.Round(100*time.Millisecond), r.d.Message)
			e.noLeftovers()
		})
	}
}
