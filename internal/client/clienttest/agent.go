// Package clienttest plays an agent and its job runner against a real orchestrator over the
// agent and job APIs, so tests of the admin side (the client's log following, the outpost
// command line) can move deployments through their lifecycle in milliseconds: claim, log,
// outputs, finished event. Tests that need terraform to really run use the agent itself
// (agent/e2e).
//
//	ag := clienttest.Register(t, admin, "eu-1")   // a state storage and a runner with a fresh key
//	run := ag.Start(t, dep.ID)                      // claimed, started
//	run.Log(t, "Apply complete!\n")
//	run.Finish(t, api.StatusSucceeded, 0)
package clienttest

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// Agent acts for one registered runner.
type Agent struct {
	baseURL string
	agent   *client.AgentClient
}

// Register creates a kubernetes state storage "<runnerID>-states" and the runner runnerID with
// a new key pair, and returns an agent that signs with that key.
func Register(t testing.TB, admin *client.AdminClient, baseURL, runnerID string) *Agent {
	t.Helper()
	ctx := context.Background()
	pub, priv, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := keys.EncodePublicPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	storage := runnerID + "-states"
	if _, err := admin.CreateStateStorage(ctx, api.StateStorageInput{ID: storage, Type: api.StateStorageKubernetes,
		Kubernetes: &api.KubernetesStateSpec{Namespace: "outpost-states"}}); err != nil {
		t.Fatalf("clienttest: create state storage: %v", err)
	}
	if _, err := admin.CreateRunner(ctx, api.RunnerInput{ID: runnerID, PublicKeys: []string{pubPEM}, StateStorageID: storage,
		Job: api.RunnerJob{Namespace: "outpost-jobs", ServiceAccount: "outpost-job"}}); err != nil {
		t.Fatalf("clienttest: create runner: %v", err)
	}
	ac, err := client.NewAgentClient(baseURL, agentauth.NewSigner(admin.Org(), runnerID, priv))
	if err != nil {
		t.Fatal(err)
	}
	return &Agent{baseURL: baseURL, agent: ac}
}

// Client is the agent's signed client, for the calls Start does not make (state reports).
func (a *Agent) Client() *client.AgentClient { return a.agent }

// Run is one claimed attempt of a deployment.
type Run struct {
	id      string
	attempt int
	fencing int64
	seq     int64
	offset  int64
	agent   *client.AgentClient
	job     *client.JobClient
}

// Start polls until the deployment's attempt is offered, claims it and sends the started event.
func (a *Agent) Start(t testing.TB, deploymentID string) *Run {
	t.Helper()
	r := a.Claim(t, deploymentID)
	r.Started(t)
	return r
}

// Started sends the attempt's started event: its CLI runs.
func (r *Run) Started(t testing.TB) {
	t.Helper()
	r.event(t, api.Event{Type: api.EventStarted})
}

// Waiting sends the waiting event of reason, as the agent does while the attempt's pod waits.
func (r *Run) Waiting(t testing.TB, reason api.Reason, message, detail string) {
	t.Helper()
	seq, ok := api.WaitingSeq(reason)
	if !ok {
		t.Fatalf("clienttest: %s is not a reason an attempt waits for", reason)
	}
	e := api.Event{Attempt: r.attempt, Seq: seq, Type: api.EventProgress, Step: api.StepWaiting, Reason: reason, Message: message, Detail: detail}
	if _, err := r.agent.Event(context.Background(), r.id, api.EventRequest{Fencing: r.fencing, Event: e}); err != nil {
		t.Fatalf("clienttest: waiting event: %v", err)
	}
}

// Claim polls until the deployment's attempt is offered and claims it.
func (a *Agent) Claim(t testing.TB, deploymentID string) *Run {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Agent protocol 6 at most: from 7 on the answer would claim every queued deployment,
		// and this agent takes one at a time.
		p, err := a.agent.Poll(ctx, api.PollRequest{AgentVersion: "clienttest", Instance: "clienttest", CapacityFree: 10, WaitSeconds: 1,
			Protocol: api.ProtocolRange{Min: 1, Max: api.ProtocolClaimInPoll - 1}})
		if err != nil {
			t.Fatalf("clienttest: poll: %v", err)
		}
		for _, o := range p.Offers {
			if o.DeploymentID != deploymentID {
				continue
			}
			c, err := a.agent.Claim(ctx, deploymentID, api.ClaimRequest{Attempt: o.Attempt, Instance: "clienttest"})
			if err != nil {
				t.Fatalf("clienttest: claim: %v", err)
			}
			job, err := client.NewJobClient(a.baseURL, c.JobToken)
			if err != nil {
				t.Fatal(err)
			}
			return &Run{id: deploymentID, attempt: c.Attempt, fencing: c.Lease.Fencing, agent: a.agent, job: job}
		}
		if time.Now().After(deadline) {
			t.Fatalf("clienttest: deployment %s was not offered within 30s", deploymentID)
		}
	}
}

func (r *Run) event(t testing.TB, e api.Event) {
	t.Helper()
	r.seq++
	e.Attempt, e.Seq = r.attempt, r.seq
	if _, err := r.agent.Event(context.Background(), r.id, api.EventRequest{Fencing: r.fencing, Event: e}); err != nil {
		t.Fatalf("clienttest: %s event: %v", e.Type, err)
	}
}

// Log appends text to the deployment's log.
func (r *Run) Log(t testing.TB, text string) {
	t.Helper()
	ack, err := r.job.AppendLog(context.Background(), r.offset, []byte(text))
	if err != nil {
		t.Fatalf("clienttest: append log: %v", err)
	}
	r.offset = ack.CommittedOffset
}

// Outputs uploads the deployment's outputs.
func (r *Run) Outputs(t testing.TB, outs api.Outputs) {
	t.Helper()
	if err := r.job.PutOutputs(context.Background(), outs, 0); err != nil {
		t.Fatalf("clienttest: put outputs: %v", err)
	}
}

// Drift reports a drift check's result, as the job runner of a schedule's check does.
func (r *Run) Drift(t testing.TB, rep api.DriftReport) {
	t.Helper()
	if err := r.job.PutDrift(context.Background(), rep); err != nil {
		t.Fatalf("clienttest: put drift: %v", err)
	}
}

// Finish sends the finished event with result (succeeded, failed or canceled) and exit code.
func (r *Run) Finish(t testing.TB, result api.Status, exitCode int) {
	t.Helper()
	r.event(t, api.Event{Type: api.EventFinished, Result: result, ExitCode: &exitCode, Reason: "clienttest"})
}

// Buffer is a bytes.Buffer that one goroutine may write while another reads it: the output of
// a follower that a test watches.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
