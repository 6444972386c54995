package pods

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/connection"
	"github.com/outpost-dev/terraform-provider-outpost/internal/release/releasetest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// helmPath is the helm CLI the tests run (scripts/tools.sh helm builds it; make test sets
// $OUTPOST_HELM); empty when it is not there, which fails the test under CI=true.
func helmPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv(releasetest.HelmEnv)
	if p == "" && os.Getenv("CI") == "true" {
		t.Fatalf("%s is not set: build the helm CLI with scripts/tools.sh helm (make test does)", releasetest.HelmEnv)
	}
	return p
}

// helmTest runs the real `helm test` on the env's release, as a user would after installing it,
// and returns its output (stdout and stderr, where helm prints a failed test pod's log), how long
// it took and its error.
func (e *env) helmTest(helm string) (string, time.Duration, error) {
	e.t.Helper()
	home := e.t.TempDir()
	ctx, cancel := context.WithTimeout(e.t.Context(), 3*time.Minute)
	defer cancel()
	cmd := releasetest.HelmCommand(ctx, helm, home, e.c.Kubeconfig, "test", releaseName, "--namespace", e.agentNS, "--timeout", "2m")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	return out.String(), time.Since(start), err
}

// TestHelmTestNamesTheUnreachableOrchestrator installs the chart with an apiUrl nobody serves (a
// closed port on the agent pod's own loopback), one replica without leader election, and runs
// the real `helm test`: it fails, and its output names the URL, the agent's last error and what
// to do. The single replica kept its record on a Lease it created and does not hold.
func TestHelmTestNamesTheUnreachableOrchestrator(t *testing.T) {
	t.Parallel()
	helm := helmPath(t)
	if helm == "" {
		t.Skipf("%s is not set: build the helm CLI with scripts/tools.sh helm and export it (make test does)", releasetest.HelmEnv)
	}
	const url = "http://127.0.0.1:1"
	e := newEnv(t, envOptions{apiURL: url, unconnected: true, values: "leaderElection: {enabled: false}\ntests: {wait: 5s}"})
	testbed.WaitFor(t, 2*time.Minute, "the agent to record a failed poll on its Lease", func() (bool, string) {
		l, err := e.c.Client().CoordinationV1().Leases(e.agentNS).Get(context.Background(), releaseName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st, _ := connection.StatusOf(l.Annotations)
		if l.Spec.HolderIdentity != nil {
			t.Errorf("without leader election the Lease is held by %q", *l.Spec.HolderIdentity)
		}
		return st.Failing() && st.URL == url, fmt.Sprintf("record %+v", st)
	})
	out, took, err := e.helmTest(helm)
	if err == nil {
		t.Fatalf("helm test passed although the agent cannot reach the orchestrator:\n%s", out)
	}
	for _, want := range []string{"FAIL: the agent has never reached the orchestrator at " + url, "connect: connection refused",
		"What to do: check that apiUrl (" + url + ")", "NetworkPolicy's egress", "kubectl -n " + e.agentNS + " logs outpost-agent-"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm test output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("helm test failed after %s (tests.wait 5s):\n%s", took.Round(100*time.Millisecond), strings.TrimSpace(out))
}
