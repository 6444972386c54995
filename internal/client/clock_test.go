package client_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// An agent whose clock is 90 s off the orchestrator's (beyond the 60 s the orchestrator
// tolerates) has its first request refused, learns the orchestrator's time from the answer's
// Date, and signs the same call again at once with the corrected time. Without the correction
// every request is refused (the control: a token signed with this machine's clock alone).
func TestAgentClientSignsWithTheOrchestratorsClock(t *testing.T) {
	for _, skew := range []time.Duration{90 * time.Second, -90 * time.Second} {
		t.Run(fmt.Sprintf("orchestrator %+v", skew), func(t *testing.T) {
			o := orchestratortest.Start(t, orchestratortest.WithClock(func() time.Time { return time.Now().Add(skew) }))
			ctx := context.Background()
			_, priv := o.RegisterRunner(ctx, t)
			poll := api.PollRequest{AgentVersion: "test", Instance: "i", CapacityFree: 1, WaitSeconds: 0}

			// The control: a token from this machine's clock alone is refused.
			body := []byte(`{"agent_version":"test","instance":"i","capacity_free":1}`)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.URL+"/api/v1/agent/poll", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if err := agentauth.NewSigner("acme", "r1", priv).Authorize(req, body); err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("a poll signed with a clock 90 s off: HTTP %d, want 401; the skew is not simulated", resp.StatusCode)
			}

			ac, err := client.NewAgentClient(o.URL, agentauth.NewSigner("acme", "r1", priv), client.WithRetryPolicy(client.RetryPolicy{MaxTries: 1}))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if _, err := ac.Poll(ctx, poll); err != nil {
					t.Fatalf("poll %d with the orchestrator %s ahead: %v", i, skew, err)
				}
			}
			if got := ac.ClockOffset(); (got - skew).Abs() > 2*time.Second {
				t.Errorf("learnt offset %s, want about %s", got, skew)
			}
		})
	}
}
