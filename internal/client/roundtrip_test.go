package client_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// routeRecorder maps every request the clients make onto the orchestrator's route patterns, so
// the test can prove it exercised every route the server registers.
type routeRecorder struct {
	mu   sync.Mutex
	mux  *http.ServeMux
	base string
	hit  map[string]int
}

func newRouteRecorder(base string, patterns []string) *routeRecorder {
	r := &routeRecorder{mux: http.NewServeMux(), base: base, hit: map[string]int{}}
	for _, p := range patterns {
		// A state key holds '/': the server's route takes the rest of the path ({key...}),
		// which OpenAPI documents as {key}.
		r.mux.Handle(strings.Replace(p, "{key}", "{key...}", 1), http.NotFoundHandler())
	}
	return r
}

func (r *routeRecorder) hook(_ context.Context, info client.RequestInfo) {
	req, err := http.NewRequestWithContext(context.Background(), info.Method, r.base+info.Path, nil)
	if err != nil {
		return
	}
	_, pattern := r.mux.Handler(req)
	pattern = strings.Replace(pattern, "{key...}", "{key}", 1)
	r.mu.Lock()
	r.hit[pattern]++
	r.mu.Unlock()
}

// documentedRoutes lists the routes of the OpenAPI document as "METHOD /path" patterns.
func documentedRoutes(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for path, item := range doc.Paths {
		for method := range item {
			if method != "parameters" {
				out = append(out, strings.ToUpper(method)+" "+path)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("the OpenAPI document lists no routes")
	}
	return out
}

func tarGz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRoundTripEveryEndpoint drives every route of the reference orchestrator through the Go
// client over real HTTP and checks what comes back.
func TestRoundTripEveryEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := orchestratortest.Start(t)
	routes := documentedRoutes(t)
	rec := newRouteRecorder(o.URL, routes)
	hook := client.WithRequestHook(rec.hook)

	admin, err := client.NewAdminClient(o.URL, "acme", o.AdminToken, hook)
	if err != nil {
		t.Fatal(err)
	}

	// State storages.
	ss, err := admin.CreateStateStorage(ctx, api.StateStorageInput{ID: "k8s", Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: "outpost-state"}})
	if err != nil {
		t.Fatalf("create state storage: %v", err)
	}
	if ss.Kubernetes == nil || ss.Kubernetes.Namespace != "outpost-state" || ss.CreatedAt.IsZero() {
		t.Fatalf("state storage %+v", ss)
	}
	if _, err := admin.CreateStateStorage(ctx, api.StateStorageInput{ID: "k8s", Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: "x"}}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("duplicate state storage: %v, want ErrConflict", err)
	}
	ss2, err := admin.CreateStateStorage(ctx, api.StateStorageInput{ID: "bucket", Type: api.StateStorageS3, S3: &api.S3StateSpec{Bucket: "tf-state", Region: "eu-west-1"}})
	if err != nil {
		t.Fatal(err)
	}
	ss2, err = admin.UpdateStateStorage(ctx, api.StateStorageInput{ID: ss2.ID, Type: api.StateStorageS3, S3: &api.S3StateSpec{Bucket: "tf-state", Region: "eu-west-1", PathPrefix: "teams/a"}})
	if err != nil || ss2.S3.PathPrefix != "teams/a" {
		t.Fatalf("update state storage: %+v, %v", ss2, err)
	}
	if got, err := admin.GetStateStorage(ctx, "bucket"); err != nil || got.S3.PathPrefix != "teams/a" {
		t.Fatalf("get state storage: %+v, %v", got, err)
	}
	if list, err := admin.ListStateStorages(ctx); err != nil || len(list) != 2 {
		t.Fatalf("list state storages: %d, %v", len(list), err)
	}
	if err := admin.DeleteStateStorage(ctx, "bucket"); err != nil {
		t.Fatalf("delete state storage: %v", err)
	}
	if _, err := admin.GetStateStorage(ctx, "bucket"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("deleted state storage: %v, want ErrNotFound", err)
	}

	// Runners.
	pub, priv, _ := keys.Generate()
	pubPEM, _ := keys.EncodePublicPEM(pub)
	tpl := `{"spec":{"containers":[{"name":"main","image":"ghcr.io/acme/tf:1"}]}}`
	r, err := admin.CreateRunner(ctx, api.RunnerInput{
		ID: "eu-1", Description: "first", PublicKeys: []string{pubPEM},
		Job:            api.RunnerJob{Namespace: "outpost-jobs", ServiceAccount: "outpost-job", PodTemplate: tpl},
		StateStorageID: "k8s", MaxConcurrency: 3, JobTimeoutSeconds: 600,
	})
	if err != nil {
		t.Fatalf("create runner: %v", err)
	}
	if r.Type != api.RunnerTypeKubernetesAgent || r.MaxConcurrency != 3 || r.Status.Connected {
		t.Fatalf("runner %+v", r)
	}
	if err := admin.DeleteStateStorage(ctx, "k8s"); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("deleting a storage in use: %v, want ErrConflict", err)
	}
	r, err = admin.UpdateRunner(ctx, api.RunnerInput{
		ID: "eu-1", Description: "second", PublicKeys: []string{pubPEM},
		Job:            api.RunnerJob{Namespace: "outpost-jobs", ServiceAccount: "outpost-job", PodTemplate: tpl},
		StateStorageID: "k8s", MaxConcurrency: 2,
	})
	if err != nil || r.Description != "second" || r.MaxConcurrency != 2 {
		t.Fatalf("update runner: %+v, %v", r, err)
	}
	if list, err := admin.ListRunners(ctx); err != nil || len(list) != 1 || list[0].ID != "eu-1" {
		t.Fatalf("list runners: %+v, %v", list, err)
	}

	// A deployment, claimed and run through the agent and job APIs.
	archive := tarGz(t, map[string]string{"main.tf": `resource "terraform_data" "x" {}`})
	dep, err := admin.CreateDeployment(ctx, api.DeploymentInput{
		RunnerID: "eu-1", Operation: api.OperationApply, StateKey: "team/app",
		Source:    api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive}},
		Variables: map[string]json.RawMessage{"size": json.RawMessage(`3`)},
	})
	if err != nil {
		t.Fatalf("create deployment: %v", err)
	}
	if dep.Status != api.StatusQueued || dep.Attempt != 1 {
		t.Fatalf("new deployment %+v", dep)
	}

	signer := agentauth.NewSigner("acme", "eu-1", priv)
	agent, err := client.NewAgentClient(o.URL, signer, hook)
	if err != nil {
		t.Fatal(err)
	}
	// The offer and the claim request of agents below agent protocol 7 (ProtocolClaimInPoll).
	offerAndClaim := api.ProtocolRange{Min: 1, Max: api.ProtocolClaimInPoll - 1}
	poll, err := agent.Poll(ctx, api.PollRequest{AgentVersion: "test-1", Instance: "pod-a", CapacityFree: 2, WaitSeconds: 5, Protocol: offerAndClaim})
	if err != nil {
		t.Fatalf("poll: %v", err)
	}
	if len(poll.Offers) != 1 || poll.Offers[0].DeploymentID != dep.ID || poll.Offers[0].Operation != api.OperationApply {
		t.Fatalf("offers %+v", poll.Offers)
	}
	claim, err := agent.Claim(ctx, dep.ID, api.ClaimRequest{Attempt: 1, Instance: "pod-a"})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if !strings.HasPrefix(claim.JobToken, api.JobTokenPrefix) || claim.Lease.Fencing < 1 || claim.Placement.StateStorage.ID != "k8s" || claim.Placement.Job.Namespace != "outpost-jobs" {
		t.Fatalf("claim %+v", claim)
	}
	again, err := agent.Claim(ctx, dep.ID, api.ClaimRequest{Attempt: 1, Instance: "pod-a"})
	if err != nil || again.JobToken != claim.JobToken || again.Lease.Fencing != claim.Lease.Fencing {
		t.Fatalf("re-claim by the same instance must be idempotent: %+v, %v", again, err)
	}
	if _, err := agent.Claim(ctx, dep.ID, api.ClaimRequest{Attempt: 1, Instance: "pod-b"}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("claim by another instance: %v, want ErrConflict", err)
	}
	// A poll that restates the held attempt renews its job lease; with no wait it answers at once.
	held := []api.HeldAttempt{{DeploymentID: dep.ID, Attempt: 1, Fencing: claim.Lease.Fencing, Started: true}}
	if renewal, err := agent.Poll(ctx, api.PollRequest{Instance: "pod-a", Held: held}); err != nil || len(renewal.Directives) != 0 {
		t.Fatalf("renewing poll: %+v, %v", renewal, err)
	}
	ev, err := agent.Event(ctx, dep.ID, api.EventRequest{Fencing: claim.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventStarted}})
	if err != nil || ev.Status != api.StatusRunning {
		t.Fatalf("started event: %+v, %v", ev, err)
	}

	job, err := client.NewJobClient(o.URL, claim.JobToken, hook)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := job.Spec(ctx)
	if err != nil || spec.DeploymentID != dep.ID || spec.StateKey != "team/app" || !bytes.Equal(spec.Source.Inline.ArchiveTarGz, archive) || string(spec.Variables["size"]) != "3" {
		t.Fatalf("job spec: %+v, %v", spec, err)
	}
	first := []byte("==> terraform apply\n")
	ack, err := job.AppendLog(ctx, 0, first)
	if err != nil || ack.CommittedOffset != int64(len(first)) {
		t.Fatalf("append log: %+v, %v", ack, err)
	}
	_, err = job.AppendLog(ctx, 100, []byte("gap"))
	var apiErr *api.Error
	if !errors.Is(err, api.ErrOffsetMismatch) || !errors.As(err, &apiErr) || apiErr.CommittedOffset == nil || *apiErr.CommittedOffset != int64(len(first)) {
		t.Fatalf("append at a wrong offset: %v; want ErrOffsetMismatch with committed offset %d", err, len(first))
	}
	second := []byte("Apply complete! Resources: 1 added, 0 changed, 0 destroyed.\n")
	if _, err := job.AppendLog(ctx, int64(len(first)), second); err != nil {
		t.Fatal(err)
	}
	if err := job.PutOutputs(ctx, api.Outputs{"name": {Value: json.RawMessage(`"x"`), Type: json.RawMessage(`"string"`)}, "secret": {Value: json.RawMessage(`"s"`), Sensitive: true}}, 2); err != nil {
		t.Fatalf("put outputs: %v", err)
	}
	// Only a schedule's drift check reports drift.
	if err := job.PutDrift(ctx, api.DriftReport{Drifted: true}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("drift report of an ordinary apply: %v, want ErrConflict", err)
	}
	zero := 0
	ev, err = agent.Event(ctx, dep.ID, api.EventRequest{Fencing: claim.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 2, Type: api.EventFinished, Result: api.StatusSucceeded, ExitCode: &zero}})
	if err != nil || ev.Status != api.StatusSucceeded {
		t.Fatalf("finished event: %+v, %v", ev, err)
	}
	// The same event again is acknowledged, not applied twice.
	if ev, err := agent.Event(ctx, dep.ID, api.EventRequest{Fencing: claim.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 2, Type: api.EventFinished, Result: api.StatusSucceeded, ExitCode: &zero}}); err != nil || ev.Status != api.StatusSucceeded {
		t.Fatalf("duplicate finished event: %+v, %v", ev, err)
	}
	// In a batch, the same event is acknowledged again and a stale one refused on its own, with
	// the error it would have had alone.
	results, err := agent.Events(ctx, []api.DeploymentEvent{
		{DeploymentID: dep.ID, EventRequest: api.EventRequest{Fencing: claim.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 2, Type: api.EventFinished, Result: api.StatusSucceeded, ExitCode: &zero}}},
		{DeploymentID: dep.ID, EventRequest: api.EventRequest{Fencing: claim.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 7, Type: api.EventProgress}}},
	})
	if err != nil || len(results) != 2 || results[0].Err() != nil || results[0].Response.Status != api.StatusSucceeded || !errors.Is(results[1].Err(), api.ErrConflict) {
		t.Fatalf("event batch: %+v, %v; want the resend acknowledged and the late progress event refused with ErrConflict", results, err)
	}

	// The agent reports the state the attempt wrote: versions and lock holder, read back per key.
	written := time.Now().UTC().Truncate(time.Second)
	rep := api.StateReport{Namespace: "outpost-state", States: []api.ReportedState{{StateKey: "team/app",
		Versions: []api.StateVersion{{Generation: 2, Serial: 4, Lineage: "L", Size: 900, Resources: 3, DeploymentID: dep.ID, Attempt: 1, Source: "write", WrittenAt: written}},
		Lock:     &api.StateLock{DeploymentID: dep.ID, Attempt: 1, Pod: "dep-x-1-abcde", Holder: "job/" + dep.ID + "/1", AcquiredAt: written, ExpiresAt: written.Add(time.Minute)}}}}
	if err := agent.ReportStates(ctx, rep); err != nil {
		t.Fatalf("report states: %v", err)
	}
	if err := agent.ReportStates(ctx, api.StateReport{Namespace: "elsewhere", States: rep.States}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("report for another namespace than the runner's state storage: %v, want ErrConflict", err)
	}
	st, err := admin.GetState(ctx, "k8s", "team/app")
	if err != nil || len(st.Versions) != 1 || st.Versions[0].Resources != 3 || st.Lock == nil || st.Lock.Pod != "dep-x-1-abcde" || st.RunnerID != "eu-1" {
		t.Fatalf("get state: %+v, %v", st, err)
	}
	if list, err := admin.ListStates(ctx, "k8s"); err != nil || len(list) != 1 || list[0].StateKey != "team/app" {
		t.Fatalf("list states: %+v, %v", list, err)
	}
	if _, err := admin.GetState(ctx, "k8s", "team/other"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("unreported state: %v, want ErrNotFound", err)
	}

	// Schedules of drift checks.
	sin := api.ScheduleInput{ID: "nightly", RunnerID: "eu-1", Cron: "0 3 * * *", StateKey: "team/app", Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive}}}
	if sch, err := admin.CreateSchedule(ctx, sin); err != nil || sch.NextFireAt.Hour() != 3 || sch.StateStorageID != "k8s" {
		t.Fatalf("create schedule: %+v, %v", sch, err)
	}
	sin.Cron = "@hourly"
	if sch, err := admin.UpdateSchedule(ctx, sin); err != nil || sch.Cron != "@hourly" {
		t.Fatalf("update schedule: %+v, %v", sch, err)
	}
	if sch, err := admin.GetSchedule(ctx, "nightly"); err != nil || !bytes.Equal(sch.Source.Inline.ArchiveTarGz, archive) {
		t.Fatalf("get schedule: %+v, %v", sch, err)
	}
	if list, err := admin.ListSchedules(ctx); err != nil || len(list) != 1 || list[0].ID != "nightly" {
		t.Fatalf("list schedules: %+v, %v", list, err)
	}
	if err := admin.DeleteSchedule(ctx, "nightly"); err != nil {
		t.Fatalf("delete schedule: %v", err)
	}
	if _, err := admin.GetSchedule(ctx, "nightly"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("deleted schedule: %v, want ErrNotFound", err)
	}

	// A state operation: asked for, taken by the agent's poll, answered, read back.
	sop, err := admin.CreateStateOperation(ctx, "k8s", api.StateOperationRequest{StateKey: "team/app",
		StateOperationInput: api.StateOperationInput{Kind: api.StateOperationDiff, Generation: 1, ToGeneration: 2}})
	if err != nil || sop.Status != api.StateOperationQueued {
		t.Fatalf("create state operation: %+v, %v", sop, err)
	}
	polled, err := agent.Poll(ctx, api.PollRequest{AgentVersion: "test-1", Instance: "agent-0", Held: []api.HeldAttempt{}})
	if err != nil || len(polled.StateOperations) != 1 || polled.StateOperations[0].ID != sop.ID || polled.StateOperations[0].Namespace != "outpost-state" {
		t.Fatalf("poll with a state operation: %+v, %v", polled, err)
	}
	diff := &api.StateDiff{From: 1, To: 2, FromSerial: 3, ToSerial: 4, Added: []string{"terraform_data.c"}, Removed: []string{}, Changed: []string{},
		OutputsAdded: []string{}, OutputsRemoved: []string{}, OutputsChanged: []string{}}
	if _, err := agent.StateOperationResult(ctx, sop.ID, api.StateOperationResult{Status: api.StateOperationDone, StateOperationOutcome: api.StateOperationOutcome{Diff: diff}}); err != nil {
		t.Fatalf("state operation result: %v", err)
	}
	if got, err := admin.GetStateOperation(ctx, sop.ID); err != nil || got.Status != api.StateOperationDone || got.Diff == nil || got.Diff.Added[0] != "terraform_data.c" {
		t.Fatalf("get state operation: %+v, %v", got, err)
	}
	if list, err := admin.ListStateOperations(ctx, "k8s", "team/app", api.StateOperationDiff); err != nil || len(list) != 1 {
		t.Fatalf("list state operations: %+v, %v", list, err)
	}

	// Admin reads of the finished deployment.
	got, err := admin.GetDeployment(ctx, dep.ID)
	if err != nil || got.Status != api.StatusSucceeded || got.ExitCode == nil || *got.ExitCode != 0 || got.StartedAt == nil || got.FinishedAt == nil ||
		got.OutputsOmitted != 2 {
		t.Fatalf("deployment after run: %+v, %v", got, err)
	}
	logs, err := admin.GetLogs(ctx, dep.ID, 0, 0)
	if err != nil || string(logs.Data) != string(first)+string(second) || !logs.Complete {
		t.Fatalf("logs: %q complete=%v, %v", logs.Data, logs.Complete, err)
	}
	outs, err := admin.GetOutputs(ctx, dep.ID)
	if err != nil || string(outs["name"].Value) != `"x"` || !outs["secret"].Sensitive {
		t.Fatalf("outputs: %+v, %v", outs, err)
	}
	events, err := admin.ListEvents(ctx, dep.ID)
	// The claim is the timeline's first step, recorded by the orchestrator.
	if err != nil || len(events) != 3 || events[0].Step != api.StepClaimed || events[1].Type != api.EventStarted || events[1].Step != api.StepCLIStarted ||
		events[2].Type != api.EventFinished || events[2].Step != api.StepFinished {
		t.Fatalf("events (duplicates must not be stored twice): %+v, %v", events, err)
	}
	if list, err := admin.ListDeployments(ctx, client.DeploymentFilter{RunnerID: "eu-1", Status: api.StatusSucceeded}); err != nil || len(list) != 1 {
		t.Fatalf("list deployments: %d, %v", len(list), err)
	}
	if _, err := admin.CancelDeployment(ctx, dep.ID); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("cancel of a finished deployment: %v, want ErrConflict", err)
	}
	var followed bytes.Buffer
	if _, final, err := admin.FollowLogs(ctx, dep.ID, &followed, client.FollowOptions{Interval: 10 * time.Millisecond}); err != nil || final.Status != api.StatusSucceeded || followed.String() != string(first)+string(second) {
		t.Fatalf("follow logs: %q, %v", followed.String(), err)
	}

	// A saved plan: kept, summarised, approved, applied; another discarded.
	planned, err := admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "eu-1", Operation: api.OperationPlan, StateKey: "team/app", SavePlan: true,
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive}}})
	if err != nil || !planned.SavePlan || planned.PlanTTLSeconds != api.DefaultPlanTTLSeconds {
		t.Fatalf("create a save_plan plan: %+v, %v", planned, err)
	}
	if _, err := agent.Poll(ctx, api.PollRequest{Instance: "pod-a", CapacityFree: 1, Protocol: api.AgentProtocols()}); err != nil {
		t.Fatal(err)
	}
	pc, err := agent.Claim(ctx, planned.ID, api.ClaimRequest{Attempt: 1, Instance: "pod-a"})
	if err != nil || !pc.Placement.SavePlan {
		t.Fatalf("claim of a save_plan plan: %+v, %v", pc, err)
	}
	planJob, err := client.NewJobClient(o.URL, pc.JobToken, hook)
	if err != nil {
		t.Fatal(err)
	}
	if err := planJob.PutPlanSummary(ctx, api.PlanSummary{Lineage: "L", Serial: 4, Counts: api.PlanCounts{Update: 1},
		ResourceChanges: []api.ResourceChange{{Address: "terraform_data.x", Action: api.PlanUpdate, Attributes: []string{"input"}}}}); err != nil {
		t.Fatalf("put plan summary: %v", err)
	}
	if _, err := agent.Event(ctx, planned.ID, api.EventRequest{Fencing: pc.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 2, Type: api.EventFinished, Result: api.StatusSucceeded, ExitCode: &zero}}); err != nil {
		t.Fatal(err)
	}
	if sp, err := admin.GetPlan(ctx, planned.ID); err != nil || sp.Status != api.PlanReady || sp.Summary.Counts.Update != 1 {
		t.Fatalf("get plan: %+v, %v", sp, err)
	}
	if sp, err := admin.ApprovePlan(ctx, planned.ID); err != nil || sp.Status != api.PlanApproved || sp.ApprovedBy == "" {
		t.Fatalf("approve plan: %+v, %v", sp, err)
	}
	applied, err := admin.ApplyPlan(ctx, planned.ID)
	if err != nil || applied.PlanOf != planned.ID || applied.Operation != api.OperationApply {
		t.Fatalf("apply plan: %+v, %v", applied, err)
	}
	if _, err := admin.ApplyPlan(ctx, planned.ID); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("second apply of a plan: %v, want ErrConflict", err)
	}
	unwanted, err := admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "eu-1", Operation: api.OperationPlan, StateKey: "team/app", SavePlan: true,
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive}}})
	if err != nil {
		t.Fatal(err)
	}
	if sp, err := admin.DiscardPlan(ctx, unwanted.ID); err != nil || sp.Status != api.PlanDiscarded {
		t.Fatalf("discard plan: %+v, %v", sp, err)
	}

	// A queued deployment canceled at once; then the runner goes.
	queued, err := admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "eu-1", Operation: api.OperationPlan, StateKey: "team/app", Source: api.Source{Git: &api.GitSource{URL: "https://git.example.com/infra.git", Ref: "main", Path: "stacks/app"}}})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := admin.CancelDeployment(ctx, queued.ID); err != nil || c.Status != api.StatusCanceled {
		t.Fatalf("cancel queued: %+v, %v", c, err)
	}
	if r, err := admin.GetRunner(ctx, "eu-1"); err != nil || !r.Status.Connected || r.Status.AgentVersion != "test-1" || r.Status.KeyFingerprint != signer.Fingerprint() || r.Status.LastSeenAt == nil {
		t.Fatalf("runner status after agent traffic: %+v, %v", r.Status, err)
	}
	if err := admin.DeleteRunner(ctx, "eu-1"); err != nil {
		t.Fatalf("delete runner: %v", err)
	}
	if _, err := admin.GetRunner(ctx, "eu-1"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("deleted runner: %v, want ErrNotFound", err)
	}

	// Organisation tokens: created by the bootstrap token, usable on their organisation only,
	// revoked.
	tok, err := admin.CreateToken(ctx, "ci")
	if err != nil || !strings.HasPrefix(tok.Token, api.OrgTokenPrefix) || tok.Name != "ci" {
		t.Fatalf("create token: %+v, %v", tok, err)
	}
	if _, err := admin.CreateToken(ctx, "ci"); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("duplicate token name: %v, want ErrConflict", err)
	}
	if list, err := admin.ListTokens(ctx); err != nil || len(list) != 1 || list[0].ID != tok.ID {
		t.Fatalf("list tokens: %+v, %v", list, err)
	}
	scoped, err := client.NewAdminClient(o.URL, "acme", tok.Token, hook)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scoped.ListRunners(ctx); err != nil {
		t.Fatalf("organisation token on its organisation: %v", err)
	}
	if _, err := scoped.ListTokens(ctx); !errors.Is(err, api.ErrForbidden) {
		t.Fatalf("organisation token managing tokens: %v, want ErrForbidden", err)
	}
	other, err := client.NewAdminClient(o.URL, "beta", tok.Token, hook)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.ListRunners(ctx); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("organisation token on another organisation: %v, want ErrNotFound", err)
	}
	if err := admin.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatalf("revoke token: %v", err)
	}
	if _, err := scoped.ListRunners(ctx); !errors.Is(err, api.ErrUnauthorized) {
		t.Fatalf("revoked token: %v, want ErrUnauthorized", err)
	}

	// Every route (apart from health and metrics) was exercised. The OpenAPI document lists
	// exactly the routes the server registers (the orchestrator's TestOpenAPICoversRoutes).
	for _, p := range routes {
		if strings.HasSuffix(p, "/healthz") || strings.HasSuffix(p, "/metrics") {
			continue
		}
		if rec.hit[p] == 0 {
			t.Errorf("route %q was not exercised by the round trip", p)
		}
	}
}
