package session

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/health"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/metrics"
	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// An agent whose key the runner does not have, against a real orchestrator: its first refused
// poll makes readiness fail with the key's fingerprint and what to do, sets key_refused and
// counts the failure, and logs it once (not on every retry). When the key is registered the
// agent gets in on its own, and readiness and the metric clear.
func TestARefusedKeyShowsInReadinessWithinOnePoll(t *testing.T) {
	inst := orchestratortest.Start(t)
	ctx := t.Context()
	admin, _ := inst.RegisterRunner(ctx, t)
	pub, wrong, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	signer := agentauth.NewSigner("acme", "r1", wrong)
	ac, err := client.NewAgentClient(inst.URL, signer, client.WithRetryPolicy(client.RetryPolicy{MaxTries: 1}))
	if err != nil {
		t.Fatal(err)
	}
	var logs clienttest.Buffer
	m := metrics.New("test")
	readiness := health.NewState(time.Minute, nil)
	readiness.SetLeader(true)
	s := New(Options{Client: ac, Executor: newFakeExec(), Metrics: m, Health: readiness,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Instance: "agent-0", Version: "1.0.0",
		PollWait: time.Second, PollBackoff: retry.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}})
	defer run(t, s)()

	waitFor(t, "the first poll to fail", func() bool {
		return value(m.PollFailures.WithLabelValues("unknown_key")) >= 1
	})
	// Readiness was set by the same poll that failed: no further poll is awaited.
	ok, checks := readiness.Ready(ctx)
	msg := checks[keyCheck].Message
	if ok || !strings.Contains(msg, signer.Fingerprint()) || !strings.Contains(msg, "public_keys") {
		t.Fatalf("readiness after one refused poll: ready=%v, %s=%q; want not ready, naming the key and what to register", ok, keyCheck, msg)
	}
	if value(m.KeyRefused) != 1 {
		t.Fatal("key_refused is not 1")
	}
	waitFor(t, "a few more refused polls", func() bool {
		return value(m.PollFailures.WithLabelValues("unknown_key")) >= 4
	})
	if n := strings.Count(logs.String(), "refuses this agent's key"); n != 1 || !strings.Contains(logs.String(), signer.Fingerprint()) {
		t.Fatalf("the refusal is logged %d times (want once, with the fingerprint):\n%s", n, logs.String())
	}

	// The operator registers the key: the agent is let in without a restart.
	pubPEM, _ := keys.EncodePublicPEM(pub)
	r, err := admin.GetRunner(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UpdateRunner(ctx, api.RunnerInput{ID: "r1", PublicKeys: []string{pubPEM}, StateStorageID: r.StateStorageID, Job: r.Job}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "readiness to clear", func() bool { ok, _ := readiness.Ready(ctx); return ok })
	if value(m.KeyRefused) != 0 || !strings.Contains(logs.String(), "accepts this agent's key again") {
		t.Fatalf("after the key was registered: key_refused %v, log:\n%s", value(m.KeyRefused), logs.String())
	}
}

// value reads a counter or gauge.
func value(c prometheus.Metric) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		return -1
	}
	if g := d.GetGauge(); g != nil {
		return g.GetValue()
	}
	return d.GetCounter().GetValue()
}

// An idle agent (its long poll held for 30 s) moves onto a rotated key within seconds, whichever
// of it and the runner gets the new key first: the key change cuts the held poll, so the next one
// states the new key, and the orchestrator answers a poll that can move at once.
func TestAnIdleAgentMovesOntoARotatedKeyAtOnce(t *testing.T) {
	for _, agentFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "agent first", false: "runner first"}[agentFirst], func(t *testing.T) {
			inst := orchestratortest.Start(t)
			ctx := t.Context()
			admin, oldKey := inst.RegisterRunner(ctx, t)
			pub, newKey, err := keys.Generate()
			if err != nil {
				t.Fatal(err)
			}
			newPEM, _ := keys.EncodePublicPEM(pub)
			signer := agentauth.NewSigner("acme", "r1", oldKey)
			ac, err := client.NewAgentClient(inst.URL, signer)
			if err != nil {
				t.Fatal(err)
			}
			m := metrics.New("test")
			s := New(Options{Client: ac, Executor: newFakeExec(), Metrics: m, Health: health.NewState(time.Minute, nil),
				Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", Version: "1.0.0", PollWait: 30 * time.Second})
			defer run(t, s)()
			waitFor(t, "the agent connected", func() bool {
				r, err := admin.GetRunner(ctx, "r1")
				return err == nil && r.Status.KeyFingerprint == signer.Fingerprint()
			})
			time.Sleep(300 * time.Millisecond) // its long poll is held now

			rotateAgent := func() { signer.SetKeys(newKey, oldKey); s.KeysChanged() }
			rotateRunner := func() {
				r, err := admin.GetRunner(ctx, "r1")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := admin.UpdateRunner(ctx, api.RunnerInput{ID: "r1", PublicKeys: []string{newPEM}, StateStorageID: r.StateStorageID, Job: r.Job}); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			if agentFirst {
				rotateAgent()
				time.Sleep(300 * time.Millisecond)
				rotateRunner()
			} else {
				rotateRunner()
				time.Sleep(300 * time.Millisecond)
				rotateAgent()
			}
			newFP := agentauth.NewSigner("acme", "r1", newKey).Fingerprint()
			deadline := time.Now().Add(10 * time.Second)
			for {
				r, err := admin.GetRunner(ctx, "r1")
				if err == nil && r.Status.KeyFingerprint == newFP && len(r.RetiringKeys) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the agent did not move onto the new key within 10 s of the rotation (its poll waits 30 s): %+v", r)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if n := value(m.PollFailures.WithLabelValues("unknown_key")); n != 0 {
				t.Errorf("%v polls failed during the rotation; want 0", n)
			}
			t.Logf("moved onto the new key %s after the rotation began", time.Since(start).Round(time.Millisecond))
		})
	}
}
