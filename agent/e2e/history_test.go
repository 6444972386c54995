package e2e

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// TestHistoryKeepsTheLastJobs: after 15 deployments (10 succeeded, then 5 failed) the cluster
// holds exactly the configured number of Jobs of each outcome, no live one and no token Secret,
// and every deployment's result and events are still read at the orchestrator.
func TestHistoryKeepsTheLastJobs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		flags             []string
		succeeded, failed int
		// concurrency 1 finishes the deployments in the order they were queued, so the
		// newest are known; the history is ordered by when each result was acknowledged.
		concurrency int
	}{
		{"small", []string{"--job-history-succeeded", "3", "--job-history-failed", "2"}, 3, 2, 1},
		{"default", nil, 10, 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "", tc.concurrency)
			a := e.startAgent("agent-0", append([]string{"--leader-elect=false"}, tc.flags...)...)
			ok := e.deploy(10)
			e.waitTerminal(ok, 3*time.Minute)
			// The same runner now fails every run: its pods exit 1 on the simulated node.
			r, err := e.admin.GetRunner(t.Context(), e.runnerID)
			if err != nil {
				t.Fatal(err)
			}
			job := r.Job
			job.Pod = &api.JobPod{Annotations: map[string]string{"testbed.outpost.dev/exit-code": "1"}}
			if _, err := e.admin.UpdateRunner(t.Context(), api.RunnerInput{ID: r.ID, PublicKeys: r.PublicKeys, Job: job,
				StateStorageID: r.StateStorageID, MaxConcurrency: r.MaxConcurrency, JobTimeoutSeconds: r.JobTimeoutSeconds}); err != nil {
				t.Fatal(err)
			}
			bad := e.deploy(5)
			results := e.waitTerminal(append(append([]string(nil), ok...), bad...), 3*time.Minute)

			testbed.WaitFor(t, 60*time.Second, "the history to hold the configured number of Jobs", func() (bool, string) {
				s, f, live := len(e.history(kubeexec.HistorySucceeded)), len(e.history(kubeexec.HistoryFailed)), len(e.jobs())
				return s == tc.succeeded && f == tc.failed && live == 0, fmt.Sprintf("%d succeeded, %d failed, %d live", s, f, live)
			})
			// The newest of each outcome are the ones kept.
			newest := map[string]bool{}
			for _, id := range append(ok[len(ok)-tc.succeeded:], bad[len(bad)-tc.failed:]...) {
				newest[kubeexec.JobName(id, 1)] = true
			}
			for _, j := range append(e.history(kubeexec.HistorySucceeded), e.history(kubeexec.HistoryFailed)...) {
				if !newest[j.Name] {
					t.Errorf("kept Job %s is not among the newest of its outcome", j.Name)
				}
			}
			secrets, err := e.cluster.Client().CoreV1().Secrets(e.ns).List(t.Context(), metav1.ListOptions{LabelSelector: kubeexec.LabelManagedBy + "=" + kubeexec.ManagedByValue})
			if err != nil {
				t.Fatal(err)
			}
			if len(secrets.Items) != 0 {
				t.Errorf("%d token Secrets left; a kept Job needs none", len(secrets.Items))
			}
			// A restarted agent leaves the history alone: kept Jobs are no attempts to restate
			// or report again.
			a.kill()
			b := e.startAgent("agent-1", append([]string{"--leader-elect=false"}, tc.flags...)...)
			testbed.WaitFor(t, 30*time.Second, "the new agent to watch its Jobs", func() (bool, string) { return b.logCount("watching Jobs") > 0, "" })
			time.Sleep(6 * time.Second) // more than one long poll (--poll-wait 5s)
			if n := b.logCount("re-adopted running attempts"); n != 0 {
				t.Errorf("the restarted agent re-adopted kept Jobs (%d log lines)", n)
			}
			if s, f := len(e.history(kubeexec.HistorySucceeded)), len(e.history(kubeexec.HistoryFailed)); s != tc.succeeded || f != tc.failed {
				t.Errorf("after a restart the history holds %d succeeded and %d failed Jobs", s, f)
			}
			for i, id := range append(append([]string(nil), ok...), bad...) {
				want := api.StatusSucceeded
				if i >= len(ok) {
					want = api.StatusFailed
				}
				d, err := e.admin.GetDeployment(t.Context(), id)
				if err != nil || d.Status != want || results[id].Status != want {
					t.Errorf("deployment %d (%s): %+v, %v; want %s", i, id, d, err, want)
					continue
				}
				if n, evs := e.finishedEvents(id); n != 1 {
					t.Errorf("deployment %s: %d finished events: %+v", id, n, evs)
				}
			}
		})
	}
}
