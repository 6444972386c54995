package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/health"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/metrics"
	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// An agent and a real orchestrator over HTTP whose long polls are held (nothing is queued), on
// one machine: the orchestrator stamps Date when a poll arrives, 5 s before its answer, which
// once made the agent log a skew of about -3 s after every poll ("check NTP on the node") and
// sign with it. With the same clock it must learn no offset and log nothing about clocks; with
// the orchestrator's clock 90 s ahead it learns the difference (from the refusal of its first
// poll) and keeps it through the held polls, warning once.
func TestHeldPollsDoNotMakeUpAClockSkew(t *testing.T) {
	for _, ahead := range []time.Duration{0, 90 * time.Second} {
		t.Run(fmt.Sprintf("orchestrator %s ahead", ahead), func(t *testing.T) {
			t.Parallel()
			inst := orchestratortest.Start(t, orchestratortest.WithClock(func() time.Time { return time.Now().Add(ahead) }))
			ctx := t.Context()
			_, priv := inst.RegisterRunner(ctx, t)
			var held atomic.Int32
			ac, err := client.NewAgentClient(inst.URL, agentauth.NewSigner("acme", "r1", priv),
				client.WithRequestHook(func(_ context.Context, info client.RequestInfo) {
					if info.Path == "/api/v1/agent/poll" && info.Status == http.StatusOK && info.Duration > 3*time.Second {
						held.Add(1)
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			var logs clienttest.Buffer
			s := New(Options{Client: ac, Executor: newFakeExec(), Metrics: metrics.New("test"), Health: health.NewState(5*time.Second, nil),
				Logger: slog.New(slog.NewTextHandler(&logs, nil)), Instance: "agent-0", Version: "1.0.0",
				PollWait: 5 * time.Second, PollBackoff: retry.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}})
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- s.Run(runCtx) }()
			deadline := time.Now().Add(30 * time.Second)
			for held.Load() < 3 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("session: %v", err)
			}
			if n := held.Load(); n < 3 {
				t.Fatalf("%d polls held to their end, want 3; log:\n%s", n, logs.String())
			}
			if got := ac.ClockOffset(); (got - ahead).Abs() > time.Second {
				t.Errorf("after 3 held polls: signing offset %s, want about %s", got, ahead)
			}
			clockLines := 0
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "clock") {
					clockLines++
					if ahead == 0 || !strings.Contains(l, "level=WARN") {
						t.Errorf("log line about clocks: %s", l)
					}
				}
			}
			if ahead != 0 && clockLines != 1 {
				t.Errorf("%d log lines about the clock, want one warning:\n%s", clockLines, logs.String())
			}
		})
	}
}
