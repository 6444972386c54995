package session

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/health"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/metrics"
	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// An agent and a real orchestrator (over HTTP, signed requests) of releases that speak no agent
// protocol version in common: the orchestrator refuses every poll, the agent logs why with both
// releases and what to upgrade, claims nothing, and the runner is never shown connected. With
// a range that meets the orchestrator's, the same agent connects.
func TestAgentAndOrchestratorRefuseAnIncompatiblePair(t *testing.T) {
	for _, c := range []struct {
		name            string
		orchVersion     string
		orch, agent     api.ProtocolRange
		wantConnected   bool
		wantLogContains []string
	}{
		{"agent too old", "2.0.0", api.ProtocolRange{Min: 2, Max: 3}, api.ProtocolRange{Min: 1, Max: 1}, false,
			[]string{"agent 1.0.0 speaks agent protocol 1, orchestrator 2.0.0 speaks 2 to 3", "upgrade the agent"}},
		{"agent too new", "0.9.0", api.ProtocolRange{Min: 1, Max: 1}, api.ProtocolRange{Min: 2, Max: 2}, false,
			[]string{"agent 1.0.0 speaks agent protocol 2, orchestrator 0.9.0 speaks 1", "upgrade the orchestrator"}},
		{"overlap", "2.0.0", api.ProtocolRange{Min: 2, Max: 3}, api.ProtocolRange{Min: 1, Max: 2}, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			inst := orchestratortest.Start(t, orchestratortest.WithRelease(c.orchVersion, c.orch))
			ctx := t.Context()
			admin, priv := inst.RegisterRunner(ctx, t)
			if _, err := admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan,
				Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": ""})}}, StateKey: "k"}); err != nil {
				t.Fatal(err)
			}
			ac := agentClient(t, inst.URL, priv)
			var logs clienttest.Buffer
			ex := newFakeExec()
			s := New(Options{Client: ac, Executor: ex, Metrics: metrics.New("test"), Health: health.NewState(time.Second, nil),
				Logger: slog.New(slog.NewTextHandler(&logs, nil)), Instance: "agent-0", Version: "1.0.0", Protocols: c.agent,
				PollWait: time.Second, PollBackoff: retry.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}})
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- s.Run(runCtx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("session: %v", err)
				}
			}()

			if c.wantConnected {
				waitFor(t, "the attempt claimed", func() bool { l, _ := ex.List(ctx); return len(l) == 1 })
				r, err := admin.GetRunner(ctx, "r1")
				if err != nil || !r.Status.Connected || r.Status.AgentVersion != "1.0.0" {
					t.Fatalf("runner %+v (%v), want connected with agent 1.0.0", r, err)
				}
				return
			}
			waitFor(t, "the refusal logged twice (the agent keeps polling)", func() bool {
				return strings.Count(logs.String(), "speak no agent protocol version in common") >= 2
			})
			for _, w := range c.wantLogContains {
				if !strings.Contains(logs.String(), w) {
					t.Errorf("agent log lacks %q:\n%s", w, logs.String())
				}
			}
			if l, _ := ex.List(ctx); len(l) != 0 {
				t.Errorf("the agent started %v although its polls were refused", l)
			}
			if r, err := admin.GetRunner(ctx, "r1"); err != nil || r.Status.Connected || r.Status.AgentVersion != "" {
				t.Errorf("runner %+v (%v), want never connected", r, err)
			}
		})
	}
}

// An answer in a protocol version outside the agent's range (an orchestrator that chose none is
// one from before negotiation, speaking version 1) is not acted on.
func TestAgentRefusesAnAnswerInAnotherProtocol(t *testing.T) {
	s := New(Options{Version: "1.0.0", Protocols: api.ProtocolRange{Min: 2, Max: 2}})
	err := s.checkProtocol(&api.PollResponse{OrchestratorVersion: ""})
	if err == nil || !strings.Contains(err.Error(), "answered in agent protocol 1") ||
		!strings.Contains(err.Error(), "orchestrator (version unknown) speaks 1") {
		t.Fatalf("checkProtocol of an answer without a protocol: %v", err)
	}
	if err := s.checkProtocol(&api.PollResponse{Protocol: 2}); err != nil {
		t.Fatalf("an answer in protocol 2 refused: %v", err)
	}
}

// An agent of this release and a real orchestrator: one that speaks protocol 3 records the
// attempt's timeline (a step, a wait with the cluster's words) and the failure's detail apart
// from its message; one that speaks up to 2 (an older release, which refuses unknown fields) gets
// no progress events and the detail folded into the message, and takes every event.
func TestTimelineFollowsTheNegotiatedProtocol(t *testing.T) {
	for _, orch := range []api.ProtocolRange{{Min: 1, Max: api.ProtocolTimeline}, {Min: 1, Max: api.ProtocolTimeline - 1}} {
		t.Run("orchestrator "+orch.String(), func(t *testing.T) {
			inst := orchestratortest.Start(t, orchestratortest.WithRelease("2.0.0", orch))
			ctx := t.Context()
			admin, priv := inst.RegisterRunner(ctx, t)
			d, err := admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan,
				Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": ""})}}, StateKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			ac := agentClient(t, inst.URL, priv)
			ex := newFakeExec()
			s := New(Options{Client: ac, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", Version: "1.0.0", PollWait: time.Second,
				EventBackoff: retry.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}})
			stop := run(t, s)
			defer stop()
			waitFor(t, "the attempt claimed", func() bool { l, _ := ex.List(ctx); return len(l) == 1 })
			at := time.Now().UTC().Truncate(time.Second)
			scheduler := "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
			ex.set(d.ID, func(s *executor.AttemptStatus) {
				s.Timeline = []executor.Step{{Step: api.StepJobCreated, Time: at}}
				s.Waiting = &executor.Waiting{Reason: api.ReasonUnschedulable, Message: "no node fits", Detail: scheduler}
			})
			if orch.Max >= api.ProtocolTimeline {
				waitFor(t, "the wait recorded", func() bool {
					got, _ := admin.GetDeployment(ctx, d.ID)
					return got != nil && got.Reason == api.ReasonUnschedulable
				})
			} else {
				time.Sleep(500 * time.Millisecond)
			}
			ex.set(d.ID, func(s *executor.AttemptStatus) {
				s.Status, s.Reason, s.Message, s.Detail, s.FinishedAt = api.StatusFailed, api.ReasonUnschedulable, "did not start", scheduler, at.Add(time.Second)
			})
			waitFor(t, "the attempt cleaned up", func() bool { ex.mu.Lock(); defer ex.mu.Unlock(); return ex.cleaned[d.ID] == 1 })
			evs, err := admin.ListEvents(ctx, d.ID)
			if err != nil {
				t.Fatal(err)
			}
			var steps []string
			for _, ev := range evs {
				steps = append(steps, string(ev.Step))
			}
			last := evs[len(evs)-1]
			if orch.Max >= api.ProtocolTimeline {
				if strings.Join(steps, " ") != "claimed job_created waiting finished" || last.Detail != scheduler || last.Message != "did not start" || evs[2].Detail != scheduler {
					t.Fatalf("events %+v, want the timeline with the scheduler's words apart", evs)
				}
				return
			}
			if strings.Join(steps, " ") != "claimed finished" || last.Detail != "" || last.Message != "did not start: "+scheduler || last.Reason != api.ReasonUnschedulable {
				t.Fatalf("events %+v, want no progress events and the detail in the message", evs)
			}
		})
	}
}

// countingClaims counts the claim requests an agent sends.
type countingClaims struct {
	*client.AgentClient
	claims atomic.Int32
}

func (c *countingClaims) Claim(ctx context.Context, id string, req api.ClaimRequest) (*api.Claim, error) {
	c.claims.Add(1)
	return c.AgentClient.Claim(ctx, id, req)
}

// An agent of this release and a real orchestrator: where both speak agent protocol 7, the poll
// answer carries the claims and the agent starts their attempts without a claim request; where
// either speaks at most 6 (an older agent or orchestrator), the answer offers and the agent
// claims each offer, as before. Either way every attempt starts once, under the grant's fencing
// number and job token, and no more start than the runner's max_concurrency.
func TestClaimsFollowTheNegotiatedProtocol(t *testing.T) {
	older := api.ProtocolRange{Min: 1, Max: api.ProtocolClaimInPoll - 1}
	for _, c := range []struct {
		name        string
		orch, agent api.ProtocolRange
		inPoll      bool
	}{
		{"both speak 7", api.AgentProtocols(), api.AgentProtocols(), true},
		{"agent of 6", api.AgentProtocols(), older, false},
		{"orchestrator of 6", older, api.AgentProtocols(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			inst := orchestratortest.Start(t, orchestratortest.WithRelease("2.0.0", c.orch))
			ctx := t.Context()
			admin, priv := inst.RegisterRunner(ctx, t)
			r, err := admin.GetRunner(ctx, "r1")
			if err != nil {
				t.Fatal(err)
			}
			for i := range r.MaxConcurrency + 2 {
				_, err := admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan,
					Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": ""})}}, StateKey: fmt.Sprintf("k%d", i)})
				if err != nil {
					t.Fatal(err)
				}
			}
			ac := agentClient(t, inst.URL, priv)
			counted := &countingClaims{AgentClient: ac}
			ex := newFakeExec()
			s := New(Options{Client: counted, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", Version: "1.0.0",
				Protocols: c.agent, PollWait: time.Second})
			stop := run(t, s)
			defer stop()
			waitFor(t, "max_concurrency attempts started", func() bool { l, _ := ex.List(ctx); return len(l) == r.MaxConcurrency })
			time.Sleep(300 * time.Millisecond) // more polls: nothing beyond max_concurrency may start
			ex.mu.Lock()
			defer ex.mu.Unlock()
			if len(ex.attempts) != r.MaxConcurrency || len(ex.starts) != r.MaxConcurrency {
				t.Fatalf("%d attempts started by %d starts %v, want max_concurrency %d, each started once", len(ex.attempts), len(ex.starts), ex.starts, r.MaxConcurrency)
			}
			for _, started := range ex.starts {
				id, token, _ := strings.Cut(started, " ")
				d, err := admin.GetDeployment(ctx, id)
				if err != nil || d.Status != api.StatusClaimed || !strings.HasPrefix(token, api.JobTokenPrefix) || ex.attempts[id].Fencing < 1 {
					t.Errorf("started %s with job token %q: %+v, %v", id, token, d, err)
				}
			}
			if n := int(counted.claims.Load()); c.inPoll && n != 0 || !c.inPoll && n != r.MaxConcurrency {
				t.Errorf("%d claim requests, want %d", n, map[bool]int{true: 0, false: r.MaxConcurrency}[c.inPoll])
			}
		})
	}
}

// losingTransport loses the first poll answer that carries claims: the orchestrator committed
// the grants, the agent sees a broken connection.
type losingTransport struct {
	lost atomic.Pointer[api.PollResponse]
}

func (l *losingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, "/agent/poll") || l.lost.Load() != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var answer api.PollResponse
	if json.Unmarshal(body, &answer) == nil && len(answer.Claims) > 0 && l.lost.CompareAndSwap(nil, &answer) {
		return nil, errors.New("connection reset by peer (the test lost this poll answer)")
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// A poll answer that carries a claim (agent protocol 7) and is lost on the wire loses nothing:
// the orchestrator hands the same grant to the same agent again once store.ReofferAfter has
// passed, and the attempt starts once, under that grant, and is claimed once.
func TestALostPollAnswerWithAClaimIsHandedOutAgain(t *testing.T) {
	inst := orchestratortest.Start(t)
	ctx := t.Context()
	admin, priv := inst.RegisterRunner(ctx, t)
	d, err := admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationApply,
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": ""})}}, StateKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	losing := &losingTransport{}
	ac := agentClient(t, inst.URL, priv, client.WithHTTPClient(&http.Client{Transport: losing}))
	ex := newFakeExec()
	s := New(Options{Client: ac, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", Version: "1.0.0", PollWait: time.Second,
		PollBackoff: retry.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}})
	stop := run(t, s)
	defer stop()
	deadline := time.Now().Add(store.ReofferAfter + 5*time.Second)
	for {
		ex.mu.Lock()
		n := len(ex.starts)
		ex.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	lost := losing.lost.Load()
	if lost == nil {
		t.Fatal("no poll answer carried a claim")
	}
	time.Sleep(300 * time.Millisecond) // more polls: it must not start twice
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if want := d.ID + " " + lost.Claims[0].JobToken; len(ex.starts) != 1 || ex.starts[0] != want {
		t.Fatalf("starts %v, want once under the lost grant (%q)", ex.starts, want)
	}
	evs, err := admin.ListEvents(ctx, d.ID)
	if err != nil || len(evs) != 1 || evs[0].Step != api.StepClaimed {
		t.Fatalf("events %+v (%v), want the one claim", evs, err)
	}
}

// agentClient is an agent client of runner r1 of acme that tries each request once (the session
// retries), with opts.
func agentClient(t *testing.T, url string, priv ed25519.PrivateKey, opts ...client.Option) *client.AgentClient {
	t.Helper()
	ac, err := client.NewAgentClient(url, agentauth.NewSigner("acme", "r1", priv), append([]client.Option{client.WithRetryPolicy(client.RetryPolicy{MaxTries: 1})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return ac
}
