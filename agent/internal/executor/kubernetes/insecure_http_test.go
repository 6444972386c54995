package kubernetes

import (
	"strconv"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
)

// TestInsecureHTTPReachesTheJobRunnerOnlyWhenAllowed: the job runner refuses a plain http
// orchestrator URL unless the agent hands its own opt-in on, and a template cannot set it.
func TestInsecureHTTPReachesTheJobRunnerOnlyWhenAllowed(t *testing.T) {
	tpl := `{"spec":{"containers":[{"name":"main","env":[{"name":"` + jobenv.InsecureAllowHTTP + `","value":"true"}]}]}}`
	for _, allowed := range []bool{false, true} {
		o := opts
		o.APIURL, o.InsecureAllowHTTP = "http://orchestrator.example.com", allowed
		job, _, err := BuildJob(claim(tpl), "opst_test", o, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range job.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if c.Name == "main" && e.Name == jobenv.InsecureAllowHTTP {
					got = append(got, e.Value)
				}
			}
		}
		if want := strconv.FormatBool(allowed); len(got) != 1 || got[0] != want {
			t.Errorf("agent opt-in %v: the job runner gets %s = %v, want [%s] whatever the pod template says", allowed, jobenv.InsecureAllowHTTP, got, want)
		}
	}
}
