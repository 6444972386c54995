package orchestratortest

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// Agent speaks the agent and job APIs by hand for tests that need a runner's deployments to
// progress step by step (the web console's tests watch each step): it polls, claims, sends
// events, appends the log and uploads outputs, exactly when the test says.
type Agent struct {
	t        testing.TB
	Client   *client.AgentClient
	Version  string
	Instance string
	url      string
}

// Running is an attempt an Agent claimed: its job client, fencing number and log offset.
type Running struct {
	Claim  *api.Claim
	Job    *client.JobClient
	a      *Agent
	offset int64
	seq    int64
}

// NewAgent returns an agent of runner org/runner signing with key, reporting release version.
func (i *Instance) NewAgent(t testing.TB, org, runner string, key ed25519.PrivateKey, version string) *Agent {
	t.Helper()
	c, err := client.NewAgentClient(i.URL, agentauth.NewSigner(org, runner, key))
	if err != nil {
		t.Fatal(err)
	}
	return &Agent{t: t, Client: c, Version: version, Instance: "test-agent", url: i.URL}
}

// Poll polls once without waiting, holding the given attempts, and returns the answer. It speaks
// agent protocol 6 at most: from 7 on the answer would claim every queued deployment, and this
// agent takes them one at a time (Claim).
func (a *Agent) Poll(ctx context.Context, held ...*Running) *api.PollResponse {
	a.t.Helper()
	req := api.PollRequest{AgentVersion: a.Version, Protocol: api.ProtocolRange{Min: 1, Max: api.ProtocolClaimInPoll - 1}, Instance: a.Instance, CapacityFree: 4}
	for _, r := range held {
		req.Held = append(req.Held, api.HeldAttempt{DeploymentID: r.Claim.DeploymentID, Attempt: r.Claim.Attempt, Fencing: r.Claim.Lease.Fencing})
	}
	resp, err := a.Client.Poll(ctx, req)
	if err != nil {
		a.t.Fatalf("poll: %v", err)
	}
	return resp
}

// Claim polls until deployment id is offered (10 s at most), claims it and sends its started event.
func (a *Agent) Claim(ctx context.Context, id string) *Running {
	a.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, o := range a.Poll(ctx).Offers {
			if o.DeploymentID != id {
				continue
			}
			cl, err := a.Client.Claim(ctx, id, api.ClaimRequest{Attempt: o.Attempt, Instance: a.Instance})
			if err != nil {
				a.t.Fatalf("claim %s: %v", id, err)
			}
			jc, err := client.NewJobClient(a.url, cl.JobToken)
			if err != nil {
				a.t.Fatal(err)
			}
			r := &Running{Claim: cl, Job: jc, a: a}
			r.Event(ctx, api.Event{Type: api.EventStarted})
			return r
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("deployment %s was not offered within 10 s", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Event sends the attempt's next event (its attempt, sequence number and time filled in).
func (r *Running) Event(ctx context.Context, ev api.Event) *api.EventResponse {
	r.a.t.Helper()
	// Seqs below SeqWaiting+len(Reasons) are derived from what an event says (api.SeqClaimed is
	// the orchestrator's own); a scripted event without a step counts from well above them.
	switch ev.Type {
	case api.EventStarted:
		ev.Seq = api.SeqStarted
	case api.EventFinished:
		ev.Seq = api.SeqFinished
	default:
		if r.seq == 0 {
			r.seq = 1000
		}
		r.seq++
		ev.Seq = r.seq
	}
	ev.Attempt = r.Claim.Attempt
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	resp, err := r.a.Client.Event(ctx, r.Claim.DeploymentID, api.EventRequest{Event: ev, Fencing: r.Claim.Lease.Fencing})
	if err != nil {
		r.a.t.Fatalf("event %s of %s: %v", ev.Type, r.Claim.DeploymentID, err)
	}
	return resp
}

// Log appends text to the attempt's log and says whether a cancel was requested.
func (r *Running) Log(ctx context.Context, text string) (cancelRequested bool) {
	r.a.t.Helper()
	resp, err := r.Job.AppendLog(ctx, r.offset, []byte(text))
	if err != nil {
		r.a.t.Fatalf("append log of %s: %v", r.Claim.DeploymentID, err)
	}
	r.offset = resp.CommittedOffset
	return resp.CancelRequested
}

// Finish uploads outputs (when not nil) and sends the finished event with result.
func (r *Running) Finish(ctx context.Context, result api.Status, outputs api.Outputs) {
	r.a.t.Helper()
	if outputs != nil {
		if err := r.Job.PutOutputs(ctx, outputs, 0); err != nil {
			r.a.t.Fatalf("outputs of %s: %v", r.Claim.DeploymentID, err)
		}
	}
	code := 0
	if result != api.StatusSucceeded {
		code = 1
	}
	r.Event(ctx, api.Event{Type: api.EventFinished, Result: result, ExitCode: &code})
}
