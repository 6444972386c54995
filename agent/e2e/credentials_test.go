package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobtoken"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// TestStateCredentialIsNotTheJobToken: a running attempt's token Secret holds two credentials,
// each good at one place only. The state backend refuses the job token and takes the state
// credential; the orchestrator refuses the state credential and takes the job token. So a job
// token that leaks (from the orchestrator's side, say) opens no state, and a state credential
// that leaks calls nothing at the orchestrator. Real agent, orchestrator and API server. The
// agent is then restarted: the adopted attempt's state credential still works.
func TestStateCredentialIsNotTheJobToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `{"metadata":{"annotations":{"testbed.outpost.dev/run-duration":"10m"}},"spec":{"containers":[{"name":"main"}]}}`, 5)
	ctx := t.Context()
	stateAddr := porttest.Addr(t)
	flags := []string{"--leader-elect=false", "--state-listen", stateAddr, "--state-url", "http://" + stateAddr, "--state-namespace", e.ns}
	a := e.startAgent("agent-0", flags...)
	ids := e.deploy(1)
	var jobToken, stateToken string
	testbed.WaitFor(t, 60*time.Second, "the attempt to run", func() (bool, string) {
		d, err := e.admin.GetDeployment(ctx, ids[0])
		if err != nil || d.Status != api.StatusRunning {
			return false, fmt.Sprint(d, err)
		}
		j, err := e.cluster.Client().BatchV1().Jobs(e.ns).Get(ctx, kubeexec.JobName(ids[0], 1), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s, err := e.cluster.Client().CoreV1().Secrets(e.ns).Get(ctx, kubeexec.TokenSecretName(j.Name, j.Annotations[kubeexec.AnnTokenSHA256]), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		jobToken, stateToken = string(s.Data["token"]), string(s.Data["state-token"])
		return true, ""
	})
	if !strings.HasPrefix(jobToken, api.JobTokenPrefix) || !strings.HasPrefix(stateToken, jobtoken.StateTokenPrefix) {
		t.Fatalf("token Secret holds %.8q… and %.8q…, want a job token and a state credential", jobToken, stateToken)
	}

	orchestrator := func(token string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.apiURL+"/api/v1/job/spec", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	check := func(when string) {
		t.Helper()
		if code := stateRequest(t, stateAddr, http.MethodGet, "state-0", ids[0], jobToken, nil); code != http.StatusUnauthorized {
			t.Errorf("%s: the state backend answered the job token with %d, want 401", when, code)
		}
		if code := stateRequest(t, stateAddr, http.MethodGet, "state-0", ids[0], stateToken, nil); code != http.StatusNoContent && code != http.StatusOK {
			t.Errorf("%s: the state backend answered the state credential with %d, want the state (204: none yet)", when, code)
		}
		if code := orchestrator(stateToken); code != http.StatusUnauthorized {
			t.Errorf("%s: the orchestrator answered the state credential with %d, want 401", when, code)
		}
		if code := orchestrator(jobToken); code != http.StatusOK {
			t.Errorf("%s: the orchestrator answered the job token with %d, want 200", when, code)
		}
	}
	check("running")

	// A new agent process adopts the Job and derives the same state credential.
	a.kill()
	e.startAgent("agent-1", flags...)
	testbed.WaitFor(t, 60*time.Second, "the restarted agent to take the state credential", func() (bool, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+stateAddr+"/v1/states/state-0", nil)
		req.SetBasicAuth(ids[0], stateToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error() // not listening yet
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusOK, resp.Status
	})
	check("after the agent restarted")
}
