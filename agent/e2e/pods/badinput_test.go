package pods

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// TestBadImages: each image a user can get wrong fails the deployment with a reason that names
// the image and says what to do, within the startup timeout, and leaves no Job, pod or Secret.
func TestBadImages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, image, pullPolicy string
		// jobsLogin replaces the pull Secret of the jobs namespace: "wrong" with a wrong
		// password, "missing" deletes it (the agent namespace keeps the right one).
		jobsLogin string
		reason    api.Reason
		want      []string
		// detail is what the cluster's words (the events' and the deployment's detail) hold.
		detail []string
		// within bounds the time from the enqueue to the failure.
		within time.Duration
	}{{
		// Nothing answers for .invalid: the pull fails and backs off until the startup timeout.
		name: "image that does not exist", image: "registry.outpost.invalid/acme/no-such-image:1",
		reason: executor.ReasonImagePull, within: startupTimeout + 20*time.Second,
		want:   []string{"did not start within 30s", "cannot get image registry.outpost.invalid/acme/no-such-image:1", "check that the image name and tag exist"},
		detail: []string{"registry.outpost.invalid/acme/no-such-image:1"},
	}, {
		// An air-gapped node without the image: no wait helps, so it fails at once.
		name: "node that cannot pull", image: "registry.outpost.invalid/acme/not-loaded:1", pullPolicy: "Never",
		reason: executor.ReasonImagePull, within: startupTimeout,
		want:   []string{"cannot start", "ErrImageNeverPull", "registry.outpost.invalid/acme/not-loaded:1", "load the image there"},
		detail: []string{"ErrImageNeverPull"},
	}, {
		// An image that runs, but has neither CLI: the job runner says so and exits.
		name: "image without terraform or tofu", image: registryVar + "/outpost-test/toolbox:1",
		reason: executor.ReasonExitCode, within: startupTimeout,
		want: []string{"main exited with code 2", "neither tofu nor terraform", "/outpost-test/toolbox:1", "jobs.image"},
	}, {
		// The registry refuses the jobs namespace's login: main cannot pull the job image (the
		// init container's agent image is on the node already, pulled by the agent pods with
		// the agent namespace's login). It fails with the registry's 401 and what to fix.
		name: "wrong registry password", jobsLogin: "wrong",
		reason: executor.ReasonImagePull, within: startupTimeout + 20*time.Second,
		want: []string{"did not start within 30s", "container main cannot get image", "/outpost-dev/outpost-job:", "401 Unauthorized",
			"refused the login of the job pod's imagePullSecrets (" + pullSecret + " in namespace", "image_pull_secret"},
		detail: []string{"401 Unauthorized"},
	}, {
		// The pull Secret exists in the agent's namespace only (NOTES.txt warns about it).
		name: "no pull secret in the jobs namespace", jobsLogin: "missing",
		reason: executor.ReasonImagePull, within: startupTimeout + 20*time.Second,
		want: []string{"did not start within 30s", "401 Unauthorized", "check that each exists in that namespace (the jobs namespace, not only the agent's)"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := envOptions{}
			if tc.image != "" {
				main := `{"name": "main", "image": "` + tc.image + `"`
				if tc.pullPolicy != "" {
					main += `, "imagePullPolicy": "` + tc.pullPolicy + `"`
				}
				o.podTemplate = `{"spec": {"containers": [` + main + `}]}}`
			}
			if tc.jobsLogin != "" {
				o.before = func(e *env) { e.breakJobsLogin(tc.jobsLogin) }
			}
			e := newEnv(t, o)
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
			if tc.detail != nil {
				// The registry's answer, apart from Outpost's advice, in the API and the metrics.
				e.checkReason(r.d.ID, tc.reason, tc.detail...)
			}
			t.Logf("failed after %s: %s", r.took.Round(100*time.Millisecond), r.d.Message)
			e.noLeftovers()
		})
	}
}

// breakJobsLogin makes the pull Secret of the jobs namespace log in with a wrong password
// ("wrong") or deletes it ("missing").
func (e *env) breakJobsLogin(how string) {
	e.t.Helper()
	secrets := e.c.Client().CoreV1().Secrets(e.jobsNS)
	if err := secrets.Delete(e.t.Context(), pullSecret, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if how == "wrong" {
		e.createPullSecret(e.jobsNS, pullSecret, e.c.Registry.DockerConfigJSON(e.c.Registry.Username, "not-the-password"))
	}
}
